package main

// The outcomes variant: the postline variant's worker, settings and
// measurement with the outcome loop on, as a deployment with a bounce
// domain runs it. The worker gets a bounce domain and return path keys, so
// every recipient gets its own return path (bounce+<token>@<domain>), the
// sink is asked for NOTIFY=SUCCESS,FAILURE when it announces DSN, and every
// sent mail enters the confirm phase (a confirmation window, its recipients
// accepted until a report comes); its events go to a fresh events topic.
// cmd/webhook-dispatcher reads that topic with one endpoint, which the
// harness serves on loopback: it verifies every request's signature with the
// Standard Webhooks library, counts the distinct events and answers 204.
// No bounce-receiver runs: smtp-sink sends no reports.
//
// Besides the worker's figures the row measures whether the dispatcher keeps
// up: every lagSampleEvery from the publish to the last webhook, the events on the
// topic (its end offsets) minus the distinct events the endpoint received,
// the webhook lag; its maximum, its value when the last mail was sent, and
// the time from the last mail's sent_at to the last webhook.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/bench/internal/benchkafka"
	"github.com/postline/postline/bench/internal/benchproc"
	"github.com/postline/postline/internal/topic"
)

const (
	// outcomesBounceDomain is the bounce domain of the variant's return
	// paths. Nothing resolves it: no report comes back.
	outcomesBounceDomain = "bounce.postline.test"
	// outcomesEndpointID is the one endpoint's id; the dispatcher reads the
	// events in the group <POSTLINE_WEBHOOKS_GROUP>.<id>.
	outcomesEndpointID = "bench"
	// outcomesSecretEnv is the variable that holds the endpoint's secret in
	// the dispatcher's environment.
	outcomesSecretEnv = "POSTLINE_BENCH_WEBHOOK_SECRET"
	// lagSampleEvery is how often the webhook lag is sampled: a row of
	// 5,000 jobs delivers in about a second here, so a sample a second
	// would see none of it. A sample is one ListOffsets request on an open
	// connection.
	lagSampleEvery = 100 * time.Millisecond
	// webhookDrainLimit bounds the wait for the endpoint to have every
	// event after the last mail was sent; past it the row is reported as
	// not drained (and its lag target fails) rather than waited for.
	webhookDrainLimit = 60 * time.Second
	// maxWebhookBody bounds what the endpoint reads of one request: an
	// event is a few hundred bytes.
	maxWebhookBody = 1 << 20
)

// outcomeLoop is what the outcomes variant runs beside the worker: the
// endpoint, the dispatcher and the lag sampler, on the row's fixture and a
// fresh events topic.
type outcomeLoop struct {
	o           options
	eventsTopic string
	// workerEnv is added to the worker's environment.
	workerEnv []string
	endpoint  *webhookEndpoint
	server    *http.Server
	served    chan struct{} // closed when the server has returned
	disp      *proc
	dispPID   int
	pool      *pgxpool.Pool
	kafka     *kafka.Client // reads the events topic's end offsets

	mu  sync.Mutex
	lag lagTracker

	stopSampler context.CancelFunc
	samplerDone chan struct{}

	drained   bool
	drainedAt time.Time // when the endpoint had every event (drained), or when the wait gave up
	cleanups  benchenv.Cleanups
}

// startOutcomeLoop creates the run's events topic, serves the endpoint,
// starts the dispatcher on the fixture's schema and waits until its
// consumer group holds every partition of the events topic. The worker
// starts after it, with workerEnv. close undoes it.
func startOutcomeLoop(ctx context.Context, o options, f *fixture, run int, stderr io.Writer) (_ *outcomeLoop, err error) {
	l := &outcomeLoop{o: o, eventsTopic: f.Prefix + ".events", pool: f.Pool,
		kafka: &kafka.Client{Addr: kafka.TCP(o.brokers...), Timeout: 5 * time.Second}}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	dlqTopic := f.Prefix + ".webhooks.dlq"
	cluster := benchkafka.Cluster(o.brokers...)
	if err := topic.Ensure(ctx, cluster, topic.EventsSpec(l.eventsTopic)); err != nil {
		return nil, fmt.Errorf("events topic: %w", err)
	}
	if !o.keep {
		l.cleanups.Add(func() {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			// The dispatcher creates the dead-letter topic; a missing one is
			// not an error.
			if err := topic.Delete(c, benchkafka.Cluster(o.brokers...), l.eventsTopic, dlqTopic); err != nil {
				fmt.Fprintf(stderr, "bench: outcomes: delete topics: %v\n", err)
			}
		})
	}

	secret, err := newWebhookSecret()
	if err != nil {
		return nil, err
	}
	if l.endpoint, err = newWebhookEndpoint(secret, time.Now); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook endpoint: %w", err)
	}
	l.server = &http.Server{Handler: l.endpoint, ReadHeaderTimeout: 10 * time.Second}
	l.served = make(chan struct{})
	go func() {
		defer close(l.served)
		_ = l.server.Serve(ln) // ErrServerClosed after Shutdown
	}()
	l.cleanups.Add(func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := l.server.Shutdown(c); err != nil {
			_ = l.server.Close()
		}
		<-l.served
	})

	name := fmt.Sprintf("outcomes-run%d", run)
	file := filepath.Join(o.logDir, name+"-webhooks.yaml")
	if err := os.WriteFile(file, []byte(endpointsFile("http://"+ln.Addr().String()+"/hooks")), 0o600); err != nil {
		return nil, fmt.Errorf("endpoints file: %w", err)
	}
	httpAddr, err := benchenv.FreeAddr()
	if err != nil {
		return nil, err
	}
	keys, err := newReturnPathKey()
	if err != nil {
		return nil, err
	}
	group := f.Group + "-webhooks"
	env := []string{
		"POSTLINE_KAFKA_BROKERS=" + strings.Join(o.brokers, ","),
		"POSTLINE_DATABASE_URL=" + f.DatabaseURL,
		"POSTLINE_EVENTS_TOPIC=" + l.eventsTopic,
		"POSTLINE_WEBHOOKS_FILE=" + file,
		outcomesSecretEnv + "=" + secret,
		"POSTLINE_WEBHOOKS_GROUP=" + group,
		"POSTLINE_WEBHOOKS_DLQ_TOPIC=" + dlqTopic,
		"POSTLINE_WEBHOOKS_HTTP_ADDR=" + httpAddr,
	}
	l.workerEnv = []string{
		"POSTLINE_EVENTS_TOPIC=" + l.eventsTopic,
		"POSTLINE_BOUNCE_DOMAIN=" + outcomesBounceDomain,
		"POSTLINE_RETURN_PATH_KEYS=" + keys,
	}
	if l.disp, err = startProc(o.timeBin, o.logDir, name+"-dispatcher", []string{o.dispatcherBin}, env); err != nil {
		return nil, err
	}
	l.cleanups.Add(func() { _ = l.disp.Stop(5 * time.Second) }) // a no-op after finish
	fmt.Fprintf(stderr, "bench: outcomes: webhook-dispatcher started (log %s); waiting for readiness\n", l.disp.LogPath())
	if err := waitReady(ctx, l.disp, "http://"+httpAddr+"/readyz", o.brokers, group+"."+outcomesEndpointID,
		l.eventsTopic, topic.DefaultEventsPartitions); err != nil {
		return nil, fmt.Errorf("webhook-dispatcher: %w", err)
	}
	if l.dispPID, err = l.disp.Target(); err != nil {
		return nil, err
	}
	return l, nil
}

// endpointsFile is the dispatcher's endpoints file: one endpoint at url,
// every event type and tenant.
func endpointsFile(url string) string {
	return fmt.Sprintf("endpoints:\n  - id: %s\n    url: %s\n    secret_env: %s\n", outcomesEndpointID, url, outcomesSecretEnv)
}

// newWebhookSecret returns a fresh Standard Webhooks secret: "whsec_" and
// the base64 of 32 random bytes.
func newWebhookSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b[:]), nil
}

// newReturnPathKey returns a fresh POSTLINE_RETURN_PATH_KEYS value: one key
// of 48 hex digits.
func newReturnPathKey() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// cpu is the dispatcher's CPU time so far (the endpoint's is the harness's,
// counted as the injector's).
func (l *outcomeLoop) cpu() (time.Duration, error) {
	d, err := benchproc.CPU(l.dispPID)
	if err != nil {
		return 0, fmt.Errorf("webhook-dispatcher CPU: %w", err)
	}
	return d, nil
}

// begin starts sampling the webhook lag every lagSampleEvery; call it just
// before the jobs are published.
func (l *outcomeLoop) begin(ctx context.Context) {
	ctx, l.stopSampler = context.WithCancel(ctx)
	l.samplerDone = make(chan struct{})
	l.sample(ctx) // zero, unless the topic holds something already
	go func() {
		defer close(l.samplerDone)
		t := time.NewTicker(lagSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				l.sample(ctx)
			}
		}
	}()
}

// sample reads the events on the topic and those the endpoint received,
// in that order (a record read is never one the endpoint got after it was
// counted), and keeps the lag. A failed read is left out: the next sample
// comes a second later.
func (l *outcomeLoop) sample(ctx context.Context) (published, received int64, ok bool) {
	published, err := l.published(ctx)
	if err != nil {
		return 0, 0, false
	}
	received = l.endpoint.stats().Distinct
	l.mu.Lock()
	l.lag.observe(published, received)
	l.mu.Unlock()
	return published, received, true
}

// published is the number of records on the events topic: the sum of its
// partitions' end offsets (the topic is fresh and nothing is deleted). One
// ListOffsets request on the loop's client, whose connection stays open.
func (l *outcomeLoop) published(ctx context.Context) (int64, error) {
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := range topic.DefaultEventsPartitions {
		req.Topics[l.eventsTopic] = append(req.Topics[l.eventsTopic], kafka.LastOffsetOf(p))
	}
	resp, err := l.kafka.ListOffsets(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("end offsets of %s: %w", l.eventsTopic, err)
	}
	return sumEndOffsets(resp.Topics[l.eventsTopic], topic.DefaultEventsPartitions)
}

// sumEndOffsets adds up the end offsets of a topic's partitions, which
// must all have answered.
func sumEndOffsets(ps []kafka.PartitionOffsets, partitions int) (int64, error) {
	if len(ps) != partitions {
		return 0, fmt.Errorf("end offsets: %d of %d partitions answered", len(ps), partitions)
	}
	var n int64
	for _, p := range ps {
		if p.Error != nil {
			return 0, fmt.Errorf("end offset of partition %d: %w", p.Partition, p.Error)
		}
		n += p.LastOffset
	}
	return n, nil
}

// lastMail takes the sample of the moment the last mail was sent (the
// worker writes every event before the state it reports, so the topic
// holds them all by now), which the report shows as the lag at the end of
// the run.
func (l *outcomeLoop) lastMail(ctx context.Context) {
	for range 3 {
		if _, _, ok := l.sample(ctx); ok {
			break
		}
	}
	l.mu.Lock()
	l.lag.markEnd()
	l.mu.Unlock()
}

// drain waits until the endpoint has received every event on the topic, at
// most webhookDrainLimit, while the sampler goes on; then it stops the
// sampler. It watches the endpoint's count in memory and reads the topic
// again only when the count has reached the last reading. Not draining in
// time is a figure of the row, not an error; the dispatcher exiting is.
func (l *outcomeLoop) drain(ctx context.Context, stderr io.Writer) error {
	defer l.stopSampling()
	deadline := time.Now().Add(webhookDrainLimit)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	published := int64(-1) // not read yet
	for {
		if st := l.endpoint.stats(); published < 0 || st.Distinct >= published {
			n, err := l.published(ctx)
			if err == nil {
				published = n
				if st.Distinct >= published {
					l.drained, l.drainedAt = true, st.LastNew
					return nil
				}
			}
		}
		switch {
		case l.disp.Exited():
			return fmt.Errorf("webhook-dispatcher exited before the endpoint had every event:\n%s", l.disp.LogTail(20))
		case time.Now().After(deadline):
			st := l.endpoint.stats()
			fmt.Fprintf(stderr, "bench: outcomes: the endpoint had %d of %d events %s after the last mail; not waiting longer (see %s)\n",
				st.Distinct, published, webhookDrainLimit, l.disp.LogPath())
			l.drainedAt = time.Now()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (l *outcomeLoop) stopSampling() {
	if l.stopSampler != nil {
		l.stopSampler()
		<-l.samplerDone
		l.stopSampler = nil
	}
}

// finish stops the dispatcher and returns the row's webhook figures. Call
// it after drain and after the worker has stopped.
func (l *outcomeLoop) finish(ctx context.Context) (webhookStats, error) {
	l.stopSampling()
	if err := l.disp.Stop(30 * time.Second); err != nil {
		return webhookStats{}, err
	}
	u, err := l.disp.usage()
	if err != nil {
		return webhookStats{}, err
	}
	var lastSent time.Time
	if err := l.pool.QueryRow(ctx, `SELECT max(sent_at) FROM postline_messages WHERE status = 'sent'`).Scan(&lastSent); err != nil {
		return webhookStats{}, fmt.Errorf("last sent_at: %w", err)
	}
	published, err := l.published(ctx)
	if err != nil {
		return webhookStats{}, fmt.Errorf("events topic: %w", err)
	}
	st := l.endpoint.stats()
	l.mu.Lock()
	lag := l.lag
	l.mu.Unlock()
	return webhookStats{
		Measured: true, Events: published, Received: st.Distinct, Requests: st.Requests, Bad: st.Bad,
		MaxLag: lag.max, EndLag: lag.end, Samples: lag.samples,
		Drained: l.drained, Drain: max(0, l.drainedAt.Sub(lastSent)),
		DispatcherCPU: u.CPU(), DispatcherRSS: u.MaxRSSBytes,
	}, nil
}

// close stops whatever is still running and removes the run's topics,
// newest first; safe to call more than once.
func (l *outcomeLoop) close() {
	l.stopSampling()
	l.cleanups.Run()
}

// lagTracker keeps the webhook lag's samples: the largest, and the one
// taken when the last mail was sent.
type lagTracker struct {
	samples  int
	max, end int64
	last     int64
}

// lagOf is the webhook lag of one sample: events on the topic the
// endpoint has not received, never below zero (the endpoint is counted
// after the topic, so it may be ahead by what arrived in between).
func lagOf(published, received int64) int64 {
	return max(0, published-received)
}

// observe adds a sample.
func (t *lagTracker) observe(published, received int64) {
	t.last = lagOf(published, received)
	t.max = max(t.max, t.last)
	t.samples++
}

// markEnd takes the latest sample as the lag at the end of the run.
func (t *lagTracker) markEnd() { t.end = t.last }

// webhookEndpoint is the dispatcher's one endpoint: it verifies every
// request with the Standard Webhooks library, counts the distinct events
// (by webhook-id, which the signature covers) and answers 204; a request
// that does not verify gets 400, which the dispatcher retries.
type webhookEndpoint struct {
	verifier *standardwebhooks.Webhook
	nowFunc  func() time.Time

	mu       sync.Mutex
	seen     map[string]struct{}
	requests int64
	bad      int64
	lastNew  time.Time
}

// endpointStats are an endpoint's counts.
type endpointStats struct {
	// Distinct is the events received with a valid signature, each once.
	Distinct int64
	// Requests is every POST, copies and bad ones included.
	Requests int64
	// Bad is the requests whose signature did not verify.
	Bad int64
	// LastNew is when the latest new event arrived.
	LastNew time.Time
}

func newWebhookEndpoint(secret string, now func() time.Time) (*webhookEndpoint, error) {
	v, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, errors.New("webhook endpoint: the secret is not accepted by the Standard Webhooks library")
	}
	return &webhookEndpoint{verifier: v, nowFunc: now, seen: make(map[string]struct{})}, nil
}

// ServeHTTP implements http.Handler.
func (e *webhookEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody))
	if err == nil && r.Method != http.MethodPost {
		err = fmt.Errorf("method %s", r.Method)
	}
	if err == nil {
		err = e.verifier.Verify(body, r.Header)
	}
	id := r.Header.Get("webhook-id")
	e.mu.Lock()
	e.requests++
	if err != nil {
		e.bad++
	} else if _, ok := e.seen[id]; !ok {
		e.seen[id] = struct{}{}
		e.lastNew = e.nowFunc()
	}
	e.mu.Unlock()
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (e *webhookEndpoint) stats() endpointStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return endpointStats{Distinct: int64(len(e.seen)), Requests: e.requests, Bad: e.bad, LastNew: e.lastNew}
}
