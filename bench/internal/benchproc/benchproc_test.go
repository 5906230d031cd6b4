package benchproc

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		want         Memory
		wantErr      string
	}{
		{
			name:   "a process",
			status: "Name:\tworker\nVmPeak:\t 1300000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\nThreads:\t12\n",
			want:   Memory{RSS: 40960 * 1024, Peak: 51200 * 1024},
		},
		{name: "a kernel thread has neither", status: "Name:\tkthreadd\nThreads:\t1\n", wantErr: "no VmRSS"},
		{name: "no peak", status: "VmRSS:\t 1 kB\n", wantErr: "no VmRSS or VmHWM"},
		{name: "another unit", status: "VmHWM:\t 1 kB\nVmRSS:\t 1 MB\n", wantErr: "unexpected"},
		{name: "not a number", status: "VmHWM:\t 1 kB\nVmRSS:\t x kB\n", wantErr: "VmRSS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStatus(tc.status)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseStatus: err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseStatus = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestProcLifecycle runs a real process: its memory is readable while it
// runs, SIGTERM ends it within the grace, and its output is in the log.
func TestProcLifecycle(t *testing.T) {
	sh, err := os.Stat("/bin/sh")
	if err != nil || sh.IsDir() {
		t.Skip("no /bin/sh")
	}
	script := filepath.Join(t.TempDir(), "run.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho started $GREETING\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := Start(Spec{Bin: script, LogPath: filepath.Join(t.TempDir(), "run.log"), Env: []string{"GREETING=hello"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(p.LogTail(1), "started hello") {
		if time.Now().After(deadline) {
			t.Fatalf("log tail %q, want the greeting", p.LogTail(5))
		}
		time.Sleep(10 * time.Millisecond) // the log is a file: nothing to wait on
	}
	m, err := ReadMemory(p.Pid())
	if err != nil || m.RSS <= 0 || m.Peak < m.RSS {
		t.Fatalf("ReadMemory = %+v, %v; want a positive RSS at most the peak", m, err)
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !p.Exited() {
		t.Fatal("Exited is false after Stop")
	}
	if _, err := ReadMemory(p.Pid()); err == nil {
		t.Fatal("ReadMemory of an exited process succeeded")
	}
}

func TestEnviron(t *testing.T) {
	harness := []string{"PATH=/bin", "POSTLINE_SENDERS=64", "HOME=/root", "POSTLINE_KAFKA_BROKERS=x:9092"}
	for _, tc := range []struct {
		name    string
		isolate bool
		want    []string
	}{
		{name: "the harness's environment as it is", isolate: false, want: harness},
		{name: "isolated: no POSTLINE_ variable leaks in", isolate: true, want: []string{"PATH=/bin", "HOME=/root"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := environ(harness, tc.isolate); !slices.Equal(got, tc.want) {
				t.Fatalf("environ = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestStartNamesTheProcess checks that a spec without a name goes by its
// binary, and that a binary that cannot start is named in the error.
func TestStartNamesTheProcess(t *testing.T) {
	dir := t.TempDir()
	_, err := Start(Spec{Name: "worker1", Bin: filepath.Join(dir, "missing"), LogPath: filepath.Join(dir, "w.log")})
	if err == nil || !strings.HasPrefix(err.Error(), "start worker1: ") {
		t.Fatalf("Start of a missing binary: %v, want an error naming worker1", err)
	}
	if _, err := os.Stat("/bin/true"); err != nil {
		t.Skip("no /bin/true")
	}
	p, err := Start(Spec{Bin: "/bin/true", LogPath: filepath.Join(dir, "true.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	if p.Name() != "/bin/true" {
		t.Fatalf("Name = %q, want the binary", p.Name())
	}
}
