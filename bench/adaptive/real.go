package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/bench/internal/benchkafka"
	"github.com/postline/postline/bench/internal/benchproc"
	"github.com/postline/postline/bench/internal/benchworkers"
	"github.com/postline/postline/bench/relay"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/job"
)

// Scenario names of the real runs.
const (
	ScenarioMain    = "main"
	ScenarioPostfix = "postfix"
)

// RealParams are the real scenario's parameters: the relay (shared with
// the simulator's flags), the burst, the worker's transport and where the
// stack and the binaries are.
type RealParams struct {
	Jobs        int     // burst of the main scenario
	PostfixJobs int     // burst of Postfix's scenario (0: skip it)
	Rate        float64 // relay capacity R, mails/s
	Burst       int     // relay bucket
	Conns       int     // relay connections C (421 at the greeting above)
	HangUpAbove int     // Postfix's scenario: sessions served before 421 at MAIL
	Transient   float64 // relay: share of transactions dropped with 421 4.4.2
	Permanent   float64 // relay: share of recipients rejected with 550 5.1.1
	Seed        int64   // relay drops and rejections

	// Scenarios are the scenarios to run, in allScenarios' order;
	// ScenarioJobs the bursts of the harder ones (main and Postfix's take
	// Jobs and PostfixJobs).
	Scenarios    []string
	ScenarioJobs map[string]int

	Senders     int           // POSTLINE_SENDERS and the relay URL's max_conns
	Partitions  int           // jobs topic and each delay topic
	Tiers       string        // POSTLINE_RETRY_TIERS (worker and scheduler)
	LagInterval time.Duration // POSTLINE_LAG_INTERVAL: how fresh the lag input is
	Timeout     time.Duration // longest a run may take to make every job terminal
	// HardTimeout is the longest a harder scenario's run may take; 0 =
	// min(Timeout, 2x its minimum makespan + 3m).
	HardTimeout time.Duration
	Sample      time.Duration // delay-depth sampling interval
	Parallel    bool          // run main's and Postfix's (scenario, strategy) pairs at once

	Strategies []string
	// WorkerEnv are extra KEY=VALUE settings for every run's worker, the
	// same for all strategies (POSTLINE_RETRY_POLICY is the harness's).
	WorkerEnv    []string
	WorkerBin    string
	SchedulerBin string
	Brokers      []string
	DatabaseURL  string
	LogDir       string
	Keep         bool // keep topics and schemas
}

// RealResult is one real run: the simulator's columns (from the relays'
// counters and the job table) plus how the jobs ended.
type RealResult struct {
	Result
	Scenario string
	Jobs     int
	// Failed and Dead count jobs in those terminal states; Unfinished
	// those not terminal when the run ended (only after a timeout).
	Failed, Dead, Unfinished int
	TimedOut                 bool
	Complete                 bool // the run ended with figures (in time or timed out), not with an error
	// Relay is every relay's counters merged (times in order); Relays
	// each relay's, named as in the worker's relay URLs.
	Relay      relay.Stats
	Relays     []relay.Stats
	RelayNames []string
	Start      time.Time     // publishing started: t = 0
	Publish    time.Duration // publishing took
	Workers    int           // worker processes, late ones included
	// Joined is when each late worker was started, since Start.
	Joined []time.Duration
	// Openings sums the workers' postline_circuit_transitions_total{to="open"}
	// read from /metrics at the end; LoggedOpenings counts "circuit
	// transition" lines to open in their logs.
	Openings, LoggedOpenings int
	MetricsErr               error // a worker's /metrics could not be read
	// Tiers counts the records written to each delay topic, by tier, in
	// the order of the tiers.
	Tiers []tierCount
}

// tierCount is how many records a delay tier's topic got in a run.
type tierCount struct {
	Tier    string
	Records int64
}

// relayConfig is the relay of the main or Postfix's scenario.
func (p RealParams) relayConfig(scenario string) relay.Config {
	c := relay.Config{TransientDrop: p.Transient, PermanentReject: p.Permanent, Seed: p.Seed}
	if scenario == ScenarioPostfix {
		c.HangUpAbove = p.HangUpAbove
		return c
	}
	c.Rate, c.Burst, c.MaxConns = p.Rate, p.Burst, p.Conns
	return c
}

// realRun is one (scenario, strategy) pair.
type realRun struct {
	sc       scenario
	strategy string
}

// runs are the (scenario, strategy) pairs of p in allScenarios' order.
func (p RealParams) runs() ([]realRun, error) {
	var out []realRun
	for _, name := range allScenarios {
		if !slices.Contains(p.Scenarios, name) {
			continue
		}
		sc, err := p.scenario(name)
		if err != nil {
			return nil, err
		}
		if sc.Jobs == 0 {
			continue // Postfix's scenario with -real-postfix-jobs 0
		}
		for _, s := range sc.Strategies {
			out = append(out, realRun{sc, s})
		}
	}
	return out, nil
}

// shared reports whether a scenario's runs may share the machine: main's
// and Postfix's, whose figures were always measured that way. The harder
// scenarios each run alone.
func shared(name string) bool { return name == ScenarioMain || name == ScenarioPostfix }

// RunReal runs every (scenario, strategy) of p and returns the results in
// the order of runs: main's and Postfix's first, at once when p.Parallel,
// then each harder scenario alone. Progress goes to progress.
func RunReal(ctx context.Context, p RealParams, progress io.Writer) ([]RealResult, error) {
	runs, err := p.runs()
	if err != nil {
		return nil, err
	}
	results := make([]RealResult, len(runs))
	errs := make([]error, len(runs))
	var mu sync.Mutex // progress
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(progress, "bench-adaptive: %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	one := func(i int) {
		sc, s := runs[i].sc, runs[i].strategy
		results[i], errs[i] = runOne(ctx, p, sc, s, func(format string, args ...any) {
			logf(sc.Name+"/"+s+": "+format, args...)
		})
		if errs[i] != nil {
			errs[i] = fmt.Errorf("%s/%s: %w", sc.Name, s, errs[i])
		}
	}
	var wg sync.WaitGroup
	for i, r := range runs {
		if shared(r.sc.Name) && p.Parallel {
			wg.Go(func() { one(i) })
			continue
		}
		wg.Wait() // a harder scenario starts when everything before it is done
		if ctx.Err() != nil {
			break
		}
		one(i)
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

// runEnv names one run's Kafka topics, groups and schema.
type runEnv struct {
	jobs, dlq, prefix           string
	workerGroup, schedulerGroup string
	schema                      string
	delayTopics                 []string
	schedHTTP                   string
	schedLog                    string
	databaseURL                 string
	relayAddrs                  []string
}

// workerEnv is the environment of one worker of sc, reachable at httpAddr.
func (p RealParams) workerEnv(sc scenario, e runEnv, strategy, httpAddr string) []string {
	env := []string{
		"POSTLINE_RETRY_POLICY=" + strategy,
		"POSTLINE_KAFKA_BROKERS=" + strings.Join(p.Brokers, ","),
		"POSTLINE_JOBS_TOPIC=" + e.jobs,
		"POSTLINE_DLQ_TOPIC=" + e.dlq,
		"POSTLINE_RETRY_TOPIC_PREFIX=" + e.prefix,
		"POSTLINE_RETRY_TIERS=" + p.Tiers,
		"POSTLINE_CONSUMER_GROUP=" + e.workerGroup,
		"POSTLINE_DATABASE_URL=" + e.databaseURL,
		"POSTLINE_HTTP_ADDR=" + httpAddr,
	}
	if !sc.DefaultTransport {
		env = append(env, "POSTLINE_LAG_INTERVAL="+p.LagInterval.String(), "POSTLINE_SENDERS="+strconv.Itoa(p.Senders))
	}
	env = append(env, "POSTLINE_SMTP_RELAYS="+sc.relayURLs(e.relayAddrs, p.Senders))
	return append(env, p.WorkerEnv...)
}

// workerFleet is a run's worker processes, late ones added while it runs.
type workerFleet struct {
	mu    sync.Mutex
	procs []*benchproc.Proc
	addrs []string // each one's HTTP address
}

func (f *workerFleet) add(pr *benchproc.Proc, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procs = append(f.procs, pr)
	f.addrs = append(f.addrs, addr)
}

func (f *workerFleet) list() ([]*benchproc.Proc, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.procs), slices.Clone(f.addrs)
}

// runOne runs one strategy in one scenario on fresh topics, groups and
// schema, against fresh relays, and tears them down.
func runOne(ctx context.Context, p RealParams, sc scenario, strategy string, logf func(string, ...any)) (RealResult, error) {
	n := sc.Jobs
	res := RealResult{Result: Result{Strategy: strategy}, Scenario: sc.Name, Jobs: n}
	tiers, err := retry.ParseTiers(p.Tiers)
	if err != nil {
		return res, err
	}
	r := &oneRun{p: p, sc: sc, strategy: strategy, e: newRunEnv(p, sc, strategy, tiers), fleet: &workerFleet{}, logf: logf}
	e := &r.e
	teardown, err := r.provision(ctx, tiers)
	defer teardown()
	if err != nil {
		return res, err
	}
	relays, err := r.startRelays(&res)
	defer func() {
		for i := len(relays) - 1; i >= 0; i-- {
			relays[i].Close()
		}
	}()
	if err != nil {
		return res, err
	}
	if e.schedHTTP, err = benchenv.FreeAddr(); err != nil {
		return res, err
	}
	sched, err := r.startScheduler()
	if err != nil {
		return res, err
	}
	defer func() { _ = sched.Stop(15 * time.Second) }()
	defer func() {
		procs, _ := r.fleet.list()
		for _, pr := range procs {
			_ = pr.Stop(35 * time.Second)
		}
	}()
	readyCtx, cancelReady := context.WithTimeout(ctx, 90*time.Second)
	defer cancelReady()
	if err := r.startFleet(readyCtx, sched); err != nil {
		return res, err
	}
	client := &kafka.Client{Addr: kafka.TCP(p.Brokers...), Timeout: 5 * time.Second}
	pool, err := pgxpool.New(ctx, e.databaseURL)
	if err != nil {
		return res, fmt.Errorf("postgres pool: %w", err)
	}
	defer pool.Close()
	logf("ready (%d worker(s), logs in %s); publishing %d jobs", sc.Workers, p.LogDir, n)

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	// Sample the delay topics' depth for the whole run.
	depth := make(chan int64, 1)
	go func() {
		depth <- sampleDepth(runCtx, client, e.schedulerGroup, e.delayTopics, p.Partitions, p.Sample)
	}()
	res.Start = time.Now()
	var side sync.WaitGroup
	defer side.Wait()
	for i, spec := range sc.Relays {
		side.Go(func() { runSchedule(runCtx, relays[i], spec.Schedule, res.Start, logf) })
	}
	lateErr := make(chan error, len(sc.Late))
	for k := range sc.Late {
		side.Go(func() { r.startLateWorker(runCtx, k, res.Start, lateErr) })
	}
	published, err := publishBurst(ctx, p.Brokers, e.jobs, n)
	res.Publish = time.Since(res.Start)
	var done time.Time
	if err == nil {
		done, err = waitTerminal(runCtx, pool, r.fleet, sched, lateErr, n, res.Start.Add(p.scenarioTimeout(sc)), logf)
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		res.TimedOut, err = true, nil
		done = time.Now()
		logf("timed out after %s", p.scenarioTimeout(sc))
	}
	stopRun()
	res.PeakDepth = int(<-depth)
	if res.Tiers, err = tierCounts(ctx, client, tiers.Topics(e.prefix), tiers.String(), p.Partitions); err != nil {
		logf("delay tiers: %v", err)
		err = nil
	}
	side.Wait()
	if err != nil {
		return res, err
	}
	r.stopAndCount(ctx, &res, sched, relays)
	counts, err := statusCounts(ctx, pool)
	if err != nil {
		return res, err
	}
	fill(&res, published, res.Start, done, counts)
	res.Complete = true
	logf("done: %d delivered, %d failed, %d dead, %d unfinished in %s", res.Delivered, res.Failed, res.Dead, res.Unfinished, secs(res.Makespan))
	return res, nil
}

// oneRun is what the steps of one runOne share.
type oneRun struct {
	p        RealParams
	sc       scenario
	strategy string
	e        runEnv
	fleet    *workerFleet
	logf     func(string, ...any)
}

// newRunEnv names the topics, groups, schema and scheduler log of one run
// of strategy in sc, unique to the run.
func newRunEnv(p RealParams, sc scenario, strategy string, tiers retry.Tiers) runEnv {
	id := benchenv.RandomHex(4)
	base := fmt.Sprintf("bench.adaptive.%s.%s.%s", sc.Name, strategy, id)
	e := runEnv{
		jobs: base + ".jobs", dlq: base + ".dlq", prefix: base + ".retry",
		workerGroup:    strings.ReplaceAll(base, ".", "-") + "-worker",
		schedulerGroup: strings.ReplaceAll(base, ".", "-") + "-scheduler",
		schema:         strings.ReplaceAll(strings.ReplaceAll(base, ".", "_"), "-", "_"),
		schedLog:       filepath.Join(p.LogDir, sc.Name+"-"+strategy+"-scheduler.log"),
	}
	e.delayTopics = tiers.Topics(e.prefix)
	return e
}

// provision creates the run's topics and schema and sets r.e.databaseURL.
// teardown, never nil, deletes what was created (unless -keep), even when
// err is not nil.
func (r *oneRun) provision(ctx context.Context, tiers retry.Tiers) (teardown func(), err error) {
	var undo benchenv.Cleanups
	teardown = undo.Run
	p, e := r.p, &r.e
	scratch := benchenv.Scratch{Brokers: p.Brokers, DatabaseURL: p.DatabaseURL, Keep: p.Keep, Logf: r.logf}
	specs := append(topic.Defaults(e.jobs, e.dlq, p.Partitions), retry.TopicSpecs(e.prefix, tiers, p.Partitions)...)
	if err := scratch.EnsureTopics(ctx, &undo, specs, append([]string{e.jobs, e.dlq}, e.delayTopics...)); err != nil {
		return teardown, err
	}
	e.databaseURL, err = scratch.EnsureSchema(ctx, &undo, e.schema)
	return teardown, err
}

// startRelays starts the scenario's relays, noting their addresses in r.e
// and their names in res. It returns those it started, even with an error.
func (r *oneRun) startRelays(res *RealResult) ([]*relay.Relay, error) {
	relays := make([]*relay.Relay, 0, len(r.sc.Relays))
	for _, spec := range r.sc.Relays {
		rl, err := relay.Start(spec.Config, slog.New(slog.DiscardHandler))
		if err != nil {
			return relays, err
		}
		relays = append(relays, rl)
		r.e.relayAddrs = append(r.e.relayAddrs, rl.Addr())
		res.RelayNames = append(res.RelayNames, spec.Name)
	}
	return relays, nil
}

// startScheduler starts the run's retry scheduler.
func (r *oneRun) startScheduler() (*benchproc.Proc, error) {
	p, e := r.p, r.e
	return benchproc.Start(benchproc.Spec{Name: "retry-scheduler", Bin: p.SchedulerBin, LogPath: e.schedLog, Isolate: true, Env: []string{
		"POSTLINE_KAFKA_BROKERS=" + strings.Join(p.Brokers, ","),
		"POSTLINE_JOBS_TOPIC=" + e.jobs,
		"POSTLINE_DLQ_TOPIC=" + e.dlq,
		"POSTLINE_RETRY_TOPIC_PREFIX=" + e.prefix,
		"POSTLINE_RETRY_TIERS=" + p.Tiers,
		"POSTLINE_SCHEDULER_GROUP=" + e.schedulerGroup,
		"POSTLINE_SCHEDULER_HTTP_ADDR=" + e.schedHTTP,
	}})
}

// startWorker starts worker i (from 0) and adds it to the fleet.
func (r *oneRun) startWorker(i int) (*benchproc.Proc, string, error) {
	addr, err := benchenv.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	sc, strategy := r.sc, r.strategy
	name, logName := "worker", sc.Name+"-"+strategy+"-worker.log"
	if sc.Workers+len(sc.Late) > 1 {
		name, logName = fmt.Sprintf("worker %d", i+1), fmt.Sprintf("%s-%s-worker%d.log", sc.Name, strategy, i+1)
	}
	pr, err := benchproc.Start(benchproc.Spec{Name: name, Bin: r.p.WorkerBin, LogPath: filepath.Join(r.p.LogDir, logName), Env: r.p.workerEnv(sc, r.e, strategy, addr), Isolate: true})
	if err != nil {
		return nil, "", err
	}
	r.fleet.add(pr, addr)
	return pr, addr, nil
}

// startFleet waits for the scheduler, starts the scenario's first workers
// one by one and waits until they have joined the worker group.
func (r *oneRun) startFleet(readyCtx context.Context, sched *benchproc.Proc) error {
	if err := waitReady(readyCtx, sched, "http://"+r.e.schedHTTP+"/readyz"); err != nil {
		return err
	}
	for i := range r.sc.Workers {
		pr, addr, err := r.startWorker(i)
		if err != nil {
			return err
		}
		if err := waitReady(readyCtx, pr, "http://"+addr+"/readyz"); err != nil {
			return err
		}
	}
	workers, _ := r.fleet.list()
	return benchworkers.WaitReady(readyCtx, workers, benchworkers.Ready{What: "worker group",
		Group: &benchworkers.Group{Brokers: r.p.Brokers, ID: r.e.workerGroup, Topic: r.e.jobs, Partitions: r.p.Partitions, Members: r.sc.Workers}})
}

// startLateWorker starts the scenario's late worker k at its time after
// start, unless the run ends first; a failure to start goes to lateErr.
func (r *oneRun) startLateWorker(runCtx context.Context, k int, start time.Time, lateErr chan<- error) {
	select {
	case <-runCtx.Done():
		return
	case <-time.After(time.Until(start.Add(r.sc.Late[k]))):
	}
	if _, _, err := r.startWorker(r.sc.Workers + k); err != nil {
		lateErr <- err
		return
	}
	r.logf("worker %d started at t=%s", r.sc.Workers+k+1, secs(time.Since(start)))
}

// stopAndCount stops the workers and the scheduler once every job is
// terminal and adds to res what they and the relays counted.
func (r *oneRun) stopAndCount(ctx context.Context, res *RealResult, sched *benchproc.Proc, relays []*relay.Relay) {
	procs, addrs := r.fleet.list()
	res.Workers = len(procs)
	for _, at := range r.sc.Late[:min(len(r.sc.Late), len(procs)-r.sc.Workers)] {
		res.Joined = append(res.Joined, at)
	}
	for _, addr := range addrs {
		opened, err := scrapeOpenings(ctx, "http://"+addr+"/metrics")
		res.Openings += opened
		res.MetricsErr = errors.Join(res.MetricsErr, err)
	}
	for _, pr := range procs {
		if err := pr.Stop(35 * time.Second); err != nil {
			r.logf("%v", err)
		}
		opened, err := loggedOpenings(pr.LogPath())
		res.LoggedOpenings += opened
		res.MetricsErr = errors.Join(res.MetricsErr, err)
	}
	if err := sched.Stop(15 * time.Second); err != nil {
		r.logf("%v", err)
	}
	for _, rl := range relays {
		res.Relays = append(res.Relays, rl.Stats())
	}
	res.Relay = mergeStats(res.Relays)
}

// tierCounts reads the end offsets of the delay topics: the records each
// tier got (the topics are fresh).
func tierCounts(ctx context.Context, client *kafka.Client, topics []string, tiers string, partitions int) ([]tierCount, error) {
	names := strings.Split(tiers, ",")
	req := make(map[string][]kafka.OffsetRequest, len(topics))
	for _, t := range topics {
		for p := range partitions {
			req[t] = append(req[t], kafka.LastOffsetOf(p))
		}
	}
	ends, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: req})
	if err != nil {
		return nil, err
	}
	out := make([]tierCount, len(topics))
	for i, t := range topics {
		out[i].Tier = t
		if i < len(names) {
			out[i].Tier = names[i]
		}
		for _, p := range ends.Topics[t] {
			if p.Error != nil {
				return nil, p.Error
			}
			out[i].Records += max(0, p.LastOffset)
		}
	}
	return out, nil
}

// completed returns the results of the runs that ended with figures.
func completed(results []RealResult) []RealResult {
	var out []RealResult
	for _, r := range results {
		if r.Complete {
			out = append(out, r)
		}
	}
	return out
}

// runSchedule applies a relay's rate changes at their times after start,
// until ctx ends.
func runSchedule(ctx context.Context, rl *relay.Relay, steps []rateStep, start time.Time, logf func(string, ...any)) {
	for _, s := range steps {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(s.At))):
		}
		if err := rl.SetRate(s.Rate, s.Burst); err != nil {
			logf("relay rate change: %v", err)
			return
		}
		logf("relay %s now %.0f/s, burst %d (t=%s)", rl.Addr(), s.Rate, s.Burst, secs(time.Since(start)))
	}
}

// mergeStats adds the relays' counters and merges their time series in
// time order.
func mergeStats(all []relay.Stats) relay.Stats {
	if len(all) == 1 {
		return all[0]
	}
	var m relay.Stats
	type accepted struct {
		at time.Time
		id string
	}
	var acc []accepted
	for i, s := range all {
		if i == 0 || s.Since.Before(m.Since) {
			m.Since = s.Since
		}
		m.Connections += s.Connections
		m.Refused += s.Refused
		m.HungUp += s.HungUp
		m.Open += s.Open
		m.PeakOpen += s.PeakOpen
		m.Accepted += s.Accepted
		m.Throttled += s.Throttled
		m.TransientDrops += s.TransientDrops
		m.TransientReplies += s.TransientReplies
		m.PermanentRejects += s.PermanentRejects
		m.ThrottledAt = append(m.ThrottledAt, s.ThrottledAt...)
		m.RefusedAt = append(m.RefusedAt, s.RefusedAt...)
		m.RateChanges = append(m.RateChanges, s.RateChanges...)
		for k, at := range s.AcceptedAt {
			acc = append(acc, accepted{at, s.AcceptedIDs[k]})
		}
	}
	slices.SortStableFunc(acc, func(a, b accepted) int { return a.at.Compare(b.at) })
	for _, a := range acc {
		m.AcceptedAt = append(m.AcceptedAt, a.at)
		m.AcceptedIDs = append(m.AcceptedIDs, a.id)
	}
	slices.SortFunc(m.ThrottledAt, time.Time.Compare)
	slices.SortFunc(m.RefusedAt, time.Time.Compare)
	slices.SortFunc(m.RateChanges, func(a, b relay.RateChange) int { return a.At.Compare(b.At) })
	return m
}

// openingsMetric is the worker's counter of circuit state changes
// (internal/circuit), labelled by provider and the state changed to.
const openingsMetric = "postline_circuit_transitions_total"

// scrapeOpenings reads a worker's /metrics and sums openingsMetric over
// the series with to="open".
func scrapeOpenings(ctx context.Context, url string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("read %s: %s", url, resp.Status)
	}
	return countOpenings(resp.Body)
}

// countOpenings sums openingsMetric{to="open"} in a Prometheus text
// exposition.
func countOpenings(r io.Reader) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	var sum float64
	for sc.Scan() {
		line := sc.Text()
		labels, ok := strings.CutPrefix(line, openingsMetric+"{")
		if !ok {
			continue
		}
		end := strings.LastIndexByte(labels, '}')
		if end < 0 || !strings.Contains(","+labels[:end], `,to="open"`) {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(labels[end+1:])[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", openingsMetric, line, err)
		}
		sum += v
	}
	return int(sum), sc.Err()
}

// loggedOpenings counts the worker log's "circuit transition" lines to
// open (the worker logs JSON).
func loggedOpenings(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, `"msg":"circuit transition"`) && strings.Contains(l, `"to":"open"`) {
			n++
		}
	}
	return n, sc.Err()
}

// acceptance of a job's Message-ID minus the time the job was published.
func fill(r *RealResult, published map[string]time.Time, start, done time.Time, counts map[string]int) {
	st := r.Relay
	r.Attempts = int(st.Attempts())
	r.Wasted = int(st.Deferred())
	r.Refused = int(st.Refused + st.HungUp)
	r.Slowed = int(st.Throttled)
	r.Failed, r.Dead = counts["failed"], counts["dead"]
	r.Rejected = r.Failed + r.Dead
	r.Unfinished = r.Jobs - counts["sent"] - r.Rejected
	seen := make(map[string]bool, len(published))
	for i, id := range st.AcceptedIDs {
		at, ok := published[id]
		if !ok || seen[id] {
			continue // not ours, or a duplicate delivery
		}
		seen[id] = true
		r.Latencies = append(r.Latencies, st.AcceptedAt[i].Sub(at))
		r.Timeline = append(r.Timeline, st.AcceptedAt[i].Sub(start))
	}
	r.Delivered = len(seen)
	r.Makespan = done.Sub(start)
}

// publishBurst publishes n jobs, one recipient each, in chunks, and
// returns each Message-ID's publish time (the start of its chunk's
// Publish, the job's first-seen time). Recipients are the same in every
// run, so the relay rejects the same jobs for every strategy.
func publishBurst(ctx context.Context, brokers []string, jobsTopic string, n int) (map[string]time.Time, error) {
	pub, err := job.NewPublisher(benchkafka.Cluster(brokers...).Config(), job.PublisherConfig{Topic: jobsTopic})
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	const chunk = 500
	out := make(map[string]time.Time, n)
	for i := 0; i < n; i += chunk {
		jobs := make([]job.Job, 0, chunk)
		for k := i; k < min(i+chunk, n); k++ {
			jobs = append(jobs, job.Job{
				Version: job.SchemaVersion,
				From:    "Postline Bench <bench@postline.test>",
				To:      []string{rcptAddr(k)},
				Subject: fmt.Sprintf("adaptive bench %d", k),
				Text:    "Postline adaptive-backoff benchmark.\n",
			})
		}
		at := time.Now()
		ids, err := pub.Publish(ctx, jobs...)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			out[id] = at
		}
	}
	return out, nil
}

// rcptAddr is the recipient of the k-th job of a burst.
func rcptAddr(k int) string { return fmt.Sprintf("rcpt%d@relay.postline.test", k) }

// waitTerminal polls the job table until n jobs are sent, failed or dead
// and returns when the last of them got there; past deadline it returns
// context.DeadlineExceeded, and an error when a process exits or a late
// worker could not start.
func waitTerminal(ctx context.Context, pool *pgxpool.Pool, fleet *workerFleet, sched *benchproc.Proc, lateErr <-chan error, n int, deadline time.Time, logf func(string, ...any)) (time.Time, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	lastReport := time.Now()
	for {
		var terminal int
		var last *time.Time
		err := pool.QueryRow(ctx, `SELECT count(*), max(updated_at) FROM postline_messages
			WHERE status IN ('sent', 'failed', 'dead')`).Scan(&terminal, &last)
		switch {
		case err != nil && ctx.Err() == nil:
			return time.Time{}, fmt.Errorf("count terminal rows: %w", err)
		case err == nil && terminal >= n && last != nil:
			return *last, nil
		}
		procs, _ := fleet.list()
		for _, p := range append(procs, sched) {
			if p.Exited() {
				return time.Time{}, fmt.Errorf("%s exited with %d of %d jobs terminal:\n%s", p.Name(), terminal, n, p.LogTail(20))
			}
		}
		if time.Since(lastReport) >= 15*time.Second {
			logf("%d/%d terminal", terminal, n)
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case err := <-lateErr:
			return time.Time{}, fmt.Errorf("late worker: %w", err)
		case <-tick.C:
		}
	}
}

// statusCounts counts the job table's rows by status.
func statusCounts(ctx context.Context, pool *pgxpool.Pool) (map[string]int, error) {
	rows, err := pool.Query(ctx, `SELECT status, count(*) FROM postline_messages GROUP BY status`)
	if err != nil {
		return nil, fmt.Errorf("status counts: %w", err)
	}
	out := map[string]int{}
	var status string
	var c int
	_, err = pgx.ForEachRow(rows, []any{&status, &c}, func() error { out[status] = c; return nil })
	if err != nil {
		return nil, fmt.Errorf("status counts: %w", err)
	}
	return out, nil
}

// sampleDepth reads the delay topics' depth every interval until ctx ends
// and returns the largest it saw. Failed samples are skipped: a gap in
// the samples is better than a run aborted by a slow metadata call.
func sampleDepth(ctx context.Context, client *kafka.Client, group string, topics []string, partitions int, interval time.Duration) int64 {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var peak int64
	for {
		if d, err := delayDepth(ctx, client, group, topics, partitions); err == nil {
			peak = max(peak, d)
		}
		select {
		case <-ctx.Done():
			return peak
		case <-tick.C:
		}
	}
}

// delayDepth is the number of records in the delay topics the scheduler's
// group has not committed: the sum over their partitions of end offset
// minus committed offset (the topics are fresh, so no commit means 0).
func delayDepth(ctx context.Context, client *kafka.Client, group string, topics []string, partitions int) (int64, error) {
	req := make(map[string][]kafka.OffsetRequest, len(topics))
	fetch := make(map[string][]int, len(topics))
	for _, t := range topics {
		for p := range partitions {
			req[t] = append(req[t], kafka.LastOffsetOf(p))
			fetch[t] = append(fetch[t], p)
		}
	}
	ends, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: req})
	if err != nil {
		return 0, err
	}
	committed := map[string]map[int]int64{}
	resp, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: fetch})
	if err == nil {
		err = resp.Error
	}
	switch {
	case errors.Is(err, kafka.GroupIdNotFound):
	case err != nil:
		return 0, err
	default:
		for t, ps := range resp.Topics {
			committed[t] = map[int]int64{}
			for _, p := range ps {
				if p.Error == nil {
					committed[t][p.Partition] = p.CommittedOffset
				}
			}
		}
	}
	var depth int64
	for t, ps := range ends.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return 0, p.Error
			}
			depth += max(0, p.LastOffset-max(0, committed[t][p.Partition]))
		}
	}
	return depth, nil
}

// realStrategies parses a comma-separated list of strategies.
func realStrategies(s string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains([]string{StratUniform, StratReference, StratAdaptive}, name) {
			return nil, fmt.Errorf("-real-strategies: unknown strategy %q (uniform, reference, adaptive)", name)
		}
		out = append(out, name)
	}
	return out, nil
}

// The local stack's addresses (scripts/stack.sh), as internal/testenv has
// them; POSTLINE_TEST_KAFKA and POSTLINE_TEST_DATABASE_URL override them.
const (
	testenvKafka       = "127.0.0.1:9092"
	testenvDatabaseURL = "postgres://postline:postline@127.0.0.1:5432/postline?sslmode=disable"
)

// defaultRealParams are the real scenario's defaults; the relay and the
// senders come from the simulator's parameters.
func defaultRealParams() RealParams {
	return RealParams{
		Jobs: 2000, PostfixJobs: 1000, HangUpAbove: 5, Seed: 1,
		Scenarios: allScenarios, ScenarioJobs: defaultScenarioJobs(),
		Partitions: 8, Tiers: retry.DefaultTiers.String(), LagInterval: time.Second,
		Timeout: 30 * time.Minute, Sample: 250 * time.Millisecond, Parallel: true,
		Strategies: []string{StratUniform, StratReference, StratAdaptive},
		// Every strategy runs the settings a user gets, the circuit
		// breaker included: throttles no longer count toward it, so it
		// opens only for a relay that refuses everything.
		WorkerEnv:    nil,
		WorkerBin:    "bin/worker",
		SchedulerBin: "bin/retry-scheduler",
	}
}

// validate reports the first unusable parameter, naming its flag.
func (p RealParams) validate() error {
	switch {
	case p.Jobs < 1:
		return fmt.Errorf("-real-jobs %d must be positive", p.Jobs)
	case p.PostfixJobs < 0:
		return fmt.Errorf("-real-postfix-jobs %d must not be negative", p.PostfixJobs)
	case len(p.Scenarios) == 0:
		return errors.New("-real-scenarios is empty")
	case p.PostfixJobs > 0 && p.HangUpAbove < 1:
		return fmt.Errorf("-real-hang-up-above %d must be positive", p.HangUpAbove)
	case p.Partitions < 1:
		return fmt.Errorf("-real-partitions %d must be positive", p.Partitions)
	case p.LagInterval <= 0 || p.Timeout <= 0 || p.Sample <= 0:
		return fmt.Errorf("-real-lag-interval %s, -real-timeout %s and -real-sample %s must be positive", p.LagInterval, p.Timeout, p.Sample)
	case len(p.Strategies) == 0:
		return errors.New("-real-strategies is empty")
	case p.WorkerBin == "" || p.SchedulerBin == "":
		return errors.New("-worker-bin and -scheduler-bin must be set")
	case p.Rate > 0 && p.Burst < 1:
		return fmt.Errorf("-burst %d must be positive with a rate", p.Burst)
	}
	for _, kv := range p.WorkerEnv {
		if k, _, ok := strings.Cut(kv, "="); !ok || !strings.HasPrefix(k, "POSTLINE_") || k == "POSTLINE_RETRY_POLICY" {
			return fmt.Errorf("-worker-env %q: want POSTLINE_NAME=value, not POSTLINE_RETRY_POLICY (the harness sets it per strategy)", kv)
		}
	}
	for name, n := range p.ScenarioJobs {
		if n < 1 {
			return fmt.Errorf("-real-%s-jobs %d must be positive", name, n)
		}
	}
	for _, name := range p.Scenarios {
		if _, err := p.scenario(name); err != nil {
			return err
		}
	}
	if _, err := retry.ParseTiers(p.Tiers); err != nil {
		return fmt.Errorf("-tiers: %w", err)
	}
	return nil
}

// waitReady polls url (a /readyz) until it answers 200, p exits or ctx
// ends.
func waitReady(ctx context.Context, p *benchproc.Proc, url string) error {
	return benchworkers.WaitReady(ctx, []*benchproc.Proc{p}, benchworkers.Ready{What: p.Name(), URLs: []string{url}})
}
