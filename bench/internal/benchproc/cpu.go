package benchproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPU time from /proc. A process's CPU is utime+stime of /proc/<pid>/stat;
// a process tree's (PostgreSQL's postmaster, Postfix's master) is the
// parent's utime+stime+cutime+cstime plus utime+stime of its live children:
// a child that exits between two readings is reaped by the parent and moves
// into its cutime/cstime, so the difference of two readings counts it once
// whether it lived across them, started between them or ended between
// them.

// userHZ is the kernel's USER_HZ, the unit of /proc/<pid>/stat times: 100
// on every Linux architecture Go supports.
const userHZ = 100

// statTimes are the CPU fields of /proc/<pid>/stat, in clock ticks.
type statTimes struct {
	ppid                         int
	utime, stime, cutime, cstime uint64
}

// parseStat reads a /proc/<pid>/stat line: "pid (comm) state ppid ...",
// where comm may hold spaces and parentheses; utime is field 14.
func parseStat(stat string) (statTimes, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return statTimes{}, errors.New("stat: no ')'")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 15 {
		return statTimes{}, errors.New("stat: too few fields")
	}
	var t statTimes
	var err error
	if t.ppid, err = strconv.Atoi(f[1]); err != nil {
		return statTimes{}, fmt.Errorf("stat: ppid: %w", err)
	}
	for j, dst := range []*uint64{&t.utime, &t.stime, &t.cutime, &t.cstime} {
		if *dst, err = strconv.ParseUint(f[11+j], 10, 64); err != nil {
			return statTimes{}, fmt.Errorf("stat: field %d: %w", 14+j, err)
		}
	}
	return t, nil
}

func ticks(n uint64) time.Duration { return time.Duration(n) * time.Second / userHZ }

func readStat(pid int) (statTimes, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return statTimes{}, err
	}
	return parseStat(string(b))
}

// CPU is the CPU time pid has used itself (all its threads).
func CPU(pid int) (time.Duration, error) {
	t, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	return ticks(t.utime + t.stime), nil
}

// TreeCPU is the CPU time of pid, of its reaped children and of its live
// children. The children are read before the parent, so a child that exits
// between the two reads is counted twice (a few ticks), never missed.
func TreeCPU(pid int) (time.Duration, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var children uint64
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil || c == pid {
			continue
		}
		t, err := readStat(c)
		if err != nil || t.ppid != pid {
			continue // gone, or not a child
		}
		children += t.utime + t.stime
	}
	t, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	return ticks(t.utime + t.stime + t.cutime + t.cstime + children), nil
}

// PIDFromFile reads the first line of a pid file (PostgreSQL's
// postmaster.pid has more lines after it).
func PIDFromFile(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s: no pid on its first line", path)
	}
	return pid, nil
}
