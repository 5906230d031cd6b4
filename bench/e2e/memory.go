package main

// The memory variant: a burst of large jobs (attachments, ~900 KB records)
// through one worker with its default settings under an enforced memory
// limit, beside two baselines without a limit: the same worker with the
// byte bounds lifted (bytes-lifted) and, when scripts/bench.sh could build
// it, the worker from before the byte bounds existed (pre-byte-bounds).
//
// The limit is a cgroup v1 memory controller group the harness creates:
// the worker is started by a shell that first writes its own pid into the
// group's cgroup.procs and then execs the worker, so every byte the worker
// allocates is charged from its first instruction, and the kernel's OOM
// killer ends it (SIGKILL, exit 137) if it goes over. GOMEMLIMIT is set
// below the limit, as a container deployment would. When the group cannot
// be created the run fails with the reason: a memory figure without the
// limit enforced is not the figure this benchmark is for. The baselines get
// a group too, without a limit, so that their usage is read the same way.
//
// Peak RSS is read two ways: VmHWM of the worker, polled from
// /proc/PID/status (the kernel's high-water mark, so polling only has to
// catch it before exit), and the group's memory.max_usage_in_bytes (what
// the limit is enforced against: the memory charged to the group).

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/bench/internal/benchjobs"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/delivery"
	"github.com/postline/postline/job"
)

const (
	variantMemory = "memory"
	// memBounded and memUnbounded name the two rows of the memory table.
	memBounded   = "bounded"
	memUnbounded = "bytes-lifted"
	memOld       = "pre-byte-bounds"
	// memAttachments is how many attachments each job carries; their
	// contents come from memDistinct random blobs, shared by the jobs, so
	// the harness does not hold the whole burst in memory.
	memAttachments = 2
	memDistinct    = 8
	// memPublishChunk is the jobs per Publish call: 4 publishers hold at
	// most 4*8 encoded records (~30 MB) at once.
	memPublishChunk = 8
	// memLifted is what the bytes-lifted row sets the byte bounds to:
	// 1 TiB, so only POSTLINE_MAX_IN_FLIGHT_PER_PARTITION and
	// POSTLINE_BATCH_SIZE (records) bound it.
	memLifted = 1 << 40
)

// memOptions are the memory variant's flags.
type memOptions struct {
	jobs        int
	recordBytes int
	limit       byteSize // the bounded run's cgroup limit
	goMemLimit  string   // the bounded run's GOMEMLIMIT
	baseline    bool     // also run the bytes-lifted row
	baselineCap byteSize // the baseline rows' cgroup limit; 0: none (accounting only)
	cgroupRoot  string
	sample      time.Duration
	oldBin      string // a worker built before the byte bounds; empty: no such row
	oldRev      string // the commit oldBin was built from, for the table
}

// memSpec is one memory run: what differs between the two rows.
type memSpec struct {
	name       string
	bin        string   // the worker binary
	limit      int64    // cgroup memory.limit_in_bytes; 0 leaves it unlimited
	goMemLimit string   // GOMEMLIMIT ("off" for none)
	env        []string // settings changed from the defaults
	changed    string   // how the table names them
}

// memResult is one memory run's measurement.
type memResult struct {
	spec                   memSpec
	jobs, delivered        int
	recordBytes            int // encoded bytes of one job record
	span                   time.Duration
	exitCode               int
	exitNote               string // how the worker ended, in words
	oomKills               int    // the group's oom_kill counter; -1 when the kernel has none
	failCnt                int64  // times usage hit the limit (reclaim, not necessarily a kill)
	vmHWM, cgroupMax, time int64  // peak bytes: polled VmHWM, the group's max usage, time -v
	err                    error  // why it did not deliver everything, when it did not
}

// ok reports whether the run met the requirement: everything delivered,
// exit 0 after SIGTERM, no OOM kill.
func (r memResult) ok() bool {
	return r.err == nil && r.delivered == r.jobs && r.exitCode == 0 && r.oomKills <= 0
}

// mailsPerSec is delivered mails over first publication to last acceptance.
func (r memResult) mailsPerSec() float64 {
	if r.span <= 0 {
		return 0
	}
	return float64(r.delivered) / r.span.Seconds()
}

// mbPerSec is delivered record bytes (10^6) per second over the same span.
func (r memResult) mbPerSec() float64 {
	return r.mailsPerSec() * float64(r.recordBytes) / 1e6
}

// byteSize is a flag value in bytes written with an optional binary suffix:
// 512M, 512MiB, 1G, 1GiB, 4096 (K, M, G are powers of 1024, as the cgroup
// interface reads them).
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

func parseByteSize(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(s), "iB"), "B")
	mult := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'K', 'k':
			mult = 1 << 10
		case 'M', 'm':
			mult = 1 << 20
		case 'G', 'g':
			mult = 1 << 30
		}
		if mult > 1 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("bad size %q (want e.g. 512M, 512MiB, 1G or bytes)", s)
	}
	return n * mult, nil
}

// memSpecs are the runs of the memory variant: the defaults under the limit
// and, with -memory-baseline, the lifted byte bounds without it; with
// -memory-old-bin, the worker from before the byte bounds without it.
func memSpecs(m memOptions, workerBin string) []memSpec {
	specs := []memSpec{{
		name: memBounded, bin: workerBin, limit: int64(m.limit), goMemLimit: m.goMemLimit,
		changed: "none (defaults; only addresses, topics, group and database set)",
	}}
	if m.baseline {
		lifted := strconv.FormatInt(memLifted, 10)
		specs = append(specs, memSpec{
			name: memUnbounded, bin: workerBin, limit: int64(m.baselineCap), goMemLimit: "off",
			env: []string{"POSTLINE_MAX_IN_FLIGHT_BYTES=" + lifted, "POSTLINE_BATCH_BYTES=" + lifted},
			changed: "POSTLINE_MAX_IN_FLIGHT_BYTES=1TiB, POSTLINE_BATCH_BYTES=1TiB (byte bounds lifted: " +
				"record counts, the 8-record reader prefetch and the pipeline's queues still bound it)",
		})
	}
	if m.oldBin != "" {
		specs = append(specs, memSpec{
			name: memOld, bin: m.oldBin, limit: int64(m.baselineCap), goMemLimit: "off",
			changed: "the worker of commit " + cmp.Or(m.oldRev, m.oldBin) + ", before the byte bounds " +
				"(no byte budget, no batch byte cap, 100 records prefetched per partition reader); its defaults",
		})
	}
	return specs
}

// memJobs builds n jobs whose encoded records are about recordBytes each,
// and returns the encoded size of the first. The attachment contents are
// random (so nothing compresses them, like the PDFs and JPEGs they stand
// for) and shared between jobs.
func memJobs(n, recordBytes int) ([]job.Job, int, error) {
	mk := func(i, raw int, blobs [][]byte) job.Job {
		j := job.Job{
			Version: job.SchemaVersion,
			From:    "Postline Bench <bench@postline.test>",
			To:      []string{fmt.Sprintf("rcpt%d@sink.postline.test", i)},
			Subject: fmt.Sprintf("memory bench mail %d", i),
			Text:    benchjobs.Body(1024, bodyLine),
		}
		for a := range memAttachments {
			var c []byte
			if blobs != nil {
				c = blobs[(i+a)%len(blobs)]
			}
			j.Attachments = append(j.Attachments, job.Attachment{
				Filename: fmt.Sprintf("attachment-%d.pdf", a), ContentType: "application/pdf", Content: c})
		}
		return j
	}
	size := func(j job.Job) (int, error) {
		j.Normalize()
		j.MessageID = job.NewMessageID(job.DefaultMessageIDDomain)
		b, err := json.Marshal(j)
		return len(b), err
	}
	overhead, err := size(mk(n-1, 0, nil))
	if err != nil {
		return nil, 0, err
	}
	// base64 writes 4 bytes per 3: solve for the raw size per attachment.
	raw := (recordBytes - overhead) / memAttachments / 4 * 3
	if raw <= 0 {
		return nil, 0, fmt.Errorf("-memory-record-bytes %d leaves no room for attachments (%d bytes without them)", recordBytes, overhead)
	}
	blobs := make([][]byte, memDistinct)
	for i := range blobs {
		blobs[i] = make([]byte, raw)
		_, _ = rand.Read(blobs[i])
	}
	jobs := make([]job.Job, n)
	for i := range jobs {
		jobs[i] = mk(i, raw, blobs)
	}
	got, err := size(jobs[0])
	if err != nil {
		return nil, 0, err
	}
	return jobs, got, nil
}

// memCgroup is a cgroup v1 memory group the harness created.
type memCgroup struct{ dir string }

// newMemCgroup creates root/name and sets its limit (0: none). Every
// failure says why, since the benchmark does not run without it.
func newMemCgroup(root, name string, limit int64) (*memCgroup, error) {
	why := "the memory benchmark enforces its limit with a cgroup v1 memory group (-memory-cgroup-root); it does not run without it"
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil {
		return nil, fmt.Errorf("memory cgroup: %s is not a cgroup v1 memory controller (%w); %s", root, err, why)
	}
	c := &memCgroup{dir: filepath.Join(root, name)}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("memory cgroup: create: %w; %s", err, why)
	}
	if limit > 0 {
		if err := c.write("memory.limit_in_bytes", strconv.FormatInt(limit, 10)); err != nil {
			_ = c.remove()
			return nil, fmt.Errorf("memory cgroup: %w; %s", err, why)
		}
		got, err := c.read("memory.limit_in_bytes")
		if err != nil || got != limit {
			_ = c.remove()
			return nil, fmt.Errorf("memory cgroup: limit reads back as %d (%v), want %d; %s", got, err, limit, why)
		}
	}
	return c, nil
}

func (c *memCgroup) procsPath() string { return filepath.Join(c.dir, "cgroup.procs") }

func (c *memCgroup) write(file, value string) error {
	if err := os.WriteFile(filepath.Join(c.dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("write %s to %s: %w", value, file, err)
	}
	return nil
}

// read returns the integer in a one-value file such as
// memory.max_usage_in_bytes.
func (c *memCgroup) read(file string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	return n, nil
}

// oomKills is the oom_kill line of memory.oom_control, -1 when the kernel
// does not write one (before 4.13).
func (c *memCgroup) oomKills() int {
	f, err := os.Open(filepath.Join(c.dir, "memory.oom_control"))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return n
			}
		}
	}
	return -1
}

// holds reports whether pid is a member of the group.
func (c *memCgroup) holds(pid int) bool {
	b, err := os.ReadFile(c.procsPath())
	if err != nil {
		return false
	}
	return slices.Contains(strings.Fields(string(b)), strconv.Itoa(pid))
}

// remove deletes the group; its processes must have exited. The kernel
// may take a moment to let go of an exited process, so it retries.
func (c *memCgroup) remove() error {
	var err error
	for range 50 {
		if err = os.Remove(c.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // the kernel offers nothing to wait on
	}
	return fmt.Errorf("memory cgroup: remove %s: %w", c.dir, err)
}

// procStatusBytes reads the kB fields of /proc/PID/status named in keys.
func procStatusBytes(pid int, keys ...string) (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || !slices.Contains(keys, k) {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 2 && f[1] == "kB" {
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				out[k] = n << 10
			}
		}
	}
	return out, nil
}

// rssSampler polls a process's VmRSS and VmHWM until stopped.
type rssSampler struct {
	mu       sync.Mutex
	rss, hwm int64
	stop     chan struct{}
	done     chan struct{}
}

func sampleRSS(pid int, every time.Duration) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if m, err := procStatusBytes(pid, "VmRSS", "VmHWM"); err == nil {
				s.mu.Lock()
				s.rss, s.hwm = m["VmRSS"], max(s.hwm, m["VmHWM"])
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// read returns the last RSS and the highest VmHWM seen.
func (s *rssSampler) read() (rss, hwm int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rss, s.hwm
}

func (s *rssSampler) close() {
	close(s.stop)
	<-s.done
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// runMemory runs one row of the memory table. It returns an error only when
// the harness cannot measure (no cgroup, no topics, no database); a worker
// that is killed or does not deliver is a result, with the reason in err.
func runMemory(ctx context.Context, o options, spec memSpec, jobs []job.Job, recordBytes int, stderr io.Writer) (memResult, error) {
	name := variantMemory + "-" + spec.name
	res := memResult{spec: spec, jobs: len(jobs), recordBytes: recordBytes, oomKills: -1}
	cg, err := newMemCgroup(o.mem.cgroupRoot, "postline-bench-"+spec.name+"-"+benchenv.RandomHex(4), spec.limit)
	if err != nil {
		return res, err
	}
	defer func() {
		if err := cg.remove(); err != nil {
			fmt.Fprintf(stderr, "bench: %s: %v\n", name, err)
		}
	}()
	limit := "none"
	if spec.limit > 0 {
		limit = fmt.Sprintf("%.0f MiB", mib(spec.limit))
	}
	fmt.Fprintf(stderr, "bench: %s: cgroup %s, limit %s, GOMEMLIMIT=%s\n", name, cg.dir, limit, spec.goMemLimit)

	f, err := newFixture(ctx, o, name, stderr)
	if err != nil {
		return res, err
	}
	defer f.Close()
	host, port, err := splitHostPort(o.smtpAddr)
	if err != nil {
		return res, err
	}
	addr, err := benchenv.FreeAddr()
	if err != nil {
		return res, err
	}
	env := slices.Concat(f.Env, []string{
		"POSTLINE_HTTP_ADDR=" + addr,
		"POSTLINE_SMTP_HOST=" + host, "POSTLINE_SMTP_PORT=" + port,
		"GOMEMLIMIT=" + spec.goMemLimit,
	}, spec.env)
	// The shell joins the group, then becomes the worker: time's child is
	// the worker itself, charged to the group from exec on.
	argv := []string{"/bin/sh", "-c", `echo $$ > "$1" && shift && exec "$@"`, "sh", cg.procsPath(), spec.bin}
	p, err := startProc(o.timeBin, o.logDir, fmt.Sprintf("%s-run", name), argv, env)
	if err != nil {
		return res, err
	}
	defer func() { _ = p.Stop(5 * time.Second) }() // error paths only
	pid, err := p.Target()
	if err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	fmt.Fprintf(stderr, "bench: %s: started pid %d (log %s); waiting for readiness\n", name, pid, p.LogPath())
	if err := waitReady(ctx, p, "http://"+addr+"/readyz", o.brokers, f.Group, f.JobsTopic, o.partitions); err != nil {
		return res, err
	}
	if !cg.holds(pid) {
		return res, fmt.Errorf("%s: worker pid %d is not in %s: the limit would not apply", name, pid, cg.procsPath())
	}
	rss := sampleRSS(pid, o.mem.sample)

	fmt.Fprintf(stderr, "bench: %s: ready; publishing %d jobs of %d bytes (%.0f MB)\n",
		name, len(jobs), recordBytes, float64(len(jobs)*recordBytes)/1e6)
	took, perr := benchjobs.Publish(ctx, o.brokers, f.JobsTopic, jobs, memPublishChunk)
	if perr != nil {
		rss.close()
		return res, fmt.Errorf("%s: %w", name, perr)
	}
	fmt.Fprintf(stderr, "bench: %s: published in %s (%.0f jobs/s, %.0f MB/s); waiting for delivery\n", name,
		took.Round(time.Millisecond), float64(len(jobs))/took.Seconds(), float64(len(jobs)*recordBytes)/1e6/took.Seconds())
	res.err = waitMemory(ctx, f.Pool, p, cg, rss, name, len(jobs), o.timeout, stderr)

	if !p.Exited() {
		if err := p.Stop(60 * time.Second); err != nil {
			res.err = cmp.Or(res.err, err)
		}
	}
	rss.close()
	_, res.vmHWM = rss.read()
	u, err := p.usage()
	if err != nil {
		return res, err
	}
	res.time, res.exitCode = u.MaxRSSBytes, u.Code()
	res.oomKills = cg.oomKills()
	res.cgroupMax, _ = cg.read("memory.max_usage_in_bytes")
	res.failCnt, _ = cg.read("memory.failcnt")
	switch {
	case u.Signal == int(syscall.SIGKILL) && res.oomKills > 0:
		res.exitNote = "killed by the OOM killer"
	case u.Signal > 0:
		res.exitNote = "killed by " + syscall.Signal(u.Signal).String()
	default:
		res.exitNote = "exited after SIGTERM"
	}
	if res.exitCode != 0 || res.oomKills > 0 {
		fmt.Fprintf(stderr, "bench: %s: exit status %d (%s), %d OOM kill(s); see %s\n",
			name, res.exitCode, res.exitNote, res.oomKills, p.LogPath())
	}
	if err := countDelivered(ctx, f.Pool, &res); err != nil {
		return res, err
	}
	fmt.Fprintf(stderr, "bench: %s: %d/%d delivered, %.0f mails/s, %.1f MB/s; peak RSS %.1f MiB (VmHWM), cgroup max %.1f MiB, failcnt %d, exit %d\n",
		name, res.delivered, res.jobs, res.mailsPerSec(), res.mbPerSec(), mib(res.vmHWM), mib(res.cgroupMax), res.failCnt, res.exitCode)
	return res, nil
}

// waitMemory is waitSent with the worker's memory in its progress lines.
func waitMemory(ctx context.Context, pool *pgxpool.Pool, p *proc, cg *memCgroup, rss *rssSampler, name string, n int, timeout time.Duration, stderr io.Writer) error {
	return waitSent(ctx, pool, "", p, name, n, timeout, stderr, func() string {
		cur, hwm := rss.read()
		usage, _ := cg.read("memory.usage_in_bytes")
		return fmt.Sprintf("RSS %.0f MiB (peak %.0f), cgroup usage %.0f MiB", mib(cur), mib(hwm), mib(usage))
	})
}

// countDelivered reads the sent rows and their span into r.
func countDelivered(ctx context.Context, pool *pgxpool.Pool, r *memResult) error {
	var first, last *time.Time
	err := pool.QueryRow(ctx, `SELECT count(*), min(enqueued_at), max(sent_at)
		FROM postline_messages WHERE status = 'sent'`).Scan(&r.delivered, &first, &last)
	if err != nil {
		return fmt.Errorf("delivered query: %w", err)
	}
	if first != nil && last != nil {
		r.span = last.Sub(*first)
	}
	return nil
}

// runMemoryVariant builds the burst once and runs every memory row on it.
func runMemoryVariant(ctx context.Context, o options, stderr io.Writer) ([]memResult, error) {
	jobs, recordBytes, err := memJobs(o.mem.jobs, o.mem.recordBytes)
	if err != nil {
		return nil, err
	}
	var out []memResult
	for _, spec := range memSpecs(o.mem, o.workerBin) {
		r, err := runMemory(ctx, o, spec, jobs, recordBytes, stderr)
		if err != nil {
			return out, fmt.Errorf("memory %s: %w", spec.name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// memReport writes the memory section: settings, the table, the headline
// ratio and how to read it.
func memReport(w io.Writer, o options, rs []memResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Memory: a burst of large jobs under a %.0f MiB limit\n\n", mib(int64(o.mem.limit)))
	fmt.Fprintf(w, "Settings: %d jobs, %d attachments each, %d-byte records (base64 in JSON), published in one burst into %d partitions; one worker with the default settings (POSTLINE_MAX_IN_FLIGHT_BYTES=%.0f MiB, POSTLINE_BATCH_BYTES=%.0f MiB, POSTLINE_SENDERS=%d) unless the table says otherwise; sink %s.\n\n",
		rs[0].jobs, memAttachments, rs[0].recordBytes, o.partitions,
		mib(consumer.DefaultMaxInFlightBytes), mib(delivery.DefaultBatchBytes), delivery.DefaultSenders, o.smtpAddr)
	fmt.Fprintln(w, "| run | cgroup limit | GOMEMLIMIT | settings changed from defaults | delivered | exit | OOM kills | failcnt | peak RSS MiB (VmHWM) | cgroup max usage MiB | mails/s | MB/s | peak RSS vs bytes-lifted | peak RSS vs pre-byte-bounds |")
	fmt.Fprintln(w, "|---|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	find := func(name string) int {
		return slices.IndexFunc(rs, func(r memResult) bool { return r.spec.name == name })
	}
	base, old := find(memUnbounded), find(memOld)
	vs := func(r memResult, i int) string {
		if i < 0 {
			return "n/a"
		}
		return formatRatio(ratio(float64(r.vmHWM), float64(rs[i].vmHWM)))
	}
	for _, r := range rs {
		limit := "none"
		if r.spec.limit > 0 {
			limit = fmt.Sprintf("%.0f MiB", mib(r.spec.limit))
		}
		ooms := strconv.Itoa(r.oomKills)
		if r.oomKills < 0 {
			ooms = "unknown"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d/%d | %d (%s) | %s | %d | %.1f | %.1f | %.1f | %.1f | %s | %s |\n",
			r.spec.name, limit, r.spec.goMemLimit, r.spec.changed, r.delivered, r.jobs, r.exitCode, r.exitNote,
			ooms, r.failCnt, mib(r.vmHWM), mib(r.cgroupMax), r.mailsPerSec(), r.mbPerSec(), vs(r, base), vs(r, old))
	}
	fmt.Fprintln(w)
	if b := find(memBounded); b >= 0 {
		for _, i := range []int{base, old} {
			if i >= 0 {
				fmt.Fprintf(w, "Bounded: %.0f MiB peak RSS under a %.0f MiB limit vs %s: %.0f MiB (%s).\n\n",
					mib(rs[b].vmHWM), mib(rs[b].spec.limit), rs[i].spec.name, mib(rs[i].vmHWM), vs(rs[b], i))
			}
		}
	}
	fmt.Fprintln(w, "- The limit is a cgroup v1 memory group the worker joins before exec; over it the kernel's OOM killer ends the worker (exit 137). failcnt counts the times usage reached the limit (the kernel reclaimed page cache then; a kill shows under OOM kills).")
	fmt.Fprintln(w, "- peak RSS = VmHWM of the worker, polled from /proc/PID/status; cgroup max usage = memory.max_usage_in_bytes, what the limit is enforced against (memory charged to the group: the worker's anonymous memory and page cache it brought in, not the shared pages of its binary that were cached before).")
	fmt.Fprintln(w, "- mails/s = delivered / (last sent_at - first enqueued_at), publication included; MB/s = the same in record bytes (10^6).")
	fmt.Fprintf(w, "- bytes-lifted is today's worker with both byte bounds lifted (POSTLINE_MAX_IN_FLIGHT_PER_PARTITION=%d and POSTLINE_BATCH_SIZE=%d records still apply), without GOMEMLIMIT or a limit (its cgroup only accounts).\n",
		consumer.DefaultMaxInFlightPerPartition, delivery.DefaultBatchSize)
	if old >= 0 {
		fmt.Fprintln(w, "- pre-byte-bounds is the worker as it was before the byte bounds, built from that commit by scripts/bench.sh and run the same way without a limit: the before of this change.")
	}
}

// memBenchLines are benchstat-compatible lines for the memory rows.
func memBenchLines(w io.Writer, rs []memResult) {
	for _, r := range rs {
		ns := 0.0
		if r.delivered > 0 {
			ns = float64(r.span) / float64(r.delivered)
		}
		fmt.Fprintf(w, "BenchmarkMemory/%s %d %.0f ns/op %.1f mails/s %.2f MB/s %d peak-rss-B %d cgroup-max-B\n",
			r.spec.name, max(r.delivered, 1), ns, r.mailsPerSec(), r.mbPerSec(), r.vmHWM, r.cgroupMax)
	}
}
