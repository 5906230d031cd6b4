package benchproc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPPIDFromStat(t *testing.T) {
	tests := []struct {
		stat    string
		want    int
		wantErr bool
	}{
		{"4242 (worker) S 4241 4242 4242 0 -1 4194560", 4241, false},
		{"17 (odd) name (x)) R 1 17 17", 1, false},
		{"17 no parenthesis", 0, true},
		{"17 (short) S", 0, true},
		{"17 (nan) S x", 0, true},
	}
	for _, tt := range tests {
		got, err := ppidFromStat(tt.stat)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ppidFromStat(%q) = %d, %v; want %d, error %v", tt.stat, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestStopWrapper runs a shell as the wrapper of a sleep: Stop signals the
// sleep, not the shell, and lets the shell finish on its own, as GNU time
// must to write its report.
func TestStopWrapper(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	p, err := Start(Spec{Name: "wrapped", Bin: "/bin/sh", Args: []string{"-c", "sleep 30; echo wrapper finished"},
		LogPath: filepath.Join(t.TempDir(), "wrapped.log"), Wrapper: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	child, err := p.Target()
	if err != nil || child == p.Pid() {
		t.Fatalf("Target = %d, %v; want the wrapper's child, not %d", child, err, p.Pid())
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !strings.Contains(p.LogTail(1), "wrapper finished") {
		t.Fatalf("log tail %q: the wrapper did not finish on its own", p.LogTail(5))
	}
}
