// Command scale is the horizontal scaling benchmark behind `make
// bench-scale`. It owns the measurement only: the worker under test is the
// real cmd/worker binary, the relay is bench/relay in this process.
//
// For each worker count of -workers (1, 2 and 4 by default), in every run
// and on the same local stack, it creates a fresh jobs topic with
// -partitions partitions (the ceiling on useful workers: a partition has one
// consumer in a group), its dead-letter and retry topics, one consumer group
// and a PostgreSQL schema; starts that many worker processes in the group,
// all sending to the same relay; waits until every worker answers /readyz
// and the group is stable with every worker a member and every partition
// assigned; publishes -jobs synthetic jobs (a -body-bytes text body); polls
// postline_messages until every row is sent; and stops the workers with
// SIGTERM.
//
// The relay answers every MAIL FROM, RCPT TO and final dot after
// -reply-delay, with no rate limit and no connection limit: a relay whose
// capacity is far above the workers', so that one worker is bound by the
// round trips of its own SMTP sessions and more workers can only add
// sessions. Workers run with their defaults except the addresses, topics,
// group and database they are given, and POSTLINE_SENDERS (-senders, 4):
// four sessions per worker keep the four-worker run at 16 sessions, what one
// worker opens by default, so the machine's two cores carry the largest
// count as well as the smallest. The relay's reply delay (-reply-delay,
// 20ms, about a WAN round trip to a remote MTA) makes a transaction cost a
// session 60 ms of waiting, so that four workers ask for about a quarter of
// the mails per second the two cores can carry through Kafka, PostgreSQL
// and the relay: with 5 ms the four-worker run saturates the machine, and
// the table then measures the cores rather than the workers.
//
// Throughput is mails / (last sent_at - first enqueued_at); latency
// percentiles are sent_at - enqueued_at, in SQL. Worker CPU is the sum of
// the processes' user and system time; machine CPU is the non-idle time of
// all cores from /proc/stat between the first publish and the last sent
// mail. The worker counts alternate in order between runs; the table shows
// medians, the ratio of each count against one worker and a PASS or FAIL
// against the targets (2 workers ≥ 1.9x, 4 workers ≥ 3.5x).
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/bench/internal/benchcli"
	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/bench/internal/benchjobs"
	"github.com/postline/postline/bench/internal/benchproc"
	"github.com/postline/postline/bench/internal/benchstats"
	"github.com/postline/postline/bench/internal/benchworkers"
	"github.com/postline/postline/bench/relay"
)

func main() { benchcli.Main("bench/scale", run) }

// Defaults of the flags.
const (
	DefaultJobs       = 4000
	DefaultPartitions = 8
	DefaultReplyDelay = 20 * time.Millisecond
	DefaultSenders    = 4
)

// options are the command-line flags.
type options struct {
	jobs, runs, partitions, bodyBytes, senders int
	workers                                    []int
	replyDelay, roundTripDelay, timeout        time.Duration
	pipelining                                 bool
	workerBin, out, markdown, logDir           string
	brokers                                    []string
	databaseURL                                string
	keep                                       bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.jobs, "jobs", DefaultJobs, "jobs per run of every worker count")
	fs.IntVar(&o.runs, "runs", 1, "runs of every worker count, their order alternating (the table shows medians)")
	fs.IntVar(&o.partitions, "partitions", DefaultPartitions, "partitions of the jobs topic: the most workers that can consume")
	fs.IntVar(&o.bodyBytes, "body-bytes", 1024, "text body size of each job")
	fs.IntVar(&o.senders, "senders", DefaultSenders, "POSTLINE_SENDERS of every worker (0: the worker's default, 16)")
	workers := fs.String("workers", "1,2,4", "worker counts, comma-separated")
	fs.DurationVar(&o.replyDelay, "reply-delay", DefaultReplyDelay, "relay wait before each MAIL, RCPT and final-dot reply")
	fs.DurationVar(&o.roundTripDelay, "round-trip-delay", 0, "relay wait before each write of replies: once per round trip, pipelined or not")
	fs.BoolVar(&o.pipelining, "pipelining", false, "the relay advertises PIPELINING, so the workers group each envelope in one write")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "longest one worker count may take to deliver its jobs")
	fs.StringVar(&o.workerBin, "worker-bin", "bin/worker", "the Postline worker binary")
	fs.StringVar(&o.out, "out", "bin/bench-scale.txt", "file for benchstat-compatible result lines (empty: none)")
	fs.StringVar(&o.markdown, "md", "", "also write the Markdown report to this file")
	fs.StringVar(&o.logDir, "log-dir", "", "directory for the workers' logs (default: a new temp dir)")
	stack := benchenv.AddStackFlags(fs, "PostgreSQL URL (a schema per run is created in it)")
	fs.BoolVar(&o.keep, "keep", false, "keep topics and schemas after the run")
	if err := benchcli.ParseFlags(fs, args); err != nil {
		return o, err
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"-jobs", o.jobs}, {"-runs", o.runs}, {"-partitions", o.partitions}, {"-body-bytes", o.bodyBytes}} {
		if v.n < 1 {
			return o, fmt.Errorf("%s: %d must be at least 1", v.name, v.n)
		}
	}
	if o.senders < 0 {
		return o, fmt.Errorf("-senders: %d must not be negative", o.senders)
	}
	if o.replyDelay < 0 {
		return o, fmt.Errorf("-reply-delay: %s must not be negative", o.replyDelay)
	}
	if o.roundTripDelay < 0 {
		return o, fmt.Errorf("-round-trip-delay: %s must not be negative", o.roundTripDelay)
	}
	var err error
	if o.workers, err = parseWorkers(*workers, o.partitions); err != nil {
		return o, err
	}
	o.brokers, o.databaseURL = stack.Brokers(), stack.DatabaseURL()
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.logDir, err = benchenv.LogDir(o.logDir, "postline-bench-scale-"); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "bench: worker logs in %s\n", o.logDir)
	rl, err := relay.Start(relay.Config{Addr: "127.0.0.1:0", ReplyDelay: o.replyDelay, RoundTripDelay: o.roundTripDelay,
		Pipelining: o.pipelining}, slog.New(slog.DiscardHandler))
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	defer rl.Close()

	var all []result
	for r := 1; r <= o.runs; r++ {
		for _, n := range order(o.workers, r) {
			res, err := runCount(ctx, o, rl, n, r, stderr)
			if err != nil {
				return fmt.Errorf("run %d, %d workers: %w", r, n, err)
			}
			fmt.Fprintf(stderr, "bench: run %d: %s\n", r, benchLine(res))
			all = append(all, res)
		}
	}
	stats := rl.Stats()
	fmt.Fprintf(stderr, "bench: relay: %d transactions; per transaction %.2f envelope commands, %.2f reply writes (round trips), %.2f reads\n",
		stats.Transactions, stats.PerTransaction(stats.EnvelopeCommands), stats.PerTransaction(stats.ReplyWrites), stats.PerTransaction(stats.Reads))

	cpu := benchenv.CPUModel()
	if o.out != "" {
		var lines strings.Builder
		for _, r := range all {
			lines.WriteString(benchLine(r) + "\n")
		}
		if err := benchstats.WriteFile(o.out, benchPkg, cpu, lines.String()); err != nil {
			return err
		}
	}
	var md strings.Builder
	fmt.Fprintf(&md, "Command: `go run ./bench/scale %s`\n\n", strings.Join(args, " "))
	fmt.Fprintf(&md, "Machine: %d CPUs (%s), %s; Kafka, PostgreSQL, the relay and the publisher share it with the workers.\n\n",
		runtime.NumCPU(), cmp.Or(cpu, "unknown CPU"), runtime.Version())
	senders := "the worker's default"
	if o.senders > 0 {
		senders = strconv.Itoa(o.senders)
	}
	fmt.Fprintf(&md, "Settings: %d jobs per run, %d-byte text body, %d partitions, POSTLINE_SENDERS %s, relay reply delay %s, round trip delay %s, PIPELINING %v (no rate or connection limit; peak %d connections open), %d run(s)",
		o.jobs, o.bodyBytes, o.partitions, senders, o.replyDelay, o.roundTripDelay, o.pipelining, stats.PeakOpen, o.runs)
	if o.runs > 1 {
		fmt.Fprint(&md, ", medians shown")
	}
	fmt.Fprint(&md, ".\n\n")
	rows := summarize(all)
	table(&md, rows)
	if allPass(rows) {
		fmt.Fprint(&md, "\nAll targets met.\n")
	} else {
		fmt.Fprint(&md, "\nSome targets missed: compare the machine busy column (near 100% means the cores, not the workers, set the rate).\n")
	}
	if _, err := io.WriteString(stdout, md.String()); err != nil {
		return err
	}
	if o.markdown != "" {
		return os.WriteFile(o.markdown, []byte(md.String()), 0o644)
	}
	return nil
}

// runCount measures n workers in one group on fresh topics and schema.
func runCount(ctx context.Context, o options, rl *relay.Relay, n, run int, stderr io.Writer) (result, error) {
	f, err := newFixture(ctx, o, n, stderr)
	if err != nil {
		return result{}, err
	}
	defer f.Close()
	env := concat(f.Env, []string{
		"POSTLINE_SMTP_HOST=" + rl.Host(), "POSTLINE_SMTP_PORT=" + strconv.Itoa(rl.Port()),
	})
	if o.senders > 0 {
		env = append(env, "POSTLINE_SENDERS="+strconv.Itoa(o.senders))
	}
	fleet, err := benchworkers.Start(n, func(i int) benchproc.Spec {
		return benchproc.Spec{Name: fmt.Sprintf("worker %d", i+1), Bin: o.workerBin, Env: env,
			LogPath: filepath.Join(o.logDir, fmt.Sprintf("workers%d-run%d-%d.log", n, run, i))}
	})
	if err != nil {
		return result{}, err
	}
	defer fleet.Stop(5 * time.Second) // error paths only; the happy path stops them below
	fmt.Fprintf(stderr, "bench: %d workers: started; waiting for readiness\n", n)
	if err := benchworkers.WaitReady(ctx, fleet.Procs, benchworkers.Ready{What: "workers", URLs: fleet.ReadyURLs, Timeout: 120 * time.Second,
		Group: &benchworkers.Group{Brokers: o.brokers, ID: f.Group, Topic: f.JobsTopic, Partitions: o.partitions, Members: n}}); err != nil {
		return result{}, err
	}
	before, err := readCPU()
	if err != nil {
		return result{}, err
	}
	fmt.Fprintf(stderr, "bench: %d workers: ready; publishing %d jobs\n", n, o.jobs)
	took, err := benchjobs.Publish(ctx, o.brokers, f.JobsTopic, benchjobs.Plain(o.jobs, benchjobs.Body(o.bodyBytes, bodyLine)), 500)
	if err != nil {
		return result{}, err
	}
	fmt.Fprintf(stderr, "bench: %d workers: published in %s; waiting for delivery\n", n, took.Round(time.Millisecond))
	if err := waitSent(ctx, f.Pool, fleet, o.jobs, o.timeout, stderr); err != nil {
		return result{}, err
	}
	after, err := readCPU()
	if err != nil {
		return result{}, err
	}
	res, err := latency(ctx, f.Pool)
	if err != nil {
		return result{}, err
	}
	res.Workers = n
	res.MachineBusy, res.MachineCPU = after.since(before, 100) // USER_HZ is 100 on Linux
	if err := fleet.Stop(60 * time.Second); err != nil {
		return result{}, err
	}
	res.WorkerCPU = fleet.CPU()
	return res, nil
}

func concat(a, b []string) []string { return append(append([]string(nil), a...), b...) }

func readCPU() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	return parseProcStat(string(b))
}

type fixture = benchenv.Fixture

// newFixture creates the topics and the schema of the run with n workers;
// Close removes them unless -keep.
func newFixture(ctx context.Context, o options, n int, stderr io.Writer) (*fixture, error) {
	return benchenv.NewFixture(ctx, benchenv.FixtureOptions{Name: fmt.Sprintf("scale%d", n), Brokers: o.brokers,
		DatabaseURL: o.databaseURL, Partitions: o.partitions, Keep: o.keep, Log: stderr})
}

// bodyLine is the text of the jobs' bodies.
const bodyLine = "Postline horizontal scaling benchmark body, 64 bytes per line..\n"

// stallAfter ends a wait in which no mail was sent for this long.
const stallAfter = 45 * time.Second

// waitSent polls postline_messages until n rows are sent; failed or dead
// rows, an exited worker, stallAfter without progress or the timeout end it
// with an error.
func waitSent(ctx context.Context, pool *pgxpool.Pool, fleet *benchworkers.Fleet, n int, timeout time.Duration, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastReport, lastProgress, lastSent := time.Now(), time.Now(), -1
	for {
		sent, failed, err := benchjobs.CountRows(ctx, pool)
		switch {
		case err != nil && ctx.Err() == nil:
			return fmt.Errorf("count rows: %w", err)
		case failed > 0:
			return fmt.Errorf("%d mails failed (sent %d)", failed, sent)
		case sent >= n:
			return nil
		}
		if p := fleet.Exited(); p != nil {
			return fmt.Errorf("%s exited after %d of %d mails:\n%s", p.Name(), sent, n, p.LogTail(20))
		}
		if sent != lastSent {
			lastSent, lastProgress = sent, time.Now()
		} else if time.Since(lastProgress) >= stallAfter {
			return fmt.Errorf("%d of %d mails sent and none more for %s (a mail whose end of DATA got no reply stays unsent; see the worker logs)", sent, n, stallAfter)
		}
		if time.Since(lastReport) >= 5*time.Second {
			fmt.Fprintf(stderr, "bench: %d/%d sent\n", sent, n)
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d mails sent: %w", sent, n, ctx.Err())
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
	return result{Mails: l.Mails, Span: l.Span, P50: l.P50, P99: l.P99}, nil
}
