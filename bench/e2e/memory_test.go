package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/job"
)

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"512M", 512 << 20, false},
		{"512MiB", 512 << 20, false},
		{"450MB", 450 << 20, false},
		{"1G", 1 << 30, false},
		{"64k", 64 << 10, false},
		{"4096", 4096, false},
		{"0", 0, false},
		{"", 0, true},
		{"M", 0, true},
		{"-1M", 0, true},
		{"1T", 0, true},
		{"9223372036854775807G", 0, true},
	}
	for _, tt := range tests {
		got, err := parseByteSize(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestMemJobsRecordSize(t *testing.T) {
	for _, target := range []int{900_000, 300_000} {
		jobs, got, err := memJobs(20, target)
		if err != nil {
			t.Fatalf("memJobs(%d): %v", target, err)
		}
		// The solver rounds the raw size down to whole base64 quanta per
		// attachment, and the message ID is generated: within 64 bytes.
		if got > target || target-got > 64 {
			t.Errorf("memJobs(%d): record is %d bytes", target, got)
		}
		for i, j := range jobs {
			j.Normalize()
			j.MessageID = job.NewMessageID(job.DefaultMessageIDDomain) // as the publisher does
			if err := j.Validate(job.Limits{}.WithDefaults()); err != nil {
				t.Fatalf("job %d does not pass the default limits: %v", i, err)
			}
		}
		// The burst shares memDistinct blobs rather than holding one per job.
		a, b := jobs[0].Attachments[0].Content, jobs[memDistinct].Attachments[0].Content
		if &a[0] != &b[0] {
			t.Errorf("jobs 0 and %d do not share their attachment content", memDistinct)
		}
		if slices.Equal(jobs[0].Attachments[0].Content, jobs[0].Attachments[1].Content) {
			t.Errorf("the two attachments of a job are the same blob")
		}
	}
	if _, _, err := memJobs(1, 100); err == nil || !strings.Contains(err.Error(), "leaves no room") {
		t.Errorf("memJobs with a tiny record: error %v, want one saying it leaves no room", err)
	}
}

func TestMemSpecs(t *testing.T) {
	m := memOptions{limit: 512 << 20, goMemLimit: "450MiB", baseline: true}
	specs := memSpecs(m, "bin/worker")
	if len(specs) != 2 {
		t.Fatalf("got %d specs, want bounded and baseline", len(specs))
	}
	b, u := specs[0], specs[1]
	if b.name != memBounded || b.limit != 512<<20 || b.goMemLimit != "450MiB" || len(b.env) != 0 || b.bin != "bin/worker" {
		t.Errorf("bounded spec = %+v: want the defaults (no env) under the limit", b)
	}
	if u.name != memUnbounded || u.limit != 0 || u.goMemLimit != "off" {
		t.Errorf("baseline spec = %+v: want no limit and no GOMEMLIMIT", u)
	}
	for _, k := range []string{"POSTLINE_MAX_IN_FLIGHT_BYTES=", "POSTLINE_BATCH_BYTES="} {
		if !slices.ContainsFunc(u.env, func(e string) bool { return strings.HasPrefix(e, k) }) || !strings.Contains(u.changed, strings.TrimSuffix(k, "=")) {
			t.Errorf("baseline does not set and name %s: env %q, changed %q", k, u.env, u.changed)
		}
	}
	m.baseline, m.oldBin, m.oldRev = false, "/tmp/old", "abc123"
	specs = memSpecs(m, "bin/worker")
	if len(specs) != 2 || specs[1].name != memOld || specs[1].bin != "/tmp/old" || !strings.Contains(specs[1].changed, "abc123") {
		t.Errorf("with -memory-old-bin and no baseline: %+v", specs)
	}
}

// fakeCgroupRoot is a directory that looks like a cgroup v1 memory
// controller to newMemCgroup (the kernel is not needed to test the
// bookkeeping).
func fakeCgroupRoot(t *testing.T) string {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "memory.limit_in_bytes"), []byte("9223372036854771712\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestMemCgroup(t *testing.T) {
	root := fakeCgroupRoot(t)
	c, err := newMemCgroup(root, "g", 512<<20)
	if err != nil {
		t.Fatalf("newMemCgroup: %v", err)
	}
	if got, err := c.read("memory.limit_in_bytes"); err != nil || got != 512<<20 {
		t.Errorf("limit = %d, %v; want %d", got, err, 512<<20)
	}
	write := func(file, s string) {
		if err := os.WriteFile(filepath.Join(c.dir, file), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
	if got := c.oomKills(); got != 2 {
		t.Errorf("oomKills = %d, want 2", got)
	}
	write("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\n")
	if got := c.oomKills(); got != -1 {
		t.Errorf("oomKills without the line = %d, want -1 (unknown)", got)
	}
	write("cgroup.procs", "41\n4242\n")
	if !c.holds(4242) || c.holds(424) {
		t.Errorf("holds: 4242 %v, 424 %v; want true, false", c.holds(4242), c.holds(424))
	}
	for _, f := range []string{"memory.limit_in_bytes", "memory.oom_control", "cgroup.procs"} {
		_ = os.Remove(filepath.Join(c.dir, f)) // the kernel's files vanish with the group; these do not
	}
	if err := c.remove(); err != nil {
		t.Errorf("remove: %v", err)
	}
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		t.Errorf("group still there after remove: %v", err)
	}
}

func TestMemCgroupFailsLoudly(t *testing.T) {
	_, err := newMemCgroup(t.TempDir(), "g", 512<<20)
	if err == nil || !strings.Contains(err.Error(), "not a cgroup v1 memory controller") || !strings.Contains(err.Error(), "does not run without it") {
		t.Errorf("no controller: error %v, want the reason and that the benchmark does not run", err)
	}
	root := fakeCgroupRoot(t)
	if err := os.Mkdir(filepath.Join(root, "taken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := newMemCgroup(root, "taken", 1); err == nil || !strings.Contains(err.Error(), "create") {
		t.Errorf("existing group: error %v, want a create error", err)
	}
}

func TestUsageCode(t *testing.T) {
	tests := []struct {
		u    usage
		want int
	}{
		{usage{}, 0},
		{usage{ExitStatus: 3}, 3},
		{usage{Signal: 9}, 137},
		{usage{Signal: 15}, 143},
	}
	for _, tt := range tests {
		if got := tt.u.Code(); got != tt.want {
			t.Errorf("%+v.Code() = %d, want %d", tt.u, got, tt.want)
		}
	}
}

func TestMemResultOK(t *testing.T) {
	good := memResult{jobs: 10, delivered: 10, oomKills: 0}
	tests := []struct {
		name string
		r    memResult
		want bool
	}{
		{"all delivered", good, true},
		{"kernel without oom_kill counter", memResult{jobs: 10, delivered: 10, oomKills: -1}, true},
		{"short", memResult{jobs: 10, delivered: 9}, false},
		{"killed", memResult{jobs: 10, delivered: 10, exitCode: 137, oomKills: 1}, false},
		{"exit 1", memResult{jobs: 10, delivered: 10, exitCode: 1}, false},
		{"timed out", memResult{jobs: 10, delivered: 10, err: os.ErrDeadlineExceeded}, false},
	}
	for _, tt := range tests {
		if got := tt.r.ok(); got != tt.want {
			t.Errorf("%s: ok() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestMemReport(t *testing.T) {
	o := options{partitions: 8, smtpAddr: "127.0.0.1:2525", mem: memOptions{limit: 512 << 20}}
	rs := []memResult{
		{spec: memSpec{name: memBounded, limit: 512 << 20, goMemLimit: "450MiB", changed: "none"}, jobs: 2000, delivered: 2000,
			recordBytes: 900_000, span: 50 * time.Second, exitNote: "exited after SIGTERM", vmHWM: 300 << 20, cgroupMax: 280 << 20},
		{spec: memSpec{name: memOld, goMemLimit: "off", changed: "old"}, jobs: 2000, delivered: 2000,
			recordBytes: 900_000, span: 40 * time.Second, exitNote: "exited after SIGTERM", vmHWM: 1200 << 20},
	}
	var b strings.Builder
	memReport(&b, o, rs)
	out := b.String()
	for _, want := range []string{
		"| bounded | 512 MiB | 450MiB | none | 2000/2000 | 0 (exited after SIGTERM) | 0 | 0 | 300.0 | 280.0 | 40.0 | 36.0 | n/a | 0.25x |",
		"Bounded: 300 MiB peak RSS under a 512 MiB limit vs pre-byte-bounds: 1200 MiB (0.25x).",
		"| pre-byte-bounds | none | off | old |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	var lines strings.Builder
	memBenchLines(&lines, rs)
	if !strings.HasPrefix(lines.String(), "BenchmarkMemory/bounded 2000 25000000 ns/op 40.0 mails/s 36.00 MB/s 314572800 peak-rss-B") {
		t.Errorf("bench lines = %q", lines.String())
	}
}
