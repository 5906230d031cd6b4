package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/bench/internal/benchjobs"
	"github.com/postline/postline/bench/internal/benchmetrics"
	"github.com/postline/postline/bench/internal/benchproc"
	"github.com/postline/postline/bench/internal/benchworkers"
	"github.com/postline/postline/job"
)

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
		return v == variantPostline || v == variantHalfLoad || v == variantLone || v == variantNoIndex || v == variantBaseline || v == variantTemplate || v == variantOutcomes || v == variantNaive || v == variantMemory || v == variantSizes
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
	// publish, when set, publishes the jobs instead of benchjobs.Publish
	// (as fast as it goes): the latency rows' paced or one-at-a-time
	// publishers (latency.go).
	publish func(ctx context.Context, topic string, pool *pgxpool.Pool, jobs []job.Job) error
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
	jobs := spec.jobsToPublish(o.bodyBytes)
	child, err := p.Target()
	if err != nil {
		return result{}, err
	}
	w := deliveryWindow{name: spec.name, components: o.components(), child: child, loop: loop, metricsURL: metricsURL}
	before, err := w.open(ctx)
	if err != nil {
		return result{}, err
	}
	fmt.Fprintf(stderr, "bench: %s: ready; publishing %d jobs\n", spec.name, spec.jobs)
	if loop != nil {
		loop.begin(ctx)
	}
	start := time.Now()
	if spec.publish != nil {
		err = spec.publish(ctx, jobsTopic, pool, jobs)
	} else {
		_, err = benchjobs.Publish(ctx, o.brokers, jobsTopic, jobs, 500)
	}
	if err != nil {
		return result{}, err
	}
	took := time.Since(start)
	fmt.Fprintf(stderr, "bench: %s: published %d jobs in %s (%.0f/s); waiting for delivery\n",
		spec.name, spec.jobs, took.Round(time.Millisecond), float64(spec.jobs)/took.Seconds())
	if err := waitSent(ctx, pool, metricsURL, p, spec.name, spec.jobs, o.timeout, stderr, nil); err != nil {
		return result{}, err
	}
	if loop != nil {
		loop.lastMail(ctx)
	}
	after, err := w.close(ctx, stderr)
	if err != nil {
		return result{}, err
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
	w.fill(&res, before, after)
	if loop != nil {
		if res.Hooks, err = loop.finish(ctx); err != nil {
			return result{}, fmt.Errorf("%s: %w", spec.name, err)
		}
	}
	return res, nil
}

// jobsToPublish makes the row's jobs: spec.makeJobs's, or plain ones.
func (spec workerSpec) jobsToPublish(bodyBytes int) []job.Job {
	if spec.makeJobs == nil {
		return plainJobs(spec.jobs, bodyBytes)
	}
	return spec.makeJobs(spec.jobs, bodyBytes)
}

// deliveryWindow reads a worker row's CPU and allocations at the two ends
// of its delivery window (ready to last sent).
type deliveryWindow struct {
	name       string
	components []component
	child      int          // the worker's pid
	loop       *outcomeLoop // nil unless the row runs the outcome loop
	metricsURL string       // the worker's metrics; "" when it serves none
}

// windowMark is one end of a delivery window.
type windowMark struct {
	components             cpuSample
	own, self, outcomeLoop time.Duration
	allocs                 benchmetrics.Counters
}

// open reads the window's start.
func (w deliveryWindow) open(ctx context.Context) (windowMark, error) {
	var m windowMark
	var err error
	if m.components, err = sampleComponents(w.components); err != nil {
		return m, err
	}
	if m.own, err = benchproc.CPU(w.child); err != nil {
		return m, err
	}
	m.self = selfCPU()
	if w.loop != nil {
		if m.outcomeLoop, err = w.loop.cpu(); err != nil {
			return m, err
		}
	}
	if w.metricsURL != "" {
		if m.allocs, err = scrapeGoAllocs(ctx, w.metricsURL); err != nil {
			return m, fmt.Errorf("%s: %w", w.name, err)
		}
	}
	return m, nil
}

// close reads the window's end, in the reverse order of open, and then
// lets the outcome loop's webhooks drain.
func (w deliveryWindow) close(ctx context.Context, stderr io.Writer) (windowMark, error) {
	var m windowMark
	var err error
	if w.metricsURL != "" {
		if m.allocs, err = scrapeGoAllocs(ctx, w.metricsURL); err != nil {
			return m, fmt.Errorf("%s: %w", w.name, err)
		}
	}
	if m.own, err = benchproc.CPU(w.child); err != nil {
		return m, err
	}
	m.self = selfCPU()
	if m.components, err = sampleComponents(w.components); err != nil {
		return m, err
	}
	if w.loop != nil {
		if m.outcomeLoop, err = w.loop.cpu(); err != nil {
			return m, err
		}
		if err := w.loop.drain(ctx, stderr); err != nil {
			return m, err
		}
	}
	return m, nil
}

// fill sets res's whole-stack CPU and allocations from the window's ends.
func (w deliveryWindow) fill(res *result, before, after windowMark) {
	d := after.components.since(before.components)
	res.Stack = stackCPU{Measured: true, Own: after.own - before.own + after.outcomeLoop - before.outcomeLoop, Injector: after.self - before.self,
		Kafka: d["kafka"], Postgres: d["postgres"], Sink: d["sink"]}
	if w.metricsURL != "" {
		res.HasAllocs = true
		res.AllocBytes = after.allocs.AllocBytes - before.allocs.AllocBytes
		res.Allocs = after.allocs.Mallocs - before.allocs.Mallocs
	}
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
// CPU is part of the whole-stack figure) and costs the same however many rows
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
	return result{Mails: l.Mails, Span: l.Span, HasLatency: true, P50: l.P50, P99: l.P99, Max: l.Max}, nil
}
