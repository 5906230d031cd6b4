// Package benchproc gives the benchmark harnesses the processes they
// measure: starting a binary with its output in a log file, stopping it with
// SIGTERM and a grace, and reading its memory and CPU time from /proc while
// it runs (a process tree's too, for shared services like PostgreSQL). It
// owns nothing else: what to run and what to measure stay with each harness.
package benchproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc is one running process.
type Proc struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
}

// Start runs bin with env added to the harness's environment (later entries
// win) and its stdout and stderr in logPath.
func Start(bin, logPath string, env []string) (*Proc, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &Proc{cmd: exec.Command(bin), logPath: logPath, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		_ = p.cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// LogPath is the file holding the process's output.
func (p *Proc) LogPath() string { return p.logPath }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM and waits up to grace, then kills the process. It is
// safe to call more than once.
func (p *Proc) Stop(grace time.Duration) error {
	if p.Exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop pid %d: %w", p.Pid(), err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("stop pid %d: still running %s after SIGTERM; killed (log %s)", p.Pid(), grace, p.logPath)
	}
}

// CPU is the process's user plus system time; zero before it exited.
func (p *Proc) CPU() time.Duration {
	if !p.Exited() || p.cmd.ProcessState == nil {
		return 0
	}
	s := p.cmd.ProcessState
	return s.UserTime() + s.SystemTime()
}

// LogTail returns the last n lines of the process's output, for errors.
func (p *Proc) LogTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Memory is what /proc/<pid>/status says of a process's memory, in bytes.
type Memory struct {
	RSS  int64 // VmRSS: resident now
	Peak int64 // VmHWM: the most resident so far
}

// ReadMemory reads the memory of the running process pid: one small file,
// the same cost however long the process has run.
func ReadMemory(pid int) (Memory, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return Memory{}, err
	}
	return ParseStatus(string(b))
}

// ParseStatus reads VmRSS and VmHWM from the text of a /proc/<pid>/status
// file, whose sizes are in kB (KiB).
func ParseStatus(status string) (Memory, error) {
	var (
		m            Memory
		rssOK, hwmOK bool
	)
	for line := range strings.Lines(status) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("status: %s: unexpected %q", k, strings.TrimSpace(v))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("status: %s: %w", k, err)
		}
		if k == "VmRSS" {
			m.RSS, rssOK = kb*1024, true
		} else {
			m.Peak, hwmOK = kb*1024, true
		}
	}
	if !rssOK || !hwmOK {
		return Memory{}, errors.New("status: no VmRSS or VmHWM (a kernel thread, or the process has exited)")
	}
	return m, nil
}
