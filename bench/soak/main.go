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
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/bench/internal/benchcli"
	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/bench/internal/benchjobs"
	"github.com/postline/postline/bench/internal/benchkafka"
	"github.com/postline/postline/bench/internal/benchmetrics"
	"github.com/postline/postline/bench/internal/benchproc"
	"github.com/postline/postline/bench/internal/benchworkers"
	"github.com/postline/postline/internal/reaper"
	"github.com/postline/postline/job"
)

func main() { benchcli.Main("bench/soak", run) }

// options are the command-line flags.
type options struct {
	jobs, window, lead, warmupJobs int64
	workers, partitions, bodyBytes int
	senders, runs                  int
	rate, ageFrom                  float64
	aging                          string
	ageLag, ageShift               time.Duration
	purgeWait                      time.Duration
	retention, reaperInterval      time.Duration
	sampleEvery, poll, timeout     time.Duration
	workerBin, sink, out, logDir   string
	pidFiles                       pidFiles
	brokers                        []string
	databaseURL                    string
	keep                           bool
	plotFrom                       string
}

// total is every job the soak publishes: the measured ones and the lead.
func (o options) total() int64 { return o.jobs + o.lead }

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Int64Var(&o.jobs, "jobs", 1_000_000, "jobs to measure (-lead more are delivered: before the first window and after the last)")
	fs.Int64Var(&o.window, "window", 0, "mails of the first and the last window whose rates are compared (0: a tenth of -jobs)")
	fs.Int64Var(&o.lead, "lead", 50_000, "most jobs published ahead of the mails sent; as many more than -jobs are published, and the windows leave out the first and the last lead of mails, when the publisher is not yet or no longer publishing one job per mail sent")
	fs.Int64Var(&o.warmupJobs, "warmup-jobs", 300_000, "jobs of an unmeasured soak without aging or -rate, on fixtures of its own, before the measured one: "+
		"a freshly started broker runs slow until its JIT has compiled its hot paths, which would make the first window slower and flatter the ratio (0: none)")
	fs.Float64Var(&o.rate, "rate", 0, "publish at most this many jobs/s (0: as fast as the lead allows); for a soak longer than -retention")
	fs.StringVar(&o.aging, "aging", agingSteady, "how the retention's passing is simulated so that the workers' purge runs during the soak: "+
		agingSteady+" (from -age-from on, the rows' timestamps are written -age-shift back by their columns' defaults, so they become purgeable -age-lag after they are sent), "+
		agingBurst+" (every row sent so far, once, at -age-from) or "+agingOff)
	fs.Float64Var(&o.ageFrom, "age-from", 0, "share of -jobs sent when the aging begins (default: as the first window ends, so that the purge's first passes are well before the last window)")
	fs.DurationVar(&o.ageLag, "age-lag", 15*time.Second, "steady aging: how long after it was sent a row becomes purgeable")
	fs.DurationVar(&o.ageShift, "age-shift", 0, "how far the aging moves the timestamps back (0: steady, -retention less -age-lag; burst, -retention + 1m); a shift that leaves the rows well inside -retention (30m) ages rows the purge never deletes, which measures the aging's own cost")
	fs.DurationVar(&o.purgeWait, "purge-wait", 5*time.Minute, "burst aging: longest to wait after the last mail for the purge of the aged rows")
	fs.IntVar(&o.runs, "runs", 1, "measured soaks to run one after another, each on fresh fixtures after the one warm-up; with more than one, run N's files go to runN/ under -out, and runs.md there holds every run's windows and the median ratio, which the rate target is judged on")
	fs.IntVar(&o.workers, "workers", 2, "worker processes in the group")
	fs.IntVar(&o.partitions, "partitions", 8, "partitions of the jobs topic")
	fs.IntVar(&o.bodyBytes, "body-bytes", 256, "text body size of each job")
	fs.IntVar(&o.senders, "senders", 0, "POSTLINE_SENDERS of every worker (0: the worker's default)")
	fs.DurationVar(&o.retention, "retention", time.Hour, "POSTLINE_RETENTION of the workers (at least 1h)")
	fs.DurationVar(&o.reaperInterval, "reaper-interval", 30*time.Second, "POSTLINE_REAPER_INTERVAL of the workers: how often each recovers stuck rows (each purges every reaper.DefaultPurgeInterval)")
	fs.DurationVar(&o.sampleEvery, "sample", 5*time.Second, "time between samples of RSS and table sizes")
	fs.DurationVar(&o.poll, "poll", 250*time.Millisecond, "time between progress polls of the workers' counters")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Hour, "longest the delivery may take")
	fs.StringVar(&o.workerBin, "worker-bin", "bin/worker", "the Postline worker binary")
	fs.StringVar(&o.pidFiles.kafka, "kafka-pid-file", "", "Kafka's pid file, for its CPU per mail in the report (make soak passes the stack's)")
	fs.StringVar(&o.pidFiles.postgres, "postgres-pid-file", "", "PostgreSQL's postmaster.pid, for its CPU per mail, backends included (make soak passes the stack's)")
	fs.StringVar(&o.pidFiles.sink, "sink-pid-file", "", "smtp-sink's pid file, for its CPU per mail (make soak passes the stack's)")
	fs.StringVar(&o.sink, "sink", cmp.Or(os.Getenv("POSTLINE_TEST_SMTP_SINK"), "127.0.0.1:2525"), "smtp-sink address")
	fs.StringVar(&o.out, "out", "bin/soak", "directory for soak.csv, soak.svg and soak.md (with -runs, runN/ of each and runs.md)")
	fs.StringVar(&o.logDir, "log-dir", "", "directory for the workers' logs (default: -out)")
	stack := benchenv.AddStackFlags(fs, "PostgreSQL URL (the soak's schema is created in it)")
	fs.BoolVar(&o.keep, "keep", false, "keep the topics and the schema after the run")
	fs.StringVar(&o.plotFrom, "plot-from", "", "only draw the plot of this soak.csv into -out/soak.svg, running nothing")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.window == 0 {
		o.window = o.jobs / 10
	}
	ageFromSet := false
	fs.Visit(func(f *flag.Flag) { ageFromSet = ageFromSet || f.Name == "age-from" })
	if !ageFromSet && o.jobs > 0 {
		o.ageFrom = float64(o.lead+o.window) / float64(o.jobs)
	}
	switch {
	case o.lead < 1:
		return o, fmt.Errorf("-lead %d must be at least 1", o.lead)
	case o.window < 1 || o.jobs < o.lead+2*o.window:
		return o, fmt.Errorf("-jobs %d must be at least -lead %d and twice -window %d (and -window at least 1)", o.jobs, o.lead, o.window)
	case o.warmupJobs != 0 && o.warmupJobs < minWarmupJobs:
		return o, fmt.Errorf("-warmup-jobs %d must be 0 or at least %d", o.warmupJobs, minWarmupJobs)
	case o.runs < 1:
		return o, fmt.Errorf("-runs %d must be at least 1", o.runs)
	case o.workers < 1 || o.partitions < o.workers:
		return o, fmt.Errorf("-workers %d must be between 1 and -partitions %d", o.workers, o.partitions)
	case o.bodyBytes < 1 || o.senders < 0 || o.rate < 0:
		return o, errors.New("-body-bytes must be positive, -senders and -rate not negative")
	case o.aging != agingSteady && o.aging != agingBurst && o.aging != agingOff:
		return o, fmt.Errorf("-aging %q must be %s, %s or %s", o.aging, agingSteady, agingBurst, agingOff)
	case o.ageFrom < 0 || o.ageFrom >= 1:
		return o, fmt.Errorf("-age-from %v must be in [0, 1)", o.ageFrom)
	case o.ageLag <= 0 || o.ageShift < 0 || o.ageLag >= o.retention:
		return o, fmt.Errorf("-age-lag %s must be positive and shorter than -retention %s, -age-shift %s not negative", o.ageLag, o.retention, o.ageShift)
	case o.sampleEvery < o.poll || o.poll <= 0:
		return o, fmt.Errorf("-sample %s must be at least -poll %s, and -poll positive", o.sampleEvery, o.poll)
	}
	if _, _, err := net.SplitHostPort(o.sink); err != nil {
		return o, fmt.Errorf("-sink %q: %w", o.sink, err)
	}
	o.ageShift = cmp.Or(o.ageShift, defaultShift(o.aging, o.retention, o.ageLag))
	o.brokers, o.databaseURL = stack.Brokers(), stack.DatabaseURL()
	o.logDir = cmp.Or(o.logDir, o.out)
	return o, nil
}

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

// runOptions are the options of run n (from 1) of several: o's, with its
// files under runN/ of o's directories.
func runOptions(o options, n int) options {
	r := o
	r.out = filepath.Join(o.out, fmt.Sprintf("run%d", n))
	r.logDir = filepath.Join(o.logDir, fmt.Sprintf("run%d", n))
	return r
}

// minWarmupJobs is the smallest warm-up: its windows must hold a mail.
const minWarmupJobs = 10

// warmupOptions are the options of the warm-up soak before o: o's fleet
// and sink, o.warmupJobs jobs without aging and as fast as they go (a
// -rate is for the measured soak: the JIT only needs the load), its files
// under o's in warmup/.
func warmupOptions(o options) options {
	w := o
	w.jobs, w.window, w.warmupJobs = o.warmupJobs, o.warmupJobs/10, 0
	w.lead = min(o.lead, max(1, w.jobs/10))
	w.aging, w.rate = agingOff, 0
	w.out = filepath.Join(o.out, "warmup")
	w.logDir = filepath.Join(o.logDir, "warmup")
	w.keep = false
	return w
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

// monitor polls the workers' progress and samples their memory and the
// tables, and ends the soak when every job is sent or something went wrong.
type monitor struct {
	o           options
	procs       []*benchproc.Proc
	metricsURLs []string
	pool        *pgxpool.Pool
	httpc       *http.Client
	stderr      io.Writer

	start     time.Time
	delivered atomic.Int64 // mails sent so far, for the producer's lead
	points    []point
	samples   []sample
	aged      *aging // set by the aging goroutine before it reports on its channel
}

// stallAfter ends a soak in which no mail was sent for this long.
const stallAfter = 60 * time.Second

// watch returns nil once every job is sent. prodErr is the producer's
// error, to be read once prodDone is closed.
func (m *monitor) watch(ctx context.Context, prodDone <-chan struct{}, prodErr *error) error {
	ctx, cancel := context.WithTimeout(ctx, m.o.timeout)
	defer cancel()
	poll := time.NewTicker(m.o.poll)
	defer poll.Stop()
	m.points = append(m.points, point{}) // nothing sent when publishing starts
	var (
		last                      benchmetrics.Counters
		lastSampleT, lastReportAt time.Duration
		lastProgress              = time.Now()
		lastSampleDelivered       int64
		agingStarted, agingDone   bool
		agedCh                    = make(chan error, 1)
		allSentAt                 time.Duration
	)
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s of %s mails sent: %w", thousands(last.Sent), thousands(m.o.total()), ctx.Err())
		case err := <-agedCh:
			if err != nil {
				return err
			}
			agingDone = true
			if m.o.aging == agingBurst {
				fmt.Fprintf(m.stderr, "soak: aged %s sent rows past the retention in %s\n", thousands(m.aged.Rows), m.aged.Took.Round(time.Millisecond))
			} else {
				fmt.Fprintf(m.stderr, "soak: aging defaults installed in %s: rows written from now on become purgeable %s after they are sent\n",
					m.aged.Took.Round(time.Millisecond), m.aged.Lag)
			}
			continue
		case <-prodDone:
			if *prodErr != nil {
				return *prodErr
			}
			prodDone = nil // published everything: keep polling
		case <-poll.C:
		}
		for _, p := range m.procs {
			if p.Exited() {
				return fmt.Errorf("%s exited after %s mails:\n%s", p.Name(), thousands(last.Sent), p.LogTail(20))
			}
		}
		c, err := benchmetrics.Scrape(ctx, m.httpc, m.metricsURLs)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			return fmt.Errorf("progress: %w", err)
		}
		t := time.Since(m.start)
		m.delivered.Store(c.Sent)
		if c.Sent != last.Sent {
			lastProgress = time.Now()
		} else if c.Sent < m.o.total() && time.Since(lastProgress) >= stallAfter {
			return fmt.Errorf("%s of %s mails sent and none more for %s (see the worker logs)", thousands(c.Sent), thousands(m.o.total()), stallAfter)
		}
		last = c
		m.points = append(m.points, point{T: t, Delivered: c.Sent})
		if c.Failed > 0 {
			return fmt.Errorf("%s jobs failed, dead or rejected (sent %s)", thousands(c.Failed), thousands(c.Sent))
		}
		if m.o.aging != agingOff && !agingStarted && c.Sent >= int64(m.o.ageFrom*float64(m.o.jobs)) {
			// In its own goroutine: polls go on while the aging runs, so
			// the producer's lead stays current.
			agingStarted = true
			go func(t time.Duration, sent int64) {
				var a *aging
				var err error
				if m.o.aging == agingBurst {
					a, err = burst(ctx, m.pool, m.o.ageShift, t, sent)
				} else {
					// A row becomes purgeable once its shifted timestamps are a
					// retention old: the retention less the shift after it was
					// sent, at once for a shift past the retention.
					a, err = steady(ctx, m.pool, m.o.ageShift, max(m.o.retention-m.o.ageShift, 0), t, sent)
				}
				m.aged = a
				agedCh <- err
			}(t, c.Sent)
		}
		if c.Sent >= m.o.total() && allSentAt == 0 {
			allSentAt = t
		}
		// Without aging, and with the steady aging, the soak ends with the
		// last mail; with the burst, once the aged rows are purged too, or
		// -purge-wait after the last mail.
		done := c.Sent >= m.o.total() && (m.o.aging != agingBurst ||
			(agingDone && (c.Purged >= m.aged.Rows || t-allSentAt >= m.o.purgeWait)))
		if t-lastSampleT < m.o.sampleEvery && !done {
			continue
		}
		x, err := m.sample(ctx, t, c)
		if err != nil {
			return err
		}
		x.Rate = float64(c.Sent-lastSampleDelivered) / (t - lastSampleT).Seconds()
		m.samples = append(m.samples, x)
		lastSampleT, lastSampleDelivered = t, c.Sent
		if t-lastReportAt >= 30*time.Second || done {
			fmt.Fprintf(m.stderr, "soak: %s: %s/%s sent, %.0f/s, RSS %s MiB, %s rows, %.0f MiB, %s purged, load %.2f\n",
				t.Round(time.Second), thousands(c.Sent), thousands(m.o.total()), x.Rate, mibList(x.RSS),
				thousands(x.Tables.MessagesRows), mib(x.Tables.AllBytes), thousands(c.Purged), x.Load1)
			lastReportAt = t
		}
		if !done {
			continue
		}
		if agingStarted && !agingDone {
			if err := <-agedCh; err != nil {
				return err
			}
		}
		return nil
	}
}

func (m *monitor) sample(ctx context.Context, t time.Duration, c benchmetrics.Counters) (sample, error) {
	rss, peak, err := readRSS(m.procs)
	if err != nil {
		return sample{}, err
	}
	tables, err := readTableStats(ctx, m.pool)
	if err != nil {
		return sample{}, err
	}
	wal, err := readWALStats(ctx, m.pool)
	if err != nil {
		return sample{}, err
	}
	var load float64
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = loadAverage(string(b))
	}
	cpu, err := readCPU(m.procs, m.o.pidFiles)
	if err != nil {
		return sample{}, err
	}
	return sample{T: t, Delivered: c.Sent, Failed: c.Failed, Purged: c.Purged, Takeovers: c.Takeovers,
		Duplicates: c.Duplicates, PurgeStatements: c.PurgeStatements, PurgeSeconds: c.PurgeSeconds, RSS: rss, Peak: peak,
		Tables: tables, WAL: wal, Load1: load, CPU: cpu}, nil
}

func (m *monitor) writeCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(writeCSV(f, m.o.workers, m.samples), f.Close())
}

// producer publishes the soak's jobs, generated as it goes, in chunks from
// four goroutines, keeping at most lead jobs ahead of the mails sent.
type producer struct {
	o         options
	brokers   []string
	topic     string
	delivered *atomic.Int64

	waits atomic.Int64 // times the lead held the producer back
	took  time.Duration
}

const publishChunk = 500

func (p *producer) run(ctx context.Context) error {
	pub, err := job.NewPublisher(job.PublisherConfig{Kafka: benchkafka.Cluster(p.brokers...), Topic: p.topic})
	if err != nil {
		return err
	}
	defer pub.Close()
	start := time.Now()
	body := benchjobs.Body(p.o.bodyBytes, bodyLine)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	next := make(chan []job.Job, 4)
	for range 4 {
		wg.Go(func() {
			for batch := range next {
				if _, err := pub.Publish(ctx, batch...); err != nil {
					cancel(fmt.Errorf("publish: %w", err))
				}
			}
		})
	}
	var published int64
	for published < p.o.total() && ctx.Err() == nil {
		if !p.wait(ctx, start, published) {
			break
		}
		n := min(publishChunk, p.o.total()-published)
		batch := make([]job.Job, n)
		for i := range batch {
			batch[i] = soakJob(published+int64(i), body)
		}
		select {
		case next <- batch:
			published += n
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	p.took = time.Since(start)
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if published < p.o.total() {
		return fmt.Errorf("publish: stopped after %s of %s jobs: %w", thousands(published), thousands(p.o.total()), ctx.Err())
	}
	return nil
}

// wait holds the producer while it is lead jobs ahead of the mails sent or
// ahead of -rate; false when ctx ended.
func (p *producer) wait(ctx context.Context, start time.Time, published int64) bool {
	for {
		ahead := published - p.delivered.Load()
		var early time.Duration
		if p.o.rate > 0 {
			early = time.Until(start.Add(time.Duration(float64(published) / p.o.rate * float64(time.Second))))
		}
		if ahead < p.o.lead && early <= 0 {
			return true
		}
		p.waits.Add(1)
		d := max(early, 50*time.Millisecond) // the lead shrinks with the monitor's polls
		t := time.NewTimer(min(d, time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

func (p *producer) describe() string {
	s := fmt.Sprintf("jobs of a %d-byte text body, one recipient, published concurrently with delivery at most %s ahead of the mails sent",
		p.o.bodyBytes, thousands(p.o.lead))
	if p.o.rate > 0 {
		s += fmt.Sprintf(" and at most %.0f/s", p.o.rate)
	}
	return s + fmt.Sprintf(" (publishing took %s, held back by the lead %s times)", p.took.Round(time.Second), thousands(p.waits.Load()))
}

// bodyLine is the text of the jobs' bodies.
const bodyLine = "Postline soak body: small and plain, 64 bytes to a line........\n"

// soakJob is job i: one recipient of its own, a message ID the publisher
// assigns (random, as production's are).
func soakJob(i int64, body string) job.Job {
	return job.Job{
		Version: job.SchemaVersion,
		From:    "Postline Soak <soak@postline.test>",
		To:      []string{fmt.Sprintf("rcpt%d@sink.postline.test", i)},
		Subject: fmt.Sprintf("soak mail %d", i),
		Text:    body,
	}
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
