package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/bench/internal/benchkafka"
	"github.com/postline/postline/bench/relay"
	"github.com/postline/postline/internal/consumer"
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

	Senders     int           // POSTLINE_SENDERS and the relay URL's max_conns
	Partitions  int           // jobs topic and each delay topic
	Tiers       string        // POSTLINE_RETRY_TIERS (worker and scheduler)
	LagInterval time.Duration // POSTLINE_LAG_INTERVAL: how fresh the lag input is
	Timeout     time.Duration // longest a run may take to make every job terminal
	Sample      time.Duration // delay-depth sampling interval
	Parallel    bool          // run every (scenario, strategy) at once

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

// RealResult is one real run: the simulator's columns (from the relay's
// counters and the job table) plus how the jobs ended.
type RealResult struct {
	Result
	Scenario string
	Jobs     int
	// Failed and Dead count jobs in those terminal states; Unfinished
	// those not terminal when the run ended (only after a timeout).
	Failed, Dead, Unfinished int
	TimedOut                 bool
	Relay                    relay.Stats
}

// relayConfig is the relay of a scenario.
func (p RealParams) relayConfig(scenario string) relay.Config {
	c := relay.Config{TransientDrop: p.Transient, PermanentReject: p.Permanent, Seed: p.Seed}
	if scenario == ScenarioPostfix {
		c.HangUpAbove = p.HangUpAbove
		return c
	}
	c.Rate, c.Burst, c.MaxConns = p.Rate, p.Burst, p.Conns
	return c
}

// runs are the (scenario, strategy) pairs of p, main scenario first.
func (p RealParams) runs() [][2]string {
	var out [][2]string
	for _, sc := range []string{ScenarioMain, ScenarioPostfix} {
		if sc == ScenarioPostfix && p.PostfixJobs == 0 {
			continue
		}
		for _, s := range p.Strategies {
			out = append(out, [2]string{sc, s})
		}
	}
	return out
}

// RunReal runs every (scenario, strategy) of p, at once when p.Parallel,
// and returns the results in the order of runs. Progress goes to progress.
func RunReal(ctx context.Context, p RealParams, progress io.Writer) ([]RealResult, error) {
	runs := p.runs()
	results := make([]RealResult, len(runs))
	errs := make([]error, len(runs))
	var mu sync.Mutex // progress
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(progress, "bench-adaptive: "+format+"\n", args...)
	}
	one := func(i int) {
		sc, s := runs[i][0], runs[i][1]
		results[i], errs[i] = runOne(ctx, p, sc, s, func(format string, args ...any) {
			logf(sc+"/"+s+": "+format, args...)
		})
		if errs[i] != nil {
			errs[i] = fmt.Errorf("%s/%s: %w", sc, s, errs[i])
		}
	}
	if p.Parallel {
		var wg sync.WaitGroup
		for i := range runs {
			wg.Go(func() { one(i) })
		}
		wg.Wait()
	} else {
		for i := range runs {
			one(i)
		}
	}
	return results, errors.Join(errs...)
}

// runEnv names one run's Kafka topics, groups and schema.
type runEnv struct {
	jobs, dlq, prefix           string
	workerGroup, schedulerGroup string
	schema                      string
	delayTopics                 []string
	workerHTTP, schedHTTP       string
	workerLog, schedLog         string
	databaseURL, relayAddr      string
}

// runOne runs one strategy in one scenario on fresh topics, groups and
// schema, against a fresh relay, and tears them down.
func runOne(ctx context.Context, p RealParams, scenario, strategy string, logf func(string, ...any)) (RealResult, error) {
	n := p.Jobs
	if scenario == ScenarioPostfix {
		n = p.PostfixJobs
	}
	res := RealResult{Result: Result{Strategy: strategy}, Scenario: scenario, Jobs: n}
	tiers, err := retry.ParseTiers(p.Tiers)
	if err != nil {
		return res, err
	}
	id := randomHex(4)
	base := fmt.Sprintf("bench.adaptive.%s.%s.%s", scenario, strategy, id)
	e := runEnv{
		jobs: base + ".jobs", dlq: base + ".dlq", prefix: base + ".retry",
		workerGroup:    strings.ReplaceAll(base, ".", "-") + "-worker",
		schedulerGroup: strings.ReplaceAll(base, ".", "-") + "-scheduler",
		schema:         strings.ReplaceAll(base, ".", "_"),
		workerLog:      filepath.Join(p.LogDir, scenario+"-"+strategy+"-worker.log"),
		schedLog:       filepath.Join(p.LogDir, scenario+"-"+strategy+"-scheduler.log"),
	}
	e.delayTopics = tiers.Topics(e.prefix)
	cleanup := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	}

	specs := append(topic.Defaults(e.jobs, e.dlq, p.Partitions), retry.TopicSpecs(e.prefix, tiers, p.Partitions)...)
	if err := topic.Ensure(ctx, benchkafka.Cluster(p.Brokers...), specs...); err != nil {
		return res, err
	}
	if !p.Keep {
		defer func() {
			c, cancel := cleanup()
			defer cancel()
			if err := topic.Delete(c, benchkafka.Cluster(p.Brokers...), append([]string{e.jobs, e.dlq}, e.delayTopics...)...); err != nil {
				logf("delete topics: %v", err)
			}
		}()
	}
	if e.databaseURL, err = createSchema(ctx, p.DatabaseURL, e.schema); err != nil {
		return res, err
	}
	if !p.Keep {
		defer func() {
			c, cancel := cleanup()
			defer cancel()
			if err := dropSchema(c, p.DatabaseURL, e.schema); err != nil {
				logf("%v", err)
			}
		}()
	}
	rl, err := relay.Start(p.relayConfig(scenario), slog.New(slog.DiscardHandler))
	if err != nil {
		return res, err
	}
	defer rl.Close()
	e.relayAddr = rl.Addr()
	if e.workerHTTP, err = freeAddr(); err != nil {
		return res, err
	}
	if e.schedHTTP, err = freeAddr(); err != nil {
		return res, err
	}

	brokers := strings.Join(p.Brokers, ",")
	sched, err := startProc("retry-scheduler", p.SchedulerBin, e.schedLog, []string{
		"POSTLINE_KAFKA_BROKERS=" + brokers,
		"POSTLINE_JOBS_TOPIC=" + e.jobs,
		"POSTLINE_DLQ_TOPIC=" + e.dlq,
		"POSTLINE_RETRY_TOPIC_PREFIX=" + e.prefix,
		"POSTLINE_RETRY_TIERS=" + p.Tiers,
		"POSTLINE_SCHEDULER_GROUP=" + e.schedulerGroup,
		"POSTLINE_SCHEDULER_HTTP_ADDR=" + e.schedHTTP,
	})
	if err != nil {
		return res, err
	}
	defer func() { _ = sched.stop(15 * time.Second) }()
	worker, err := startProc("worker", p.WorkerBin, e.workerLog, append([]string{
		"POSTLINE_RETRY_POLICY=" + strategy,
		"POSTLINE_KAFKA_BROKERS=" + brokers,
		"POSTLINE_JOBS_TOPIC=" + e.jobs,
		"POSTLINE_DLQ_TOPIC=" + e.dlq,
		"POSTLINE_RETRY_TOPIC_PREFIX=" + e.prefix,
		"POSTLINE_RETRY_TIERS=" + p.Tiers,
		"POSTLINE_CONSUMER_GROUP=" + e.workerGroup,
		"POSTLINE_DATABASE_URL=" + e.databaseURL,
		"POSTLINE_HTTP_ADDR=" + e.workerHTTP,
		"POSTLINE_LAG_INTERVAL=" + p.LagInterval.String(),
		"POSTLINE_SENDERS=" + strconv.Itoa(p.Senders),
		fmt.Sprintf("POSTLINE_SMTP_RELAYS=smtp://%s?name=relay&tls=none&max_conns=%d", e.relayAddr, p.Senders),
	}, p.WorkerEnv...))
	if err != nil {
		return res, err
	}
	defer func() { _ = worker.stop(35 * time.Second) }()

	readyCtx, cancelReady := context.WithTimeout(ctx, 90*time.Second)
	defer cancelReady()
	if err := sched.waitReady(readyCtx, "http://"+e.schedHTTP+"/readyz"); err != nil {
		return res, err
	}
	if err := worker.waitReady(readyCtx, "http://"+e.workerHTTP+"/readyz"); err != nil {
		return res, err
	}
	client := &kafka.Client{Addr: kafka.TCP(p.Brokers...), Timeout: 5 * time.Second}
	if err := waitAssigned(readyCtx, client, e.workerGroup, e.jobs, p.Partitions); err != nil {
		return res, err
	}
	pool, err := pgxpool.New(ctx, e.databaseURL)
	if err != nil {
		return res, fmt.Errorf("postgres pool: %w", err)
	}
	defer pool.Close()
	logf("ready (logs %s, %s); publishing %d jobs", e.workerLog, e.schedLog, n)

	// Sample the delay topics' depth for the whole run.
	sampleCtx, stopSampling := context.WithCancel(ctx)
	depth := make(chan int64, 1)
	go func() {
		depth <- sampleDepth(sampleCtx, client, e.schedulerGroup, e.delayTopics, p.Partitions, p.Sample)
	}()
	start := time.Now()
	published, err := publishBurst(ctx, p.Brokers, e.jobs, n)
	var done time.Time
	if err == nil {
		done, err = waitTerminal(ctx, pool, worker, sched, n, start.Add(p.Timeout), logf)
	}
	stopSampling()
	res.PeakDepth = int(<-depth)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		res.TimedOut, err = true, nil
		done = time.Now()
		logf("timed out after %s", p.Timeout)
	}
	if err != nil {
		return res, err
	}
	if err := worker.stop(35 * time.Second); err != nil {
		logf("%v", err)
	}
	if err := sched.stop(15 * time.Second); err != nil {
		logf("%v", err)
	}
	res.Relay = rl.Stats()
	counts, err := statusCounts(ctx, pool)
	if err != nil {
		return res, err
	}
	fill(&res, published, start, done, counts)
	logf("done: %d delivered, %d failed, %d dead, %d unfinished in %s", res.Delivered, res.Failed, res.Dead, res.Unfinished, secs(res.Makespan))
	return res, nil
}

// fill derives the result's columns from the relay's counters, the publish
// times and the job table's final states. Latency is the relay's first
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
	pub, err := job.NewPublisher(job.PublisherConfig{Kafka: benchkafka.Cluster(brokers...), Topic: jobsTopic})
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
// context.DeadlineExceeded, and an error when a process exits.
func waitTerminal(ctx context.Context, pool *pgxpool.Pool, worker, sched *proc, n int, deadline time.Time, logf func(string, ...any)) (time.Time, error) {
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
		for _, p := range []*proc{worker, sched} {
			if p.exited() {
				return time.Time{}, fmt.Errorf("%s exited with %d of %d jobs terminal:\n%s", p.name, terminal, n, p.logTail(20))
			}
		}
		if time.Since(lastReport) >= 15*time.Second {
			logf("%d/%d terminal", terminal, n)
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
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

// waitAssigned polls until group is stable with every partition of
// jobsTopic assigned, so the burst is consumed from its first record on.
func waitAssigned(ctx context.Context, client *kafka.Client, group, jobsTopic string, partitions int) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		last := consumer.CheckAssigned(ctx, client, group, jobsTopic, partitions)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("worker group not ready: %w (last: %v)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// createSchema creates schema and returns a URL whose connections use it.
func createSchema(ctx context.Context, base, schema string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", errors.New("-database-url must be a postgres:// URL")
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return "", fmt.Errorf("create schema %s: %w", schema, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func dropSchema(ctx context.Context, base, schema string) error {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("drop schema %s: connect: %w", schema, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
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
	if _, err := retry.ParseTiers(p.Tiers); err != nil {
		return fmt.Errorf("-tiers: %w", err)
	}
	return nil
}
