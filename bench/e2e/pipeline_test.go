package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

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
