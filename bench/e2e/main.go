// Command e2e is the end-to-end delivery benchmark behind `make bench`
// (scripts/bench.sh builds the binaries and runs it). It owns the measurement
// only: the worker under test is cmd/worker, the baselines are a worker built
// from an earlier commit (-baseline-bin) and bench/naive.
//
// For each variant, in one run and on the same local stack:
//
//   - baseline: -baseline-bin with the postline settings, just before the
//     postline row in every run, for the "CPU per mail vs baseline" target;
//   - postline: bin/worker with -senders SMTP sessions;
//   - template: the same worker and settings, but every job names a stored
//     template (template.go) that the worker renders, instead of carrying
//     its body;
//   - outcomes: the same worker and settings with the outcome loop on (a
//     bounce domain, per-recipient return paths, the confirm phase, events
//     to a fresh topic) and cmd/webhook-dispatcher sending every event to an
//     endpoint the harness serves (outcomes.go), with the webhook lag;
//   - naive: bin/naive (one transaction pair and one new SMTP connection per
//     mail, a commit per record, no batching);
//
// it creates a fresh jobs topic (-partitions), dead-letter topic, consumer
// group and PostgreSQL schema, starts the binary under `/usr/bin/time -v`,
// waits until it is ready (/readyz for the worker, and for both: the group is
// stable with every partition assigned), publishes -jobs synthetic jobs
// (1 KiB text body) as fast as job.Publisher goes, polls postline_messages
// until every row is sent, and stops the binary with SIGTERM. Throughput is
// mails / (last sent_at - first enqueued_at); latency percentiles are
// sent_at - enqueued_at computed in SQL; own CPU is the binary's user+system
// time and peak RSS its maximum resident set size, both from time. The
// worker's /metrics gives its allocations per mail over the delivery window.
//
// Then Postfix's smtp-source sends the same number of mails into the same
// smtp-sink with -senders sessions, once with a new connection per mail
// (smtp-source) and once reusing connections (-d, smtp-source-d): the
// ceiling of the sink on this machine. The postfix variant (postfix.go)
// puts a Postfix relay that it configures and starts itself in front of the
// same sink and injects the mails into it with smtp-source -d.
//
// Every row also gets its whole-pipeline CPU (pipeline.go): every process
// its mails pass through (Kafka, PostgreSQL and the sink by their pid files,
// the injector, the binary) sampled from /proc over the delivery window.
//
// It prints a verdict table for the targets (vs the Postfix relay, share of
// smtp-source-d, CPU vs baseline, allocations per mail), the Markdown table
// with ratios against the naive and postfix rows and the share of the
// smtp-source-d rate, and the pipeline CPU by process, and writes
// benchstat-compatible lines to -out.
//
// The memory variant (memory.go) pushes a burst of ~900 KB jobs through one
// worker under an enforced cgroup memory limit and reports its peak RSS
// beside baselines without the byte bounds; it fails the run when the
// bounded worker does not deliver the burst under the limit.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/bench/internal/benchcli"
	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/bench/internal/benchjobs"
	"github.com/postline/postline/bench/internal/benchmetrics"
	"github.com/postline/postline/bench/internal/benchproc"
	"github.com/postline/postline/bench/internal/benchstats"
	"github.com/postline/postline/bench/internal/benchworkers"
	"github.com/postline/postline/job"
)

func main() { benchcli.Main("bench/e2e", run) }

// options are the command-line flags.
type options struct {
	jobs, naiveJobs     int
	senders             int
	naiveConcurrency    int
	runs                int
	warmupJobs          int
	partitions          int
	bodyBytes           int
	out, markdown       string
	workerBin, naiveBin string
	dispatcherBin       string
	timeBin             string
	smtpAddr            string
	smtpSource          string
	smtpSourceLib       string
	brokers             []string
	databaseURL         string
	variants            []string
	timeout             time.Duration
	logDir              string
	keep                bool
	mem                 memOptions
	// baselineBin is the worker built from an earlier commit (baselineRev),
	// run as the baseline row beside the postline row.
	baselineBin, baselineRev string
	workerRev                string
	// The pid files of the shared services whose CPU the pipeline figure
	// counts (empty: not counted).
	kafkaPIDFile, postgresPIDFile, sinkPIDFile string
}

// defaultNaiveJobs keeps the naive run near 80 s on the reference machine.
const defaultNaiveJobs = 5000

// defaultWarmupJobs is enough load for a freshly started broker's JIT to
// compile its produce and fetch paths. On the reference machine Kafka's CPU
// per mail in 20,000-job rows after a start went 0.100, 0.080, 0.036, then
// 0.035 to 0.066 ms for the next nine rows (240,000 mails), and about
// 0.020 ms from the sixteenth row on: its compiler threads, which share the
// two cores with the load, were still busy until then.
const defaultWarmupJobs = 300000

const (
	variantPostline = "postline"
	variantTemplate = "template"
	variantNaive    = "naive"
	variantSource   = "smtp-source"
	variantSourceD  = "smtp-source-d"
	variantBaseline = "baseline"
	variantOutcomes = "outcomes"
)

// knownVariants are the values -variants takes.
var knownVariants = []string{variantBaseline, variantPostline, variantTemplate, variantOutcomes, variantNaive, variantSource, variantSourceD, variantPostfix, variantMemory}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("e2e", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.jobs, "jobs", 20000, "jobs per variant")
	fs.IntVar(&o.naiveJobs, "naive-jobs", defaultNaiveJobs, "jobs for the naive worker, at most -jobs (0: -jobs); it runs at about 65 mails/s, so 20,000 would take 5 minutes; rates are per mail")
	fs.IntVar(&o.senders, "senders", 16, "worker SMTP sessions (POSTLINE_SENDERS) and smtp-source sessions (-s)")
	fs.IntVar(&o.naiveConcurrency, "naive-concurrency", 1, "goroutines of the naive worker (1: sequential, as written)")
	fs.IntVar(&o.runs, "runs", 1, "times to run every variant (the table shows medians)")
	fs.IntVar(&o.warmupJobs, "warmup-jobs", defaultWarmupJobs, "jobs the postline worker delivers, unmeasured, before the first run when a worker row is to run, so that the shared services are past their start-up (Kafka's JIT compiles its hot paths under load) (0: no warm-up)")
	fs.IntVar(&o.partitions, "partitions", 8, "partitions of each fresh jobs topic")
	fs.IntVar(&o.bodyBytes, "body-bytes", 1024, "text body size of each job, and smtp-source -l")
	fs.StringVar(&o.out, "out", "bin/bench-e2e.txt", "file for benchstat-compatible result lines")
	fs.StringVar(&o.markdown, "md", "", "also write the Markdown report to this file")
	fs.StringVar(&o.workerBin, "worker-bin", "bin/worker", "the Postline worker binary")
	fs.StringVar(&o.naiveBin, "naive-bin", "bin/naive", "the naive baseline binary")
	fs.StringVar(&o.dispatcherBin, "dispatcher-bin", "bin/webhook-dispatcher", "the webhook dispatcher binary (outcomes variant)")
	fs.StringVar(&o.timeBin, "time-bin", "/usr/bin/time", "GNU time (must support -v -o)")
	fs.StringVar(&o.smtpAddr, "smtp", "127.0.0.1:2525", "the smtp-sink address")
	fs.StringVar(&o.smtpSource, "smtp-source", os.Getenv("POSTLINE_SMTP_SOURCE_BIN"), "Postfix smtp-source (scripts/stack.sh smtp-source-path)")
	fs.StringVar(&o.smtpSourceLib, "smtp-source-lib", "", "LD_LIBRARY_PATH for smtp-source (default: ../lib/postfix next to it)")
	stack := benchenv.AddStackFlags(fs, "PostgreSQL URL (a schema per variant is created in it)")
	variants := fs.String("variants", "baseline,postline,template,outcomes,naive,smtp-source,postfix,memory", "variants to run, comma-separated (baseline: -baseline-bin with the postline settings, skipped without it; template: the worker rendering a stored template per job; outcomes: the worker with a bounce domain, return paths and the confirm phase, and the webhook dispatcher sending its events to an endpoint of the harness; smtp-source runs both smtp-source rows, smtp-source-d only the -d one; postfix: smtp-source -d through a Postfix relay the run configures; memory runs the bounded row and its baselines)")
	fs.StringVar(&o.baselineBin, "baseline-bin", "", "a worker built from an earlier commit, run with the postline row's settings as the baseline row (empty: no baseline row)")
	fs.StringVar(&o.baselineRev, "baseline-rev", "", "the commit -baseline-bin was built from, for the table")
	fs.StringVar(&o.workerRev, "worker-rev", "", "what -worker-bin was built from (a commit, +uncommitted for a dirty tree), for the report")
	fs.StringVar(&o.kafkaPIDFile, "kafka-pid-file", "", "pid file of the Kafka broker, counted in the pipeline CPU of the worker rows (empty: not counted)")
	fs.StringVar(&o.postgresPIDFile, "postgres-pid-file", "", "PostgreSQL's postmaster.pid; the postmaster, its live backends and its reaped children are counted in the worker rows (empty: not counted)")
	fs.StringVar(&o.sinkPIDFile, "sink-pid-file", "", "pid file of the smtp-sink, counted in every row's pipeline CPU (empty: not counted)")
	fs.IntVar(&o.mem.jobs, "memory-jobs", 2000, "memory variant: jobs in the burst")
	fs.IntVar(&o.mem.recordBytes, "memory-record-bytes", 900_000, "memory variant: encoded size of each job record; the attachments (base64 in JSON) fill it")
	o.mem.limit = 512 << 20
	fs.Var(&o.mem.limit, "memory-limit", "memory variant: the bounded worker's cgroup memory limit (512M, 1G, bytes)")
	fs.StringVar(&o.mem.goMemLimit, "memory-gomemlimit", "450MiB", "memory variant: the bounded worker's GOMEMLIMIT")
	fs.BoolVar(&o.mem.baseline, "memory-baseline", true, "memory variant: also run the bytes-lifted row: the burst with the byte bounds lifted, without GOMEMLIMIT and limit")
	fs.Var(&o.mem.baselineCap, "memory-baseline-cap", "memory variant: a cgroup limit for the baseline rows too, to protect a small machine (0: none)")
	fs.StringVar(&o.mem.cgroupRoot, "memory-cgroup-root", "/sys/fs/cgroup/memory", "memory variant: the cgroup v1 memory controller to create the limit's group in")
	fs.StringVar(&o.mem.oldBin, "memory-old-bin", "", "memory variant: a worker built before the byte bounds, run as a third row without a limit (empty: no such row)")
	fs.StringVar(&o.mem.oldRev, "memory-old-rev", "", "memory variant: the commit -memory-old-bin was built from, for the table")
	fs.DurationVar(&o.mem.sample, "memory-sample", 100*time.Millisecond, "memory variant: how often VmRSS and VmHWM are polled")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "longest a variant may take to deliver its jobs")
	fs.StringVar(&o.logDir, "log-dir", "", "directory for the binaries' logs and time reports (default: a new temp dir)")
	fs.BoolVar(&o.keep, "keep", false, "keep topics, schemas and the Postfix relay's directory (config, log) after the run")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.brokers, o.databaseURL = stack.Brokers(), stack.DatabaseURL()
	o.variants = strings.Split(*variants, ",")
	if o.warmupJobs < 0 {
		return o, fmt.Errorf("-warmup-jobs: %d must not be negative", o.warmupJobs)
	}
	if o.naiveJobs == 0 || o.naiveJobs > o.jobs {
		o.naiveJobs = o.jobs
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"-jobs", o.jobs}, {"-naive-jobs", o.naiveJobs}, {"-senders", o.senders},
		{"-naive-concurrency", o.naiveConcurrency}, {"-runs", o.runs}, {"-partitions", o.partitions}, {"-body-bytes", o.bodyBytes},
		{"-memory-jobs", o.mem.jobs}, {"-memory-record-bytes", o.mem.recordBytes}} {
		if v.n < 1 {
			return o, fmt.Errorf("%s: %d must be at least 1", v.name, v.n)
		}
	}
	for _, v := range o.variants {
		if !slices.Contains(knownVariants, v) {
			return o, fmt.Errorf("-variants: unknown variant %q (%s)", v, strings.Join(knownVariants, ", "))
		}
	}
	if o.baselineBin == "" {
		// The default list names it; without a build there is nothing to run.
		o.variants = slices.DeleteFunc(o.variants, func(v string) bool { return v == variantBaseline })
	}
	if o.mem.limit <= 0 {
		return o, errors.New("-memory-limit must be positive: the memory variant is about running under a limit")
	}
	if o.mem.sample <= 0 {
		return o, fmt.Errorf("-memory-sample: %s must be positive", o.mem.sample)
	}
	if (slices.Contains(o.variants, variantSource) || slices.Contains(o.variants, variantSourceD) || slices.Contains(o.variants, variantPostfix)) && o.smtpSource == "" {
		return o, errors.New("-smtp-source is empty: pass the path from scripts/stack.sh smtp-source-path (or set POSTLINE_SMTP_SOURCE_BIN)")
	}
	if o.smtpSourceLib == "" && o.smtpSource != "" {
		o.smtpSourceLib = filepath.Join(filepath.Dir(o.smtpSource), "..", "lib", "postfix")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.logDir, err = benchenv.LogDir(o.logDir, "postline-bench-"); err != nil {
		return err
	}
	host, port, err := splitHostPort(o.smtpAddr)
	if err != nil {
		return fmt.Errorf("-smtp: %w", err)
	}
	fmt.Fprintf(stderr, "bench: logs and time reports in %s\n", o.logDir)
	if slices.Contains(o.variants, variantMemory) {
		// Fail before the other variants run, not minutes later.
		probe, err := newMemCgroup(o.mem.cgroupRoot, "postline-bench-probe-"+benchenv.RandomHex(4), int64(o.mem.limit))
		if err != nil {
			return err
		}
		if err := probe.remove(); err != nil {
			return err
		}
	}

	if err := warmUp(ctx, o, host, port, stderr); err != nil {
		return err
	}
	var (
		all    []result
		memAll []memResult
	)
	for r := 1; r <= o.runs; r++ {
		for _, v := range o.variants {
			var rs []result
			switch v {
			case variantMemory:
				var ms []memResult
				ms, err = runMemoryVariant(ctx, o, stderr)
				memAll = append(memAll, ms...)
			case variantPostline, variantBaseline:
				bin := o.workerBin
				if v == variantBaseline {
					bin = o.baselineBin
				}
				var res result
				res, err = runWorker(ctx, o, plainSpec(o, v, bin, o.jobs, r, host, port), stderr)
				rs = []result{res}
			case variantTemplate:
				var res result
				res, err = runWorker(ctx, o, workerSpec{
					name: variantTemplate, bin: o.workerBin, jobs: o.jobs, run: r, http: true,
					env: []string{
						"POSTLINE_SENDERS=" + strconv.Itoa(o.senders),
						"POSTLINE_SMTP_HOST=" + host, "POSTLINE_SMTP_PORT=" + port,
					},
					prepare:  prepareTemplate,
					makeJobs: templateJobs,
				}, stderr)
				rs = []result{res}
			case variantOutcomes:
				spec := plainSpec(o, variantOutcomes, o.workerBin, o.jobs, r, host, port)
				spec.outcomes = true
				var res result
				res, err = runWorker(ctx, o, spec, stderr)
				rs = []result{res}
			case variantNaive:
				var res result
				res, err = runWorker(ctx, o, workerSpec{
					name: variantNaive, bin: o.naiveBin, jobs: o.naiveJobs, run: r,
					env: []string{
						"POSTLINE_NAIVE_CONCURRENCY=" + strconv.Itoa(o.naiveConcurrency),
						"POSTLINE_SMTP_HOST=" + host, "POSTLINE_SMTP_PORT=" + port,
					},
				}, stderr)
				rs = []result{res}
			case variantPostfix:
				var res result
				res, err = runPostfix(ctx, o, r, stderr)
				rs = []result{res}
			case variantSource, variantSourceD:
				modes := []bool{false, true}
				if v == variantSourceD {
					modes = []bool{true}
				}
				for _, reuse := range modes {
					var res result
					if res, err = runSource(ctx, o, reuse, r, stderr); err != nil {
						break
					}
					rs = append(rs, res)
				}
			}
			if err != nil {
				return fmt.Errorf("run %d, %s: %w", r, v, err)
			}
			for _, res := range rs {
				fmt.Fprintf(stderr, "bench: run %d: %s\n", r, benchLine(res))
			}
			all = append(all, rs...)
		}
	}

	cpu := benchenv.CPUModel()
	if o.out != "" {
		if err := writeBenchFile(o.out, cpu, all, memAll); err != nil {
			return err
		}
	}
	var md strings.Builder
	report(&md, o, args, cpu, all)
	memReport(&md, o, memAll)
	if _, err := io.WriteString(stdout, md.String()); err != nil {
		return err
	}
	if o.markdown != "" {
		if err := os.WriteFile(o.markdown, []byte(md.String()), 0o644); err != nil {
			return err
		}
	}
	for _, m := range memAll {
		if m.spec.name == memBounded && !m.ok() {
			return fmt.Errorf("memory: the bounded worker did not deliver the burst under its limit: %d/%d delivered, exit %d (%s), %d OOM kill(s): %v",
				m.delivered, m.jobs, m.exitCode, m.exitNote, m.oomKills, m.err)
		}
	}
	return nil
}

func writeBenchFile(path, cpu string, all []result, mem []memResult) error {
	var lines strings.Builder
	for _, r := range all {
		lines.WriteString(benchLine(r) + "\n")
	}
	memBenchLines(&lines, mem)
	return benchstats.WriteFile(path, benchPkg, cpu, lines.String())
}

// report writes the Markdown report: what ran where, the table, and how to
// read it.
func report(w io.Writer, o options, args []string, cpu string, all []result) {
	fmt.Fprintf(w, "## End-to-end benchmark\n\n")
	fmt.Fprintf(w, "Command: `go run ./bench/e2e %s` (from scripts/bench.sh)\n\n", strings.Join(args, " "))
	fmt.Fprintf(w, "Machine: %d CPUs (%s), %s, kernel %s, %s; Kafka, PostgreSQL, smtp-sink and the publisher share it with the worker.\n\n",
		runtime.NumCPU(), cmp.Or(cpu, "unknown CPU"), memTotal(), kernel(), runtime.Version())
	if len(all) == 0 {
		return
	}
	fmt.Fprintf(w, "Settings: %d jobs (naive: %d), %d-byte text body, %d partitions, worker POSTLINE_SENDERS=%d, naive concurrency %d, smtp-source -s %d, sink %s, %d run(s)",
		o.jobs, o.naiveJobs, o.bodyBytes, o.partitions, o.senders, o.naiveConcurrency, o.senders, o.smtpAddr, o.runs)
	if o.runs > 1 {
		fmt.Fprintf(w, ", medians shown")
	}
	fmt.Fprintf(w, ".")
	if o.warmupJobs > 0 {
		fmt.Fprintf(w, " Before the first run the postline worker delivered %d jobs unmeasured (-warmup-jobs), so no row pays for the shared services' start-up.", o.warmupJobs)
	}
	fmt.Fprintf(w, "\n\n")
	rows := summarize(all)
	ts := targets(rows, variantPostline, variantPostfix, variantSourceD, variantBaseline, o.baselineRev)
	if slices.Contains(o.variants, variantOutcomes) {
		ts = append(ts, outcomeTargets(rows, variantOutcomes, variantPostline)...)
	}
	targetTable(w, ts)
	fmt.Fprintf(w, "\n")
	table(w, rows, variantNaive, variantPostfix, variantSourceD)
	fmt.Fprintf(w, "\n")
	templateLine(w, rows, variantTemplate, variantPostline)
	outcomeTable(w, rows)
	fmt.Fprintf(w, "Whole-pipeline CPU by process, CPU-s / 1,000 mails:\n\n")
	pipelineTable(w, rows)
	fmt.Fprintf(w, "\n")
	if o.naiveJobs != o.jobs {
		fmt.Fprintf(w, "- The naive worker delivered %d mails instead of %d to keep the run short; every rate and CPU figure is per mail.\n", o.naiveJobs, o.jobs)
	}
	fmt.Fprintf(w, "- mails/s = mails / (last sent_at - first enqueued_at); p50/p99 = sent_at - enqueued_at per mail (percentile_cont in SQL).\n")
	fmt.Fprintf(w, "- own CPU and peak RSS are the binary's own (`/usr/bin/time -v`, start to SIGTERM), excluding Kafka, PostgreSQL and the sink; for postfix, own CPU is every Postfix process (below) and peak RSS is not measured.\n")
	fmt.Fprintf(w, "- pipeline CPU, the same method for every row: utime+stime from /proc/<pid>/stat of every process the mails pass through, sampled at the start and the end of the delivery window (the worker rows: ready to last sent; postfix: smtp-source start to the last status=sent; smtp-source: its whole run). A process tree (PostgreSQL's postmaster, Postfix's master) counts the parent, its live children and its reaped children (cutime+cstime), so backends and Postfix daemons that start or exit in the window are counted once. Worker rows: the worker + the harness as publisher (injector) + Kafka + PostgreSQL + smtp-sink; postfix: all Postfix processes + smtp-source + smtp-sink; smtp-source rows: smtp-source + smtp-sink.")
	if len(o.components()) < 3 {
		fmt.Fprintf(w, " Not counted here (no pid file given):")
		for _, c := range []struct{ name, file string }{{"Kafka", o.kafkaPIDFile}, {"PostgreSQL", o.postgresPIDFile}, {"smtp-sink", o.sinkPIDFile}} {
			if c.file == "" {
				fmt.Fprintf(w, " %s", c.name)
			}
		}
		fmt.Fprintf(w, ".")
	}
	fmt.Fprintf(w, " Kafka, PostgreSQL and the sink are shared: whatever else uses them in the window is counted too.\n")
	fmt.Fprintf(w, "- alloc KB / mail and allocs / mail: the worker's go_memstats_alloc_bytes_total and go_memstats_mallocs_total on its /metrics, ready to last sent, divided by the mails (KB = 1,000 bytes).\n")
	if slices.Contains(o.variants, variantPostfix) {
		fmt.Fprintf(w, "- postfix: Debian's Postfix %s configured by the run as a relay (its own config, queue and data directories, a free loopback port, relayhost the sink, the default durable queue, default_process_limit 200, smtp_destination_concurrency_limit 64); smtp-source -d -s %d injects the mails; mails/s runs from smtp-source's start to the relay's last status=sent in its log (the sink's 250, what a worker row's sent_at records).\n",
			postfixVersion(), o.senders)
	}
	if o.workerRev != "" {
		fmt.Fprintf(w, "- postline: %s built from %s.\n", o.workerBin, o.workerRev)
	}
	if slices.Contains(o.variants, variantBaseline) {
		fmt.Fprintf(w, "- baseline: %s (commit %s) with the postline row's settings, run just before it in every run.\n", o.baselineBin, cmp.Or(o.baselineRev, "unknown"))
	}
	if slices.ContainsFunc(rows, func(r result) bool { return r.Variant == variantTemplate }) {
		fmt.Fprintf(w, "- template: the postline worker with the same settings; each job names a stored template (subject, text and HTML parts in a stored layout, a data schema, 3 line items under range) with its own data, and the worker renders it (label refresh at its default).\n")
	}
	if slices.ContainsFunc(rows, func(r result) bool { return r.Variant == variantOutcomes }) {
		fmt.Fprintf(w, "- outcomes: the postline worker with the same settings plus POSTLINE_BOUNCE_DOMAIN=%s and POSTLINE_RETURN_PATH_KEYS (the outcome loop on: a return path per recipient, NOTIFY=SUCCESS,FAILURE asked of a sink that announces DSN, the confirm phase at its defaults), its events on a fresh topic, and %s (its defaults) with one endpoint that the harness serves on loopback: it verifies every request's Standard Webhooks signature, counts the distinct events and answers 204. No bounce-receiver runs: smtp-sink sends no DSNs, so every recipient stays accepted. Webhook lag = records on the events topic (end offsets) minus distinct events received, sampled every %s from the publish, once when the last mail is sent (\"lag at the last mail\"), and until the endpoint has every event (at most %s). The pipeline CPU's own column holds the worker and the dispatcher; the endpoint is the harness's, counted as the injector.\n",
			outcomesBounceDomain, o.dispatcherBin, lagSampleEvery, webhookDrainLimit)
	}
	fmt.Fprintf(w, "- smtp-source opens a new connection per mail; smtp-source-d (`-d`) reuses connections: the sink's ceiling here. For smtp-source rows mails/s is wall time of the whole command.\n")
	if o.out != "" {
		fmt.Fprintf(w, "- benchstat lines: %s (compare two runs with `benchstat old.txt new.txt`).\n", o.out)
	}
}

// plainSpec is the postline row's spec (the baseline row's with the
// baseline binary): plain jobs, -senders SMTP sessions to the sink.
func plainSpec(o options, name, bin string, jobs, run int, host, port string) workerSpec {
	return workerSpec{
		name: name, bin: bin, jobs: jobs, run: run, http: true,
		env: []string{
			"POSTLINE_SENDERS=" + strconv.Itoa(o.senders),
			"POSTLINE_SMTP_HOST=" + host, "POSTLINE_SMTP_PORT=" + port,
		},
	}
}

// warmUp delivers -warmup-jobs plain jobs through the postline worker, in
// rows of -jobs like the measured ones (fresh topics, group and schema
// each), before anything is measured, when a row that goes through Kafka is
// to run. A broker that has just started runs its produce and fetch paths
// in slower code until its JIT has compiled them; the rows measured first
// would pay for that and the later ones not, so a row's place in the run
// would decide its figures. The warm-up rows are printed, not reported.
func warmUp(ctx context.Context, o options, host, port string, stderr io.Writer) error {
	throughKafka := slices.ContainsFunc(o.variants, func(v string) bool {
		return v == variantPostline || v == variantBaseline || v == variantTemplate || v == variantOutcomes || v == variantNaive || v == variantMemory
	})
	if o.warmupJobs == 0 || !throughKafka {
		return nil
	}
	fmt.Fprintf(stderr, "bench: warm-up: %d jobs through %s in rows of %d, not measured\n", o.warmupJobs, o.workerBin, o.jobs)
	for row, left := 1, o.warmupJobs; left > 0; row++ {
		n := min(left, o.jobs)
		res, err := runWorker(ctx, o, plainSpec(o, "warmup", o.workerBin, n, row, host, port), stderr)
		if err != nil {
			return fmt.Errorf("warm-up row %d: %w", row, err)
		}
		fmt.Fprintf(stderr, "bench: warm-up %d: %s\n", row, benchLine(res))
		left -= n
	}
	return nil
}

// workerSpec says how to run one worker variant.
type workerSpec struct {
	name string
	bin  string
	jobs int
	run  int
	http bool     // serves /readyz on POSTLINE_HTTP_ADDR
	env  []string // variant-specific settings
	// prepare, when set, runs on the fresh schema before the binary starts.
	prepare func(ctx context.Context, pool *pgxpool.Pool) error
	// makeJobs, when set, makes the n jobs to publish; nil means plainJobs.
	makeJobs func(n, bodyBytes int) []job.Job
	// outcomes runs the outcome loop beside the worker (outcomes.go): its
	// settings, the webhook dispatcher and the harness's endpoint.
	outcomes bool
}

// runWorker measures one worker binary on fresh topics, group and schema.
func runWorker(ctx context.Context, o options, spec workerSpec, stderr io.Writer) (result, error) {
	f, err := newFixture(ctx, o, spec.name, stderr)
	if err != nil {
		return result{}, err
	}
	defer f.Close()
	pool, jobsTopic, group := f.Pool, f.JobsTopic, f.Group
	env := slices.Concat(f.Env, spec.env)
	if spec.prepare != nil {
		if err := spec.prepare(ctx, pool); err != nil {
			return result{}, fmt.Errorf("%s: prepare: %w", spec.name, err)
		}
	}
	makeJobs := spec.makeJobs
	if makeJobs == nil {
		makeJobs = plainJobs
	}
	var loop *outcomeLoop
	if spec.outcomes {
		if loop, err = startOutcomeLoop(ctx, o, f, spec.run, stderr); err != nil {
			return result{}, fmt.Errorf("%s: %w", spec.name, err)
		}
		defer loop.close()
		env = append(env, loop.workerEnv...)
	}
	var readyURL, metricsURL string
	if spec.http {
		addr, err := benchenv.FreeAddr()
		if err != nil {
			return result{}, err
		}
		env = append(env, "POSTLINE_HTTP_ADDR="+addr)
		readyURL = "http://" + addr + "/readyz"
		metricsURL = "http://" + addr + "/metrics"
	}
	p, err := startProc(o.timeBin, o.logDir, fmt.Sprintf("%s-run%d", spec.name, spec.run), []string{spec.bin}, env)
	if err != nil {
		return result{}, err
	}
	defer func() { _ = p.Stop(5 * time.Second) }() // on error paths only; the happy path stops it below

	fmt.Fprintf(stderr, "bench: %s: started (log %s); waiting for readiness\n", spec.name, p.LogPath())
	if err := waitReady(ctx, p, readyURL, o.brokers, group, jobsTopic, o.partitions); err != nil {
		return result{}, err
	}
	jobs := makeJobs(spec.jobs, o.bodyBytes)
	child, err := p.Target()
	if err != nil {
		return result{}, err
	}
	cs := o.components()
	before, err := sampleComponents(cs)
	if err != nil {
		return result{}, err
	}
	ownBefore, err := benchproc.CPU(child)
	if err != nil {
		return result{}, err
	}
	selfBefore := selfCPU()
	var loopBefore time.Duration
	if loop != nil {
		if loopBefore, err = loop.cpu(); err != nil {
			return result{}, err
		}
	}
	var allocsBefore benchmetrics.Counters
	if spec.http {
		if allocsBefore, err = scrapeGoAllocs(ctx, metricsURL); err != nil {
			return result{}, fmt.Errorf("%s: %w", spec.name, err)
		}
	}
	fmt.Fprintf(stderr, "bench: %s: ready; publishing %d jobs\n", spec.name, spec.jobs)
	if loop != nil {
		loop.begin(ctx)
	}
	took, err := benchjobs.Publish(ctx, o.brokers, jobsTopic, jobs, 500)
	if err != nil {
		return result{}, err
	}
	fmt.Fprintf(stderr, "bench: %s: published %d jobs in %s (%.0f/s); waiting for delivery\n",
		spec.name, spec.jobs, took.Round(time.Millisecond), float64(spec.jobs)/took.Seconds())
	if err := waitSent(ctx, pool, metricsURL, p, spec.name, spec.jobs, o.timeout, stderr, nil); err != nil {
		return result{}, err
	}
	if loop != nil {
		loop.lastMail(ctx)
	}
	var allocsAfter benchmetrics.Counters
	if spec.http {
		if allocsAfter, err = scrapeGoAllocs(ctx, metricsURL); err != nil {
			return result{}, fmt.Errorf("%s: %w", spec.name, err)
		}
	}
	ownAfter, err := benchproc.CPU(child)
	if err != nil {
		return result{}, err
	}
	selfAfter := selfCPU()
	after, err := sampleComponents(cs)
	if err != nil {
		return result{}, err
	}
	var loopAfter time.Duration
	if loop != nil {
		if loopAfter, err = loop.cpu(); err != nil {
			return result{}, err
		}
		if err := loop.drain(ctx, stderr); err != nil {
			return result{}, err
		}
	}
	if err := p.Stop(60 * time.Second); err != nil {
		return result{}, err
	}
	u, err := p.usage()
	if err != nil {
		return result{}, err
	}
	if u.ExitStatus != 0 {
		fmt.Fprintf(stderr, "bench: %s: exited with status %d after SIGTERM; see %s\n", spec.name, u.ExitStatus, p.LogPath())
	}
	res, err := latency(ctx, pool)
	if err != nil {
		return result{}, err
	}
	res.Variant = spec.name
	res.CPU, res.PeakRSSBytes = u.CPU(), u.MaxRSSBytes
	d := after.since(before)
	res.Pipeline = pipelineCPU{Measured: true, Own: ownAfter - ownBefore + loopAfter - loopBefore, Injector: selfAfter - selfBefore,
		Kafka: d["kafka"], Postgres: d["postgres"], Sink: d["sink"]}
	if loop != nil {
		if res.Hooks, err = loop.finish(ctx); err != nil {
			return result{}, fmt.Errorf("%s: %w", spec.name, err)
		}
	}
	if spec.http {
		res.HasAllocs = true
		res.AllocBytes = allocsAfter.AllocBytes - allocsBefore.AllocBytes
		res.Allocs = allocsAfter.Mallocs - allocsBefore.Mallocs
	}
	return res, nil
}

type fixture = benchenv.Fixture

// newFixture creates the topics and the schema of a run named name; Close
// removes them unless -keep.
func newFixture(ctx context.Context, o options, name string, stderr io.Writer) (*fixture, error) {
	return benchenv.NewFixture(ctx, benchenv.FixtureOptions{Name: name, Brokers: o.brokers, DatabaseURL: o.databaseURL,
		Partitions: o.partitions, Keep: o.keep, Log: stderr})
}

// waitReady polls until the process answers /readyz (when readyURL is set)
// and the group is stable with every partition of the topic assigned.
func waitReady(ctx context.Context, p *proc, readyURL string, brokers []string, group, jobsTopic string, partitions int) error {
	var urls []string
	if readyURL != "" {
		urls = []string{readyURL}
	}
	return benchworkers.WaitReady(ctx, []*proc{p}, benchworkers.Ready{What: p.Name(), URLs: urls, Timeout: 90 * time.Second,
		Group: &benchworkers.Group{Brokers: brokers, ID: group, Topic: jobsTopic, Partitions: partitions}})
}

// bodyLine is the text of the synthetic jobs' bodies.
const bodyLine = "Postline end-to-end benchmark body text, 64 bytes per line ...\n"

// plainJobs are n synthetic jobs that carry their own bodyBytes-byte text
// body.
func plainJobs(n, bodyBytes int) []job.Job {
	return benchjobs.Plain(n, benchjobs.Body(bodyBytes, bodyLine))
}

// waitSent waits until n mails are sent. With metricsURL set it polls the
// worker's own counters every 250 ms, which puts no load on PostgreSQL (its
// CPU is part of the pipeline's figure) and costs the same however many rows
// the table holds, and then checks the rows once; without it (the naive
// worker has no /metrics) it counts the rows, every 100 ms. The rates come
// from the rows' timestamps, not from when the wait ends; the 250 ms keep
// the scrapes' own allocations (about 0.1 KB per mail at 100 ms) out of the
// worker's figure. Failed or dead
// mails, an exited process or the timeout end the wait with an error. Every
// 5 s it prints the count, followed by progress() when that is not nil.
func waitSent(ctx context.Context, pool *pgxpool.Pool, metricsURL string, p *proc, name string, n int, timeout time.Duration, stderr io.Writer, progress func() string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	httpc := &http.Client{Timeout: 2 * time.Second}
	every := 100 * time.Millisecond
	if metricsURL != "" {
		every = 250 * time.Millisecond
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	lastReport := time.Now()
	rowsChecked := false
	for {
		var (
			sent, failed int
			err          error
		)
		if metricsURL != "" && !rowsChecked {
			var c benchmetrics.Counters
			c, err = benchmetrics.Scrape(ctx, httpc, []string{metricsURL})
			sent, failed = int(c.Sent), int(c.Failed)
		} else {
			sent, failed, err = benchjobs.CountRows(ctx, pool)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			return fmt.Errorf("%s: progress: %w", name, err)
		case failed > 0:
			return fmt.Errorf("%s: %d mails failed (sent %d); see %s", name, failed, sent, p.LogPath())
		case sent >= n && (metricsURL == "" || rowsChecked):
			return nil
		case sent >= n:
			// The counter moves after the outcome is committed, so the
			// rows are there; the count says so before the figures are
			// read from them.
			rowsChecked = true
			continue
		case p.Exited():
			return fmt.Errorf("%s exited after %d of %d mails:\n%s", name, sent, n, p.LogTail(20))
		}
		if time.Since(lastReport) >= 5*time.Second {
			extra := ""
			if progress != nil {
				extra = "; " + progress()
			}
			fmt.Fprintf(stderr, "bench: %s: %d/%d sent%s\n", name, sent, n, extra)
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %d of %d mails sent: %w", name, sent, n, ctx.Err())
		case <-tick.C:
		}
	}
}

// latency reads throughput and latency of the sent rows.
func latency(ctx context.Context, pool *pgxpool.Pool) (result, error) {
	l, err := benchjobs.ReadLatency(ctx, pool)
	if err != nil {
		return result{}, err
	}
	return result{Mails: l.Mails, Span: l.Span, HasLatency: true, P50: l.P50, P99: l.P99}, nil
}

// runSource runs smtp-source into the sink: jobs mails over senders
// sessions, with a new connection per mail or (reuse) -d.
func runSource(ctx context.Context, o options, reuse bool, run int, stderr io.Writer) (result, error) {
	name := variantSource
	argv := []string{o.smtpSource, "-s", strconv.Itoa(o.senders), "-m", strconv.Itoa(o.jobs), "-l", strconv.Itoa(o.bodyBytes)}
	if reuse {
		name = variantSourceD
		argv = append(argv, "-d")
	}
	argv = append(argv, o.smtpAddr)
	fmt.Fprintf(stderr, "bench: %s: %s\n", name, strings.Join(argv, " "))
	cs := o.sinkComponent()
	before, err := sampleComponents(cs)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	p, err := startProc(o.timeBin, o.logDir, fmt.Sprintf("%s-run%d", name, run), argv,
		[]string{"LD_LIBRARY_PATH=" + o.smtpSourceLib})
	if err != nil {
		return result{}, err
	}
	if !p.Wait(o.timeout) {
		p.Kill()
		return result{}, fmt.Errorf("%s did not finish in %s", name, o.timeout)
	}
	wall := time.Since(start)
	if ctx.Err() != nil {
		return result{}, ctx.Err()
	}
	after, err := sampleComponents(cs)
	if err != nil {
		return result{}, err
	}
	u, err := p.usage()
	if err != nil {
		return result{}, err
	}
	if u.ExitStatus != 0 {
		return result{}, fmt.Errorf("%s exited with status %d:\n%s", name, u.ExitStatus, p.LogTail(20))
	}
	return result{Variant: name, Mails: o.jobs, Span: wall, CPU: u.CPU(), PeakRSSBytes: u.MaxRSSBytes,
		Pipeline: pipelineCPU{Measured: true, Own: u.CPU(), Sink: after.since(before)["sink"]}}, nil
}

func splitHostPort(addr string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(addr)
	if err != nil {
		return "", "", err
	}
	if _, err := strconv.Atoi(port); err != nil {
		return "", "", fmt.Errorf("port %q is not a number", port)
	}
	return host, port, nil
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// memTotal is the machine's memory for the report's machine line.
func memTotal() string {
	if b, ok := benchenv.MemTotal(); ok {
		return fmt.Sprintf("%.1f GiB RAM", float64(b)/(1<<30))
	}
	return "unknown memory"
}
