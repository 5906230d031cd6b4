package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// Fields 14-17 are utime, stime, cutime, cstime; comm may hold spaces and ')'.
	line := "4242 (postgres: walwriter (x)) S 26176 26176 26176 0 -1 4194368 120 0 0 0 150 37 900 80 20 0 1 0 1234 1000 10 18446744073709551615"
	got, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := (statTimes{ppid: 26176, utime: 150, stime: 37, cutime: 900, cstime: 80}); got != want {
		t.Errorf("parseStat = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "1 (x S 1", "1 (x) S 1 2 3", "1 (x) S p 1 1 0 -1 0 0 0 0 0 1 2 3 4"} {
		if _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q) accepted a broken line", bad)
		}
	}
}

func TestTreeCPUCountsReapedChildren(t *testing.T) {
	before, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// A child that burns CPU and exits: reaped by us, it moves into our
	// cutime/cstime, which the tree counts.
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`)
	if err := cmd.Run(); err != nil {
		t.Skipf("no sh to burn CPU in a child: %v", err)
	}
	child := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	after, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	own, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Tick granularity is 10 ms; allow two ticks of slack.
	if got := after - before; got+20*time.Millisecond < child {
		t.Errorf("tree CPU grew by %v, less than the reaped child's %v", got, child)
	}
	if after < own {
		t.Errorf("tree CPU %v below the process's own %v", after, own)
	}
}

func TestPidFromFile(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		content string
		want    int
		wantErr bool
	}{
		{"26176\n/work/pg\n1796144723\n", 26176, false}, // postmaster.pid
		{"  8123  \n", 8123, false},                     // Postfix pads it
		{"42", 42, false},
		{"", 0, true},
		{"x\n", 0, true},
		{"0\n", 0, true},
	}
	for i, tt := range tests {
		p := filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := pidFromFile(p)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("pidFromFile(%q) = %d, %v; want %d, error %v", tt.content, got, err, tt.want, tt.wantErr)
		}
	}
	if _, err := pidFromFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing pid file gave no error")
	}
}

func TestSampleComponents(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "self.pid")
	if err := os.WriteFile(self, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := options{kafkaPIDFile: self, postgresPIDFile: self}
	if got := len(o.components()); got != 2 {
		t.Fatalf("components = %d, want 2 (no sink pid file)", got)
	}
	if got := len(o.sinkComponent()); got != 0 {
		t.Errorf("sinkComponent without a sink pid file = %d components, want 0", got)
	}
	a, err := sampleComponents(o.components())
	if err != nil {
		t.Fatal(err)
	}
	// Some CPU between the samples: spin until the kernel has counted 50 ms.
	for start, wall := selfCPU(), time.Now(); selfCPU()-start < 50*time.Millisecond && time.Since(wall) < 10*time.Second; {
		for i := range 10000 {
			_ = strconv.Itoa(i)
		}
	}
	b, err := sampleComponents(o.components())
	if err != nil {
		t.Fatal(err)
	}
	d := b.since(a)
	// The two readings of one sample are a moment apart, so they may fall
	// on either side of a clock tick: allow two ticks.
	if d["kafka"] <= 0 || d["postgres"]+20*time.Millisecond < d["kafka"] {
		t.Errorf("deltas %v: want kafka > 0 and the tree reading at least the process's", d)
	}
	o.sinkPIDFile = filepath.Join(dir, "missing.pid")
	if _, err := sampleComponents(o.components()); err == nil || !strings.Contains(err.Error(), "sink") {
		t.Errorf("a missing sink pid file: error %v, want one naming the sink", err)
	}
}
