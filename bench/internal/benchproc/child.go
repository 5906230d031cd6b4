package benchproc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// childOf polls until the process pid has a child and returns the child's
// pid: a wrapper forks before it execs the binary.
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
