package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/postline/postline/bench/internal/benchmetrics"
)

// Whole-pipeline CPU: every process a mail passes through, sampled from
// /proc over one variant's delivery window. A process's CPU is utime+stime
// of /proc/<pid>/stat; a process tree's (PostgreSQL's postmaster, Postfix's
// master) is the parent's utime+stime+cutime+cstime plus utime+stime of its
// live children: a child that exits in the window is reaped by the parent
// and moves into its cutime/cstime, so the difference of two samples counts
// it once whether it lived across the window, started in it or ended in it.

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

// processCPU is the CPU time pid has used itself (all its threads).
func processCPU(pid int) (time.Duration, error) {
	t, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	return ticks(t.utime + t.stime), nil
}

// treeCPU is the CPU time of pid, of its reaped children and of its live
// children. The children are read before the parent, so a child that exits
// between the two reads is counted twice (a few ticks), never missed.
func treeCPU(pid int) (time.Duration, error) {
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

// component is one shared process of the pipeline, found by its pid file.
type component struct {
	name    string // kafka, postgres, sink
	pidFile string
	tree    bool // count its children (PostgreSQL's backends)
}

// pidFromFile reads the first line of a pid file (PostgreSQL's
// postmaster.pid has more lines after it).
func pidFromFile(path string) (int, error) {
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

// components are the shared processes whose CPU every row of the table
// counts in its pipeline figure, as far as the options name them.
func (o options) components() []component {
	var cs []component
	for _, c := range []component{
		{name: "kafka", pidFile: o.kafkaPIDFile},
		{name: "postgres", pidFile: o.postgresPIDFile, tree: true},
		{name: "sink", pidFile: o.sinkPIDFile},
	} {
		if c.pidFile != "" {
			cs = append(cs, c)
		}
	}
	return cs
}

// sinkComponent is the smtp-sink alone: the one shared service in the path
// of the rows that use neither Kafka nor PostgreSQL (postfix, smtp-source).
func (o options) sinkComponent() []component {
	return slices.DeleteFunc(o.components(), func(c component) bool { return c.name != "sink" })
}

// cpuSample is one reading of the shared processes.
type cpuSample map[string]time.Duration

// sampleComponents reads the CPU time of every component now.
func sampleComponents(cs []component) (cpuSample, error) {
	s := cpuSample{}
	for _, c := range cs {
		pid, err := pidFromFile(c.pidFile)
		if err != nil {
			return nil, fmt.Errorf("pipeline CPU: %s: %w", c.name, err)
		}
		read := processCPU
		if c.tree {
			read = treeCPU
		}
		if s[c.name], err = read(pid); err != nil {
			return nil, fmt.Errorf("pipeline CPU: %s (pid %d): %w", c.name, pid, err)
		}
	}
	return s, nil
}

// since is the CPU each component used from a to s.
func (s cpuSample) since(a cpuSample) map[string]time.Duration {
	d := map[string]time.Duration{}
	for k, v := range s {
		d[k] = max(0, v-a[k])
	}
	return d
}

// selfCPU is the harness's own CPU time: the publisher of the Postline
// rows (and its polling, a small part).
func selfCPU() time.Duration {
	d, err := processCPU(os.Getpid())
	if err != nil {
		return 0
	}
	return d
}

// scrapeGoAllocs reads the worker's Go allocation counters from its
// /metrics (go_memstats_alloc_bytes_total and go_memstats_mallocs_total).
func scrapeGoAllocs(ctx context.Context, metricsURL string) (benchmetrics.Counters, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := benchmetrics.Scrape(ctx, http.DefaultClient, []string{metricsURL})
	if err == nil && !c.HasAllocs {
		err = fmt.Errorf("%s: no go_memstats_alloc_bytes_total or go_memstats_mallocs_total", metricsURL)
	}
	return c, err
}
