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
//   - halfload and lone: the same worker at half the postline row's rate
//     and given one mail at a time, for latency as users feel it
//     (latency.go);
//   - noindex: the same worker and settings on a schema without the
//     console's recipient search indexes (noindex.go), for what they cost;
//   - template: the same worker and settings, but every job names a stored
//     template (template.go) that the worker renders, instead of carrying
//     its body;
//   - outcomes: the same worker and settings with the outcome loop on (a
//     bounce domain, per-recipient return paths, the confirm phase, events
//     to a fresh topic) and cmd/webhook-dispatcher sending every event to an
//     endpoint the harness serves (outcomes.go), with the webhook lag;
//   - sizes: postline, smtp-source-d and postfix again at each body size
//     of -sizes, in a table of their own (sizes.go);
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
// Every row also gets its whole-stack CPU (stack.go): every process
// its mails pass through (Kafka, PostgreSQL and the sink by their pid files,
// the injector, the binary) sampled from /proc over the delivery window.
//
// It prints a verdict table for the targets (vs the Postfix relay, share of
// smtp-source-d, CPU vs baseline, allocations per mail), the Markdown table
// with ratios against the naive and postfix rows and the share of the
// smtp-source-d rate, and the whole-stack CPU by process, and writes
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
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/postline/postline/bench/internal/benchcli"
	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/bench/internal/benchstats"
)

func main() { benchcli.Main("bench/e2e", run) }

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
		if err := probeMemCgroup(o); err != nil {
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
		var thisRun []result
		for _, v := range o.variants {
			rs, ms, err := runVariant(ctx, o, v, r, host, port, thisRun, stderr)
			memAll = append(memAll, ms...)
			if err != nil {
				return fmt.Errorf("run %d, %s: %w", r, v, err)
			}
			for _, res := range rs {
				fmt.Fprintf(stderr, "bench: run %d: %s\n", r, benchLine(res))
			}
			all = append(all, rs...)
			thisRun = append(thisRun, rs...)
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

// probeMemCgroup creates and removes a cgroup like the memory variant's,
// to learn up front whether this machine lets the harness make one.
func probeMemCgroup(o options) error {
	probe, err := newMemCgroup(o.mem.cgroupRoot, "postline-bench-probe-"+benchenv.RandomHex(4), int64(o.mem.limit))
	if err != nil {
		return err
	}
	return probe.remove()
}

// runVariant runs variant v once, as run r, against the sink at host:port:
// its rows, or the memory variant's results. thisRun are the rows run r
// measured before (halfload runs at half the postline row's rate).
func runVariant(ctx context.Context, o options, v string, r int, host, port string, thisRun []result, stderr io.Writer) ([]result, []memResult, error) {
	one := func(res result, err error) ([]result, []memResult, error) { return []result{res}, nil, err }
	switch v {
	case variantMemory:
		ms, err := runMemoryVariant(ctx, o, stderr)
		return nil, ms, err
	case variantPostline, variantBaseline:
		bin := o.workerBin
		if v == variantBaseline {
			bin = o.baselineBin
		}
		return one(runWorker(ctx, o, plainSpec(o, v, bin, o.jobs, r, host, port), stderr))
	case variantHalfLoad:
		spec, err := halfLoadSpec(o, r, host, port, thisRun, stderr)
		if err != nil {
			return nil, nil, err
		}
		return one(runWorker(ctx, o, spec, stderr))
	case variantLone:
		return one(runWorker(ctx, o, loneSpec(o, r, host, port), stderr))
	case variantNoIndex:
		spec := plainSpec(o, variantNoIndex, o.workerBin, o.jobs, r, host, port)
		spec.prepare = prepareNoIndex
		return one(runWorker(ctx, o, spec, stderr))
	case variantTemplate:
		return one(runWorker(ctx, o, workerSpec{
			name: variantTemplate, bin: o.workerBin, jobs: o.jobs, run: r, http: true,
			env: []string{
				"POSTLINE_SENDERS=" + strconv.Itoa(o.senders),
				"POSTLINE_SMTP_HOST=" + host, "POSTLINE_SMTP_PORT=" + port,
			},
			prepare:  prepareTemplate,
			makeJobs: templateJobs,
		}, stderr))
	case variantOutcomes:
		spec := plainSpec(o, variantOutcomes, o.workerBin, o.jobs, r, host, port)
		spec.outcomes = true
		return one(runWorker(ctx, o, spec, stderr))
	case variantNaive:
		return one(runWorker(ctx, o, workerSpec{
			name: variantNaive, bin: o.naiveBin, jobs: o.naiveJobs, run: r,
			env: []string{
				"POSTLINE_NAIVE_CONCURRENCY=" + strconv.Itoa(o.naiveConcurrency),
				"POSTLINE_SMTP_HOST=" + host, "POSTLINE_SMTP_PORT=" + port,
			},
		}, stderr))
	case variantPostfix:
		return one(runPostfix(ctx, o, r, stderr))
	case variantSizes:
		rs, err := runSizes(ctx, o, r, host, port, stderr)
		return rs, nil, err
	case variantSource, variantSourceD:
		modes := []bool{false, true}
		if v == variantSourceD {
			modes = []bool{true}
		}
		var rs []result
		for _, reuse := range modes {
			res, err := runSource(ctx, o, reuse, r, stderr)
			if err != nil {
				return rs, nil, err
			}
			rs = append(rs, res)
		}
		return rs, nil, nil
	}
	return nil, nil, nil
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
	sized := summarize(all)
	rows := slices.DeleteFunc(slices.Clone(sized), func(r result) bool { return isSizeRow(r.Variant, o.sizes, o.bodyBytes) })
	ts := targets(rows, variantPostline, variantPostfix, variantSourceD, variantBaseline, o.baselineRev)
	if slices.Contains(o.variants, variantOutcomes) {
		ts = append(ts, outcomeTargets(rows, variantOutcomes, variantPostline)...)
	}
	if slices.Contains(o.variants, variantNoIndex) {
		ts = append(ts, noIndexTarget(rows, variantPostline, variantNoIndex))
	}
	if slices.Contains(o.variants, variantHalfLoad) || slices.Contains(o.variants, variantLone) {
		ts = append(ts, latencyTargets(rows, variantHalfLoad, variantLone)...)
	}
	targetTable(w, ts)
	fmt.Fprintf(w, "\n")
	table(w, rows, variantNaive, variantPostfix, variantSourceD)
	fmt.Fprintf(w, "\n")
	templateLine(w, rows, variantTemplate, variantPostline)
	outcomeTable(w, rows)
	sizesReport(w, o, sized)
	fmt.Fprintf(w, "Whole-stack CPU by process, CPU-s / 1,000 mails:\n\n")
	stackTable(w, rows)
	fmt.Fprintf(w, "\n")
	if o.naiveJobs != o.jobs {
		fmt.Fprintf(w, "- The naive worker delivered %d mails instead of %d to keep the run short; every rate and CPU figure is per mail.\n", o.naiveJobs, o.jobs)
	}
	fmt.Fprintf(w, "- mails/s = mails / (last sent_at - first enqueued_at); p50/p99 = sent_at - enqueued_at per mail (percentile_cont in SQL).\n")
	fmt.Fprintf(w, "- own CPU and peak RSS are the binary's own (`/usr/bin/time -v`, start to SIGTERM), excluding Kafka, PostgreSQL and the sink; for postfix, own CPU is every Postfix process (below) and peak RSS is not measured.\n")
	fmt.Fprintf(w, "- whole-stack CPU, the same method for every row: utime+stime from /proc/<pid>/stat of every process the mails pass through, sampled at the start and the end of the delivery window (the worker rows: ready to last sent; postfix: smtp-source start to the last status=sent; smtp-source: its whole run). A process tree (PostgreSQL's postmaster, Postfix's master) counts the parent, its live children and its reaped children (cutime+cstime), so backends and Postfix daemons that start or exit in the window are counted once. Worker rows: the worker + the harness as publisher (injector) + Kafka + PostgreSQL + smtp-sink; postfix: all Postfix processes + smtp-source + smtp-sink; smtp-source rows: smtp-source + smtp-sink.")
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
	if slices.ContainsFunc(rows, func(r result) bool { return r.Variant == variantHalfLoad || r.Variant == variantLone }) {
		fmt.Fprintf(w, "- halfload: the postline worker and settings fed by a steady publisher (every %s the jobs come due) at half the postline row's rate of the same run for %s; lone: the same worker given %d mails one at a time, each published %s after the previous was sent. Their p50/p99/max are the other rows' sent_at - enqueued_at: from job.Publisher's first-seen stamp to the commit recording the 250.\n",
			paceTick, o.halfLoadDuration, o.loneJobs, o.lonePause)
	}
	if slices.ContainsFunc(rows, func(r result) bool { return r.Variant == variantNoIndex }) {
		fmt.Fprintf(w, "- noindex: the postline worker with the same settings and jobs on a schema without %s (the console's recipient search, migration 0021), dropped after the migrations; the postline row of the same run has them.\n", strings.Join(noIndexIndexes, " and "))
	}
	if slices.ContainsFunc(rows, func(r result) bool { return r.Variant == variantTemplate }) {
		fmt.Fprintf(w, "- template: the postline worker with the same settings; each job names a stored template (subject, text and HTML parts in a stored layout, a data schema, 3 line items under range) with its own data, and the worker renders it (label refresh at its default).\n")
	}
	if slices.ContainsFunc(rows, func(r result) bool { return r.Variant == variantOutcomes }) {
		fmt.Fprintf(w, "- outcomes: the postline worker with the same settings plus POSTLINE_BOUNCE_DOMAIN=%s and POSTLINE_RETURN_PATH_KEYS (the outcome loop on: a return path per recipient, NOTIFY=SUCCESS,FAILURE asked of a sink that announces DSN, the confirm phase at its defaults), its events on a fresh topic, and %s (its defaults) with one endpoint that the harness serves on loopback: it verifies every request's Standard Webhooks signature, counts the distinct events and answers 204. No bounce-receiver runs: smtp-sink sends no DSNs, so every recipient stays accepted. Webhook lag = records on the events topic (end offsets) minus distinct events received, sampled every %s from the publish, once when the last mail is sent (\"lag at the last mail\"), and until the endpoint has every event (at most %s). The whole-stack CPU's own column holds the worker and the dispatcher; the endpoint is the harness's, counted as the injector.\n",
			outcomesBounceDomain, o.dispatcherBin, lagSampleEvery, webhookDrainLimit)
	}
	fmt.Fprintf(w, "- smtp-source opens a new connection per mail; smtp-source-d (`-d`) reuses connections: the sink's ceiling here. For smtp-source rows mails/s is wall time of the whole command.\n")
	if o.out != "" {
		fmt.Fprintf(w, "- benchstat lines: %s (compare two runs with `benchstat old.txt new.txt`).\n", o.out)
	}
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
