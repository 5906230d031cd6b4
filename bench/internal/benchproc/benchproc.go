// Package benchproc gives the benchmark harnesses the processes they
// measure: starting a binary with its output in a log file, stopping it with
// SIGTERM and a grace, and reading its memory and CPU time from /proc while
// it runs (a process tree's too, for shared services like PostgreSQL). It
// owns nothing else: what to run and what to measure stay with each harness.
package benchproc

import (
	"cmp"
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
	name    string
	cmd     *exec.Cmd
	logPath string
	wrapper bool
	done    chan struct{} // closed when the process has exited and the log is closed
}

// Spec says what Start runs.
type Spec struct {
	// Name names the process in errors; empty means Bin.
	Name string
	Bin  string
	Args []string
	// Env is added to the harness's environment; later entries win.
	Env []string
	// Isolate leaves the harness's own POSTLINE_* variables out of the
	// environment, so that a run's settings cannot leak in from the shell.
	Isolate bool
	// LogPath is the file that receives the process's stdout and stderr.
	LogPath string
	// Wrapper says that Bin runs the measured binary as its one child and
	// must be let exit on its own: GNU time dies on SIGTERM without writing
	// its report. Stop then signals the child, Target names it, and Kill
	// kills both.
	Wrapper bool
}

// Start runs the process of spec.
func Start(spec Spec) (*Proc, error) {
	log, err := os.Create(spec.LogPath)
	if err != nil {
		return nil, err
	}
	p := &Proc{name: cmp.Or(spec.Name, spec.Bin), cmd: exec.Command(spec.Bin, spec.Args...), logPath: spec.LogPath,
		wrapper: spec.Wrapper, done: make(chan struct{})}
	p.cmd.Env = append(environ(os.Environ(), spec.Isolate), spec.Env...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", p.name, err)
	}
	go func() {
		_ = p.cmd.Wait() // the exit status is in the log; Stop reports a kill
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// environ is the harness's environment env, without its POSTLINE_*
// variables when isolate is set.
func environ(env []string, isolate bool) []string {
	if !isolate {
		return env
	}
	var kept []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "POSTLINE_") {
			kept = append(kept, kv)
		}
	}
	return kept
}

// Name is the name the process goes by in errors.
func (p *Proc) Name() string { return p.name }

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

// childWait bounds how long Target waits for a wrapper's child: the
// wrapper forks it at once.
const childWait = 5 * time.Second

// Target is the pid of the measured binary: the process itself, or a
// Wrapper's child.
func (p *Proc) Target() (int, error) {
	if !p.wrapper {
		return p.Pid(), nil
	}
	return childOf(p.Pid(), childWait)
}

// Wait waits at most d for the process to end and reports whether it did.
func (p *Proc) Wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// Stop sends SIGTERM to the measured binary (see Target) and waits up to
// grace for the process to end, then kills it. It is safe to call more
// than once.
func (p *Proc) Stop(grace time.Duration) error {
	if p.Exited() {
		return nil
	}
	target, err := p.Target()
	if err != nil {
		p.Kill()
		return fmt.Errorf("stop %s: %w", p.name, err)
	}
	if err := p.terminate(target); err != nil {
		return fmt.Errorf("stop %s: SIGTERM pid %d: %w", p.name, target, err)
	}
	if p.Wait(grace) {
		return nil
	}
	p.Kill()
	return fmt.Errorf("stop %s (pid %d): still running %s after SIGTERM; killed (log %s)", p.name, target, grace, p.logPath)
}

// terminate sends SIGTERM to target; one that has already ended is no
// error.
func (p *Proc) terminate(target int) error {
	if !p.wrapper {
		// Through the process handle: its pid cannot have been reused.
		if err := p.cmd.Process.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
			return err
		}
		return nil
	}
	if err := syscall.Kill(target, syscall.SIGTERM); !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// Kill kills the process (a Wrapper's child first, giving the wrapper a
// moment to exit after it) and waits until it has ended.
func (p *Proc) Kill() {
	if p.wrapper {
		if c, ok := findChild(p.Pid()); ok {
			_ = syscall.Kill(c, syscall.SIGKILL)
			if p.Wait(5 * time.Second) {
				return
			}
		}
	}
	_ = p.cmd.Process.Kill()
	<-p.done
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
