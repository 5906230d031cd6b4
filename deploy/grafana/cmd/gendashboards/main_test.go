package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/postline/postline/deploy/grafana"
)

func TestRunWritesDashboardsAndRemovesStaleOnes(t *testing.T) {
	out := t.TempDir()
	stale := filepath.Join(out, "retired-dashboard.json")
	if err := os.WriteFile(stale, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"-out", out}, io.Discard); err != nil {
		t.Fatalf("run: %v", err)
	}
	files, err := grafana.Generate()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(out, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, f.Content) {
			t.Errorf("%s differs from what Generate returns", f.Name)
		}
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale %s still there (stat: %v)", stale, err)
	}
}

func TestRunRejectsStrayArguments(t *testing.T) {
	if err := run([]string{"-out", t.TempDir(), "extra"}, io.Discard); err == nil {
		t.Error("run accepted a stray argument")
	}
}
