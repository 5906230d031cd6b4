package benchworkers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postline/postline/bench/internal/benchproc"
)

// fakeProc is a process that has or has not exited.
type fakeProc struct {
	exited bool
}

func (p fakeProc) Name() string         { return "worker 2" }
func (p fakeProc) Exited() bool         { return p.exited }
func (p fakeProc) LogTail(n int) string { return "panic: no brokers" }

func TestWaitReady(t *testing.T) {
	var calls atomic.Int64
	readyAfterTwo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, "consumer not assigned", http.StatusServiceUnavailable)
		}
	}))
	defer readyAfterTwo.Close()
	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "consumer not assigned", http.StatusServiceUnavailable)
	}))
	defer never.Close()

	for _, tc := range []struct {
		name    string
		procs   []fakeProc
		urls    []string
		wantErr []string // substrings of the error; none: no error
	}{
		{name: "nothing to wait for", procs: []fakeProc{{}}},
		{name: "ready after a few polls", procs: []fakeProc{{}, {}}, urls: []string{readyAfterTwo.URL}},
		{name: "never ready: the last reason", procs: []fakeProc{{}}, urls: []string{never.URL},
			wantErr: []string{"workers not ready", "503 Service Unavailable: consumer not assigned"}},
		{name: "a process exited", procs: []fakeProc{{}, {exited: true}}, urls: []string{never.URL},
			wantErr: []string{"worker 2 exited before it was ready", "panic: no brokers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := WaitReady(context.Background(), tc.procs, Ready{What: "workers", URLs: tc.urls, Timeout: time.Second})
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("WaitReady: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("WaitReady succeeded, want an error with %q", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("WaitReady: %v, want %q in it", err, want)
				}
			}
		})
	}
}

// TestFleet starts real processes: each gets an HTTP address of its own,
// its URLs name it, and Stop ends them all.
func TestFleet(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "worker.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho addr $POSTLINE_HTTP_ADDR $ROLE\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"ROLE=worker"}
	f, err := Start(2, func(i int) benchproc.Spec {
		return benchproc.Spec{Bin: script, Env: env, LogPath: filepath.Join(dir, "w"+string(rune('0'+i))+".log")}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop(time.Second)
	if len(f.Procs) != 2 || f.ReadyURLs[0] == f.ReadyURLs[1] {
		t.Fatalf("Start: %d processes, ready URLs %q; want 2 with addresses of their own", len(f.Procs), f.ReadyURLs)
	}
	for i, p := range f.Procs {
		addr := strings.TrimSuffix(strings.TrimPrefix(f.ReadyURLs[i], "http://"), "/readyz")
		if f.MetricsURLs[i] != "http://"+addr+"/metrics" {
			t.Errorf("MetricsURLs[%d] = %q, want the /metrics of %s", i, f.MetricsURLs[i], addr)
		}
		want := "addr " + addr + " worker"
		deadline := time.Now().Add(5 * time.Second)
		for p.LogTail(1) != want {
			if time.Now().After(deadline) {
				t.Fatalf("process %d logged %q, want %q", i, p.LogTail(1), want)
			}
			time.Sleep(10 * time.Millisecond) // the log is a file: nothing to wait on
		}
	}
	if len(env) != 1 {
		t.Errorf("Start changed the caller's env: %q", env)
	}
	if p := f.Exited(); p != nil {
		t.Fatalf("Exited = %s while all run", p.Name())
	}
	if err := f.Stop(5 * time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if f.Exited() == nil {
		t.Fatal("Exited = nil after Stop")
	}
}
