package benchproc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	before, err := TreeCPU(os.Getpid())
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
	after, err := TreeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	own, err := CPU(os.Getpid())
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

func TestPIDFromFile(t *testing.T) {
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
		got, err := PIDFromFile(p)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("PIDFromFile(%q) = %d, %v; want %d, error %v", tt.content, got, err, tt.want, tt.wantErr)
		}
	}
	if _, err := PIDFromFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing pid file gave no error")
	}
}

// FuzzParseStat: whatever a process names itself (comm may hold spaces,
// parentheses and digits), the parent and the four times read back are
// the ones the line carries.
func FuzzParseStat(f *testing.F) {
	f.Add("postgres: walwriter (x)", uint32(26176), uint64(150), uint64(37), uint64(900), uint64(80))
	f.Add(") S 1 2 3", uint32(1), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, comm string, ppid uint32, utime, stime, cutime, cstime uint64) {
		if ppid > 1<<22 { // PID_MAX_LIMIT
			ppid %= 1 << 22
		}
		line := fmt.Sprintf("4242 (%s) S %d 26176 26176 0 -1 4194368 120 0 0 0 %d %d %d %d 20 0 1 0 1234 1000 10",
			comm, ppid, utime, stime, cutime, cstime)
		got, err := parseStat(line)
		if err != nil {
			t.Fatalf("parseStat(%q): %v", line, err)
		}
		if want := (statTimes{ppid: int(ppid), utime: utime, stime: stime, cutime: cutime, cstime: cstime}); got != want {
			t.Fatalf("parseStat(%q) = %+v, want %+v", line, got, want)
		}
	})
}
