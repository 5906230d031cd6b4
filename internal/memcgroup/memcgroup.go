// Package memcgroup runs a process under a memory limit that the kernel
// enforces, as a container's limit is: a group of the cgroup memory
// controller (v1, memory.limit_in_bytes, or v2, memory.max) with swap
// held to the same limit, so that going over it ends in the OOM killer
// and not in swapping. It then reads what the group used: its peak, the
// times usage reached the limit, and its OOM kills.
//
// It is test support, for the tests that show a binary stays inside the
// memory its deployment gives it. Creating a group needs root (or a
// delegated subtree); every error says what was missing, so that a test
// can fail with the reason instead of passing without the limit. It does
// not replace bench/e2e's v1 group, which also reads failcnt per run for
// its table.
package memcgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Root is where the cgroup file system is mounted.
const Root = "/sys/fs/cgroup"

// cgroup2Magic is the f_type of a cgroup v2 file system (statfs(2)).
const cgroup2Magic = 0x63677270

// Version returns 2 when root is a cgroup v2 (unified) mount, 1 when it
// holds a v1 memory controller (root/memory), or an error saying what it
// found.
func Version(root string) (int, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(root, &st); err != nil {
		return 0, fmt.Errorf("memcgroup: statfs %s: %w", root, err)
	}
	if st.Type == cgroup2Magic {
		return 2, nil
	}
	if _, err := os.Stat(filepath.Join(root, "memory", "memory.limit_in_bytes")); err != nil {
		return 0, fmt.Errorf("memcgroup: %s is neither a cgroup v2 mount nor holds a v1 memory controller: %w", root, err)
	}
	return 1, nil
}

// Group is a memory cgroup this package created.
type Group struct {
	dir     string
	version int
}

// New creates the group name under the memory controller mounted at root
// (normally Root) with a limit of limit bytes, swap included. It fails,
// with the reason, when there is no memory controller, when it may not
// create the group (not root), or when the limit does not read back.
func New(root, name string, limit int64) (*Group, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("memcgroup: limit %d is not positive", limit)
	}
	v, err := Version(root)
	if err != nil {
		return nil, err
	}
	parent := root
	if v == 1 {
		parent = filepath.Join(root, "memory")
	} else {
		ctl, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
		if err != nil || !slices.Contains(strings.Fields(string(ctl)), "memory") {
			return nil, fmt.Errorf("memcgroup: the cgroup v2 mount %s does not offer the memory controller (cgroup.controllers: %q, %v)", root, ctl, err)
		}
		// Children get the memory controller only if the parent hands it
		// down; in a container whose own group holds processes the kernel
		// refuses (EBUSY), and the error says so.
		if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+memory"), 0o644); err != nil {
			return nil, fmt.Errorf("memcgroup: enable the memory controller for the children of %s: %w", root, err)
		}
	}
	g := &Group{dir: filepath.Join(parent, name), version: v}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, fmt.Errorf("memcgroup: create %s (needs root): %w", g.dir, err)
	}
	limitFile, swapFile, swapValue := "memory.max", "memory.swap.max", "0"
	if v == 1 {
		// memsw is memory plus swap, and may not be set below the memory
		// limit: set the memory limit first.
		limitFile, swapFile, swapValue = "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", strconv.FormatInt(limit, 10)
	}
	if err := g.write(limitFile, strconv.FormatInt(limit, 10)); err != nil {
		_ = g.Remove()
		return nil, err
	}
	if got, err := g.read(limitFile); err != nil || got != limit {
		_ = g.Remove()
		return nil, fmt.Errorf("memcgroup: %s reads back %d (%v), want %d", limitFile, got, err, limit)
	}
	// Without swap accounting (or swap) the file is absent: nothing to hold.
	if _, err := os.Stat(filepath.Join(g.dir, swapFile)); err == nil {
		if err := g.write(swapFile, swapValue); err != nil {
			_ = g.Remove()
			return nil, err
		}
	}
	return g, nil
}

// Dir returns the group's directory.
func (g *Group) Dir() string { return g.dir }

// Version returns the cgroup version of the group, 1 or 2.
func (g *Group) Version() int { return g.version }

// Command returns a command that runs name with args inside the group: a
// shell writes its own pid to the group's cgroup.procs and then execs
// name, so the process is charged from its first instruction and its pid
// is the command's.
func (g *Group) Command(name string, args ...string) *exec.Cmd {
	argv := append([]string{"-c", `echo $$ > "$1" && shift && exec "$@"`, "sh", filepath.Join(g.dir, "cgroup.procs"), name}, args...)
	return exec.Command("/bin/sh", argv...)
}

// Holds reports whether pid is in the group.
func (g *Group) Holds(pid int) bool {
	b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
	if err != nil {
		return false
	}
	return slices.Contains(strings.Fields(string(b)), strconv.Itoa(pid))
}

// Stats are what a group used.
type Stats struct {
	// Limit is the memory limit in bytes.
	Limit int64
	// Usage is the memory charged to the group now, in bytes.
	Usage int64
	// Peak is the most memory charged to the group at once since it was
	// created, in bytes (v1 memory.max_usage_in_bytes, v2 memory.peak):
	// what the limit was enforced against.
	Peak int64
	// LimitHits counts the times usage reached the limit and the kernel had
	// to reclaim (v1 memory.failcnt, v2 the max line of memory.events).
	LimitHits int64
	// OOMKills counts the processes of the group the OOM killer ended
	// (the oom_kill line of v1 memory.oom_control or v2 memory.events);
	// -1 when the kernel does not report it.
	OOMKills int64
}

// Stats reads the group's counters.
func (g *Group) Stats() (Stats, error) {
	s := Stats{OOMKills: -1}
	var err error
	if g.version == 1 {
		if s.Limit, err = g.read("memory.limit_in_bytes"); err != nil {
			return s, err
		}
		if s.Usage, err = g.read("memory.usage_in_bytes"); err != nil {
			return s, err
		}
		if s.Peak, err = g.read("memory.max_usage_in_bytes"); err != nil {
			return s, err
		}
		if s.LimitHits, err = g.read("memory.failcnt"); err != nil {
			return s, err
		}
		if n, ok, err := g.key("memory.oom_control", "oom_kill"); err == nil && ok {
			s.OOMKills = n
		}
		return s, nil
	}
	if s.Limit, err = g.read("memory.max"); err != nil {
		return s, err
	}
	if s.Usage, err = g.read("memory.current"); err != nil {
		return s, err
	}
	if s.Peak, err = g.read("memory.peak"); err != nil {
		return s, fmt.Errorf("%w (memory.peak needs Linux 5.19)", err)
	}
	if n, ok, err := g.key("memory.events", "max"); err != nil {
		return s, err
	} else if ok {
		s.LimitHits = n
	}
	if n, ok, err := g.key("memory.events", "oom_kill"); err == nil && ok {
		s.OOMKills = n
	}
	return s, nil
}

// Remove deletes the group; its processes must have exited. The kernel
// lets go of an exited process a moment later, so it tries again for up to
// five seconds.
func (g *Group) Remove() error {
	var err error
	for range 50 {
		if err = os.Remove(g.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // the kernel offers nothing to wait on
	}
	return fmt.Errorf("memcgroup: remove %s: %w", g.dir, err)
}

func (g *Group) write(file, value string) error {
	if err := os.WriteFile(filepath.Join(g.dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("memcgroup: write %s to %s: %w", value, filepath.Join(g.dir, file), err)
	}
	return nil
}

// read returns the integer in a one-value file; "max" (v2's no limit)
// reads as -1.
func (g *Group) read(file string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(g.dir, file))
	if err != nil {
		return 0, fmt.Errorf("memcgroup: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "max" {
		return -1, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("memcgroup: %s: %w", file, err)
	}
	return n, nil
}

// key returns the value of the "key value" line of a flat-keyed file.
func (g *Group) key(file, key string) (int64, bool, error) {
	f, err := os.Open(filepath.Join(g.dir, file))
	if err != nil {
		return 0, false, fmt.Errorf("memcgroup: %w", err)
	}
	defer f.Close()
	return parseKey(f, file, key)
}

// parseKey reads the value of key from r, a flat-keyed file named file.
func parseKey(r io.Reader, file, key string) (int64, bool, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || k != key {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("memcgroup: %s: %s %q: %w", file, key, v, err)
		}
		return n, true, nil
	}
	return 0, false, sc.Err()
}
