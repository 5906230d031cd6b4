// Command soak is the million-job soak behind `make soak`: whether a
// worker fleet keeps its rate, its memory and its tables steady over a long
// run. It owns the measurement only: the workers are real cmd/worker
// processes, the relay is the local stack's smtp-sink
// (`scripts/stack.sh up --with-sink`).
//
// On fresh topics (jobs, dead letters, retries, events), a fresh consumer
// group and a fresh PostgreSQL schema, it starts -workers workers (2) in one
// group, waits until they are ready and own every partition, then publishes
// -jobs small jobs (1,000,000) and -lead more (50,000) concurrently with
// delivery: the publisher keeps at most -lead jobs ahead of the mails sent,
// so its own cost is spread evenly over the run rather than landing on the
// first minutes, and the workers never wait for it. It publishes its head
// start while the first lead of mails is sent, and nothing once the last
// lead of mails is on its way, so the rates compared leave both out: the
// first window starts after the first -lead mails, the last ends at -jobs,
// and in both the publisher publishes one job per mail sent. -rate paces
// it instead, for a soak that must outlast the retention.
//
// Progress comes from the workers' own counters
// (postline_delivery_records_total, postline_reaper_purged_total on each
// worker's /metrics), polled every -poll: a scrape costs the same however
// large the table grows, where counting its rows would not. Every -sample
// it also reads each worker's VmRSS and VmHWM from /proc and the size of
// postline_messages and of every table of the schema
// (pg_total_relation_size, pg_indexes_size, and n_live_tup from the statistics collector: no scan),
// the server's WAL bytes, full-page images and checkpoints (pg_stat_wal, pg_stat_bgwriter),
// and the CPU time of the workers, of PostgreSQL with its backends, Kafka
// and smtp-sink (by the pid files -postgres-pid-file, -kafka-pid-file and
// -sink-pid-file name) and of itself, from /proc: the report gives each
// per mail in the first and the last window.
// Each measured run starts from a CHECKPOINT, so that a checkpoint the
// previous run's WAL brought on does not land in a window by chance.
//
// The retention purge is on the way an operator would run it for high
// volume: POSTLINE_RETENTION at its floor, 1h (the reaper refuses less:
// shorter would forget messages while their duplicates can still arrive),
// and the reaper's defaults, which purge in statements of 1,000 rows. The
// purge runs inside the workers (their reaper), not in the retry-scheduler.
// A row is purged once its outcome is older than the retention, so a soak
// at full rate shorter than an hour would leave every row in place. The
// harness simulates the retention passing instead (-aging): by default
// (steady), from the moment -age-from of the jobs are sent, the defaults
// the store writes a row's timestamps from move back by a retention less
// -age-lag, so the purge deletes, about -age-lag after they were sent,
// what production deletes an hour after: about the delivery rate. The
// workers' own statements write every row, as often as in production;
// the harness writes none. -aging burst ages every row sent so far in
// one statement instead (the purge then deletes them in a burst), -aging
// off ages nothing. A paced soak (-rate) longer than the retention checks
// that the rows stay within the mails sent in the last retention.
//
// In -out it writes soak.csv (the samples), soak.svg (rate, RSS, rows and
// sizes over time) and soak.md (the figures, with the targets as PASS or
// FAIL: the last -window mails at ≥ 0.9× the first window's rate, every
// worker ≤ 100 MiB resident throughout, bytes per row not growing, and the
// retention's bound). With -runs N it runs the measured soak N times after
// the one warm-up, each run's files under runN/, and writes runs.md: every
// run's windows and verdicts, and the median ratio the rate is judged on.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/postline/postline/bench/internal/benchcli"
	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/bench/internal/benchproc"
	"github.com/postline/postline/bench/internal/benchworkers"
	"github.com/postline/postline/internal/reaper"
)

func main() { benchcli.Main("bench/soak", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.plotFrom != "" {
		return replot(o.plotFrom, filepath.Join(o.out, "soak.svg"))
	}
	if o.warmupJobs > 0 {
		w := warmupOptions(o)
		fmt.Fprintf(stderr, "soak: warm-up of %s jobs without aging, not measured (report in %s)\n", thousands(w.jobs), w.out)
		if _, err := soak(ctx, w, "", io.Discard, stderr); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	command := strings.TrimSpace("go run ./bench/soak " + strings.Join(args, " "))
	if o.runs == 1 {
		_, err := soak(ctx, o, command, stdout, stderr)
		return err
	}
	runs := make([]summary, 0, o.runs)
	for i := range o.runs {
		r := runOptions(o, i+1)
		fmt.Fprintf(stderr, "soak: run %d of %d (report in %s)\n", i+1, o.runs, r.out)
		s, err := soak(ctx, r, command, io.Discard, stderr)
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		runs = append(runs, s)
	}
	var md strings.Builder
	runsMarkdown(&md, command, runs)
	if err := os.WriteFile(filepath.Join(o.out, "runs.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	_, err = io.WriteString(stdout, md.String())
	return err
}

// soak runs one soak of o, writes its files and returns what it found;
// command is how it was run, for the report.
func soak(ctx context.Context, o options, command string, stdout, stderr io.Writer) (summary, error) {
	began := time.Now()
	for _, d := range []string{o.out, o.logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return summary{}, err
		}
	}
	f, err := newFixture(ctx, o, stderr)
	if err != nil {
		return summary{}, err
	}
	defer f.Close()

	host, port, _ := net.SplitHostPort(o.sink)
	env := append(append([]string(nil), f.Env...),
		"POSTLINE_SMTP_HOST="+host, "POSTLINE_SMTP_PORT="+port,
		"POSTLINE_RETENTION="+o.retention.String(),
		"POSTLINE_REAPER_INTERVAL="+o.reaperInterval.String())
	if o.senders > 0 {
		env = append(env, "POSTLINE_SENDERS="+strconv.Itoa(o.senders))
	}
	fleet, err := benchworkers.Start(o.workers, func(i int) benchproc.Spec {
		return benchproc.Spec{Name: fmt.Sprintf("worker%d", i), Bin: o.workerBin, Env: env,
			LogPath: filepath.Join(o.logDir, fmt.Sprintf("worker%d.log", i))}
	})
	if err != nil {
		return summary{}, err
	}
	defer fleet.Stop(5 * time.Second) // error paths only; the happy path stops them below
	fmt.Fprintf(stderr, "soak: %d workers started (logs in %s); waiting for readiness\n", o.workers, o.logDir)
	if err := benchworkers.WaitReady(ctx, fleet.Procs, benchworkers.Ready{What: "workers", URLs: fleet.ReadyURLs, Timeout: 120 * time.Second,
		Group: &benchworkers.Group{Brokers: o.brokers, ID: f.Group, Topic: f.JobsTopic, Partitions: o.partitions, Members: o.workers}}); err != nil {
		return summary{}, err
	}

	// The run starts from a checkpoint: the WAL of the run before it (or
	// of the warm-up) would otherwise bring one on at a point of this run
	// that chance decides, and the full-page images after it cost whichever
	// window it falls in more than the table's growth does. The stack's
	// max_wal_size is large enough that a run of a million jobs does not
	// bring on the next one; the report counts checkpoints per window.
	took, err := checkpoint(ctx, f.Pool)
	if err != nil {
		return summary{}, err
	}
	fmt.Fprintf(stderr, "soak: PostgreSQL checkpoint before the run took %s\n", took.Round(time.Millisecond))

	m := &monitor{o: o, procs: fleet.Procs, metricsURLs: fleet.MetricsURLs, pool: f.Pool,
		httpc: &http.Client{Timeout: 5 * time.Second}, stderr: stderr}
	prodCtx, stopProducer := context.WithCancel(ctx)
	pr := &producer{o: o, brokers: o.brokers, topic: f.JobsTopic, delivered: &m.delivered}
	prodDone := make(chan struct{})
	var prodErr error
	m.start = time.Now()
	go func() {
		prodErr = pr.run(prodCtx)
		close(prodDone)
	}()
	fmt.Fprintf(stderr, "soak: ready; publishing %s jobs (%s measured, lead %s) and sampling\n", thousands(o.total()), thousands(o.jobs), thousands(o.lead))
	watchErr := m.watch(ctx, prodDone, &prodErr)
	stopProducer()
	<-prodDone
	if watchErr == nil {
		watchErr = prodErr // nil: every job was sent, so every job was published
	}

	// The soak's files are written whatever happened: a failed soak's
	// samples are the evidence of why.
	if err := m.writeCSV(filepath.Join(o.out, "soak.csv")); err != nil {
		return summary{}, errors.Join(watchErr, err)
	}
	if watchErr != nil {
		return summary{}, fmt.Errorf("%w (samples so far in %s)", watchErr, filepath.Join(o.out, "soak.csv"))
	}
	if err := fleet.Stop(60 * time.Second); err != nil {
		return summary{}, err
	}

	p := params{
		Jobs: o.jobs, Window: o.window, Lead: o.lead, Workers: o.workers, Retention: o.retention,
		ReaperInterval: o.reaperInterval, PurgeInterval: reaper.DefaultPurgeInterval, SampleEvery: o.sampleEvery, AgingMode: o.aging,
		Command: command,
		Machine: fmt.Sprintf("%d CPUs (%s), %s, %s", runtime.NumCPU(), cmp.Or(benchenv.CPUModel(), "unknown CPU"),
			memTotal(), runtime.Version()),
		ProducerSummary: pr.describe(),
		Took:            time.Since(began),
		Aged:            m.aged,
	}
	s, err := summarize(p, m.points, m.samples)
	if err != nil {
		return summary{}, err
	}
	var md strings.Builder
	s.markdown(&md)
	if err := os.WriteFile(filepath.Join(o.out, "soak.md"), []byte(md.String()), 0o644); err != nil {
		return summary{}, err
	}
	svg, err := os.Create(filepath.Join(o.out, "soak.svg"))
	if err != nil {
		return summary{}, err
	}
	title := fmt.Sprintf("Soak: %s jobs, %d workers, smtp-sink", thousands(o.total()), o.workers)
	if err := errors.Join(writePlot(svg, title, m.samples, o.workers), svg.Close()); err != nil {
		return summary{}, err
	}
	_, err = io.WriteString(stdout, md.String())
	return s, err
}

// replot draws the plot of a soak's CSV.
func replot(csvPath, svgPath string) error {
	in, err := os.Open(csvPath)
	if err != nil {
		return err
	}
	defer in.Close()
	samples, workers, err := readCSV(in)
	if err != nil {
		return fmt.Errorf("%s: %w", csvPath, err)
	}
	if len(samples) == 0 {
		return fmt.Errorf("%s: no samples", csvPath)
	}
	if err := os.MkdirAll(filepath.Dir(svgPath), 0o755); err != nil {
		return err
	}
	out, err := os.Create(svgPath)
	if err != nil {
		return err
	}
	title := fmt.Sprintf("Soak: %s jobs, %d workers, smtp-sink", thousands(samples[len(samples)-1].Delivered), workers)
	return errors.Join(writePlot(out, title, samples, workers), out.Close())
}

type fixture = benchenv.Fixture

// newFixture creates the soak's topics (an events topic among them) and
// schema; Close removes them unless -keep.
func newFixture(ctx context.Context, o options, stderr io.Writer) (*fixture, error) {
	return benchenv.NewFixture(ctx, benchenv.FixtureOptions{Name: "soak", Brokers: o.brokers, DatabaseURL: o.databaseURL,
		Partitions: o.partitions, Keep: o.keep, Events: true, CleanupTimeout: time.Minute, Log: stderr})
}

// memTotal is the machine's memory from /proc/meminfo, in GiB.
func memTotal() string {
	if b, ok := benchenv.MemTotal(); ok {
		return fmt.Sprintf("%.0f GiB", float64(b)/(1<<30))
	}
	return "unknown memory"
}
