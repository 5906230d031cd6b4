package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a binary running under `/usr/bin/time -v -o <file>`. GNU time
// dies on SIGTERM without writing its report, so stop signals the binary
// itself (time's child) and lets time exit on its own.
type proc struct {
	name     string
	cmd      *exec.Cmd
	timePath string
	logPath  string
	log      *os.File
	done     chan struct{} // closed when time has exited
	waitErr  error         // set before done is closed
}

// startProc starts argv under timeBin, with env added to the harness's
// environment (later entries win) and the output in dir/name.log.
func startProc(timeBin, dir, name string, argv, env []string) (*proc, error) {
	p := &proc{
		name:     name,
		timePath: filepath.Join(dir, name+".time"),
		logPath:  filepath.Join(dir, name+".log"),
		done:     make(chan struct{}),
	}
	var err error
	if p.log, err = os.Create(p.logPath); err != nil {
		return nil, err
	}
	args := append([]string{"-v", "-o", p.timePath}, argv...)
	p.cmd = exec.Command(timeBin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		p.log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		p.log.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for time to exit, at most d; it reports whether it did.
func (p *proc) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// stop sends SIGTERM to the binary and waits up to grace for it to finish;
// past that it kills it (and time, if time is somehow still there). It is
// safe to call more than once.
func (p *proc) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	child, err := childOf(p.cmd.Process.Pid, 2*time.Second)
	if err != nil {
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("stop %s: %w", p.name, err)
	}
	if err := syscall.Kill(child, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s: SIGTERM pid %d: %w", p.name, child, err)
	}
	if p.wait(grace) {
		return nil
	}
	_ = syscall.Kill(child, syscall.SIGKILL)
	if !p.wait(5 * time.Second) {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return fmt.Errorf("stop %s: still running %s after SIGTERM; killed", p.name, grace)
}

// usage reads time's report; call it after the process has exited.
func (p *proc) usage() (usage, error) {
	return readTimeV(p.timePath)
}

// logTail returns the last n lines of the process's output, for errors.
func (p *proc) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// childOf polls until the process pid has a child and returns the child's
// pid: time forks before it execs the binary.
func childOf(pid int, within time.Duration) (int, error) {
	deadline := time.Now().Add(within)
	for {
		if c, ok := findChild(pid); ok {
			return c, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no child of pid %d after %s", pid, within)
		}
		time.Sleep(10 * time.Millisecond) // polling /proc: there is nothing to wait on
	}
}

// findChild returns one child of pid, from /proc/<pid>/task/<pid>/children
// when the kernel has it, else by scanning /proc/*/stat.
func findChild(pid int) (int, bool) {
	p := strconv.Itoa(pid)
	if b, err := os.ReadFile(filepath.Join("/proc", p, "task", p, "children")); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if c, err := strconv.Atoi(f[0]); err == nil {
				return c, true
			}
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if pp, err := ppidFromStat(string(b)); err == nil && pp == pid {
			return c, true
		}
	}
	return 0, false
}

// ppidFromStat reads the parent pid from a /proc/<pid>/stat line:
// "pid (comm) state ppid ...", where comm may hold spaces and parentheses.
func ppidFromStat(stat string) (int, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("stat: no ')'")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 2 {
		return 0, errors.New("stat: too few fields")
	}
	return strconv.Atoi(f[1])
}
