package memcgroup

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestParseKey(t *testing.T) {
	const v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
	const v2 = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n"
	tests := []struct {
		in, key string
		want    int64
		ok      bool
		err     bool
	}{
		{v1, "oom_kill", 3, true, false},
		{v1, "oom_kill_disable", 0, true, false},
		{v2, "max", 12, true, false},
		{v2, "oom_kill", 1, true, false},
		{v2, "oom", 1, true, false},
		{v2, "absent", 0, false, false},
		{"oom_kill many\n", "oom_kill", 0, false, true},
		{"", "oom_kill", 0, false, false},
	}
	for _, tt := range tests {
		got, ok, err := parseKey(strings.NewReader(tt.in), "memory.events", tt.key)
		if got != tt.want || ok != tt.ok || (err != nil) != tt.err {
			t.Errorf("parseKey(%q, %q) = %d, %t, %v; want %d, %t, error %t", tt.in, tt.key, got, ok, err, tt.want, tt.ok, tt.err)
		}
	}
}

// allocEnv makes the test binary, run by TestLimitIsEnforced, allocate
// and touch that many MiB and exit.
const allocEnv = "MEMCGROUP_TEST_ALLOC_MIB"

func TestMain(m *testing.M) {
	if v := os.Getenv(allocEnv); v != "" {
		mib, err := strconv.Atoi(v)
		if err != nil {
			os.Exit(2)
		}
		chunks := make([][]byte, mib)
		for i := range chunks {
			chunks[i] = make([]byte, 1<<20)
			for j := 0; j < len(chunks[i]); j += 4096 {
				chunks[i][j] = 1 // touch every page, so it is charged
			}
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestLimitIsEnforced runs a process that stays under a 64 MiB group's
// limit and one that goes over it: the first exits with a peak above what
// it allocated, the second is killed by the OOM killer and counted. It
// needs root; without a group it fails with the reason.
func TestLimitIsEnforced(t *testing.T) {
	if testing.Short() {
		t.Skip("needs root and a cgroup memory controller; skipped under -short")
	}
	const limit = 64 << 20
	tests := []struct {
		name   string
		mib    int
		killed bool
	}{
		{"under the limit", 16, false},
		{"over the limit", 128, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b [4]byte
			_, _ = rand.Read(b[:])
			g, err := New(Root, "postline-memcgroup-test-"+hex.EncodeToString(b[:]), limit)
			if err != nil {
				t.Fatalf("%v: this test checks the limit the flood tests rely on; run it as root on Linux with the memory controller", err)
			}
			t.Cleanup(func() {
				if err := g.Remove(); err != nil {
					t.Error(err)
				}
			})
			cmd := g.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), allocEnv+"="+strconv.Itoa(tt.mib), "GOMEMLIMIT=off", "GOGC=off")
			err = cmd.Run()
			st, serr := g.Stats()
			if serr != nil {
				t.Fatal(serr)
			}
			var exit *exec.ExitError
			killed := errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
			if killed != tt.killed || (!tt.killed && err != nil) {
				t.Fatalf("allocating %d MiB under %d MiB: %v, want killed %t", tt.mib, limit>>20, err, tt.killed)
			}
			if st.Limit != limit {
				t.Errorf("Limit = %d, want %d", st.Limit, limit)
			}
			if tt.killed && st.OOMKills < 1 {
				t.Errorf("OOMKills = %d after a kill, want at least 1", st.OOMKills)
			}
			if !tt.killed {
				if st.OOMKills > 0 {
					t.Errorf("OOMKills = %d, want 0", st.OOMKills)
				}
				if st.Peak < int64(tt.mib)<<20 || st.Peak > limit {
					t.Errorf("Peak = %d, want between %d and the limit", st.Peak, tt.mib<<20)
				}
			}
		})
	}
}
