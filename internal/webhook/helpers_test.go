package webhook

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.uber.org/goleak"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit/writertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSource hands out the messages a test sends and records MarkDone.
type fakeSource struct {
	ch chan consumer.Message

	mu   sync.Mutex
	done map[int64]int // offset -> MarkDone calls
}

func newFakeSource() *fakeSource {
	return &fakeSource{ch: make(chan consumer.Message), done: make(map[int64]int)}
}

func (f *fakeSource) Run(ctx context.Context) error {
	<-ctx.Done()
	close(f.ch)
	return nil
}

func (f *fakeSource) Messages() <-chan consumer.Message { return f.ch }
func (f *fakeSource) Joined() bool                      { return true }

func (f *fakeSource) MarkDone(m consumer.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done[m.Offset]++
}

func (f *fakeSource) doneCount(offset int64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done[offset]
}

// fakeDLQ is the dead-letter writer's stand-in, which passes the writers'
// suite (writertest).
type fakeDLQ struct {
	*writertest.Recorder[deadletter.Letter]
}

func (f *fakeDLQ) all() []deadletter.Letter { return f.All() }

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// newQueue returns a Queue on a schema of its own in the test database.
func newQueue(t testing.TB) (*Queue, *pgxpool.Pool) {
	t.Helper()
	testenv.Integration(t, "PostgreSQL")
	_, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return NewQueue(pool), pool
}

// harness runs a dispatcher over one fakeSource per endpoint (each lane
// reads the topic on its own) and a real Queue.
type harness struct {
	t     testing.TB
	d     *Dispatcher
	srcs  map[string]*fakeSource
	queue *Queue
	pool  *pgxpool.Pool
	dlq   *fakeDLQ
	reg   *prometheus.Registry
	logs  *syncBuffer

	cancel context.CancelFunc
	exited chan error
	next   int64 // offset of the next message sent
}

func startHarness(t testing.TB, cfg Config) *harness {
	t.Helper()
	q, pool := newQueue(t)
	return startHarnessOn(t, cfg, q, pool)
}

// startHarnessOn starts a harness over q, a queue another harness may
// have used.
func startHarnessOn(t testing.TB, cfg Config, q *Queue, pool *pgxpool.Pool) *harness {
	t.Helper()
	tr, _ := cfg.Transport.(*http.Transport)
	if tr == nil {
		// As the dispatcher's own default, with the system's roots only.
		tr = defaultTransport(cmp.Or(cfg.Concurrency, DefaultConcurrency))
	}
	h := &harness{t: t, srcs: map[string]*fakeSource{}, queue: q, pool: pool, dlq: &fakeDLQ{writertest.DeadLetters()},
		reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
	if cfg.DeadLetters == nil {
		cfg.DeadLetters = h.dlq
	}
	cfg.Kafka = testCluster(t)
	cfg.Queue = q
	if len(cfg.Schedule.Delays) == 0 {
		cfg.Schedule.Delays = []time.Duration{10 * time.Millisecond}
	}
	cfg.PollInterval = cmpDur(cfg.PollInterval, 5*time.Millisecond)
	cfg.StateInterval = cmpDur(cfg.StateInterval, 20*time.Millisecond)
	cfg.Transport = tr
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(io.MultiWriter(h.logs, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug}))
	var sources []source
	for _, ep := range cfg.Endpoints {
		src := newFakeSource()
		h.srcs[ep.ID] = src
		sources = append(sources, src)
	}
	d, err := newDispatcher(cfg, logger, h.reg, q, sources)
	if err != nil {
		t.Fatal(err)
	}
	h.d = d
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.exited = make(chan error, 1)
	go func() { h.exited <- d.Run(ctx) }()
	t.Cleanup(func() {
		h.stop()
		tr.CloseIdleConnections()
	})
	return h
}

func cmpDur(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// stop cancels Run and waits for it.
func (h *harness) stop() {
	h.t.Helper()
	h.cancel()
	select {
	case err := <-h.exited:
		if err != nil {
			h.t.Errorf("Run = %v", err)
		}
		h.exited <- err // later calls return at once
	case <-time.After(10 * time.Second):
		h.t.Fatal("Run did not return within 10s of cancel")
	}
}

// msg returns the record the next send hands out.
func (h *harness) msg(v []byte) consumer.Message {
	return consumer.Message{Topic: "events", Partition: 0, Offset: h.next, Key: []byte("k"), Value: v,
		Headers: []kafka.Header{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}}}
}

// send hands a record with value v to every lane, as each endpoint's
// consumer reads it from the topic, and returns its offset.
func (h *harness) send(v []byte) int64 {
	h.t.Helper()
	m := h.msg(v)
	h.next++
	for id, src := range h.srcs {
		select {
		case src.ch <- m:
		case <-time.After(10 * time.Second):
			h.t.Fatalf("endpoint %s did not take record %d within 10s", id, m.Offset)
		}
	}
	return m.Offset
}

// done returns how often endpoint's lane marked the record at off done.
func (h *harness) done(endpoint string, off int64) int { return h.srcs[endpoint].doneCount(off) }

// gauge returns the value of the gauge name of the harness's only
// endpoint.
func (h *harness) gauge(name string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	h.t.Fatalf("no metric %s", name)
	return 0
}

// rows returns the queue's rows of endpoint by status.
func (h *harness) rows(endpoint, status string) int {
	h.t.Helper()
	var n int
	if err := h.pool.QueryRow(h.t.Context(), `SELECT count(*) FROM postline_webhook_queue WHERE endpoint = $1 AND status = $2`,
		endpoint, status).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// newEvent returns an event of type typ for tenant, recipient i of mail mid.
func newEvent(mid string, i int, typ event.Type, tenant string) event.Event {
	e := event.Event{
		Schema: event.Schema, ID: event.NewID(mid, i, typ, 1), Type: typ, At: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC),
		MessageID: mid, Tenant: tenant, Stream: event.StreamTransactional, Recipient: fmt.Sprintf("r%d@example.com", i),
		RecipientIndex: i, Attempt: 1,
	}
	if typ == event.Bounced {
		e.Bounce = &event.Bounce{Type: event.BounceHard, Source: "dsn", Status: "5.1.1"}
	}
	return e
}

func mustEncode(t testing.TB, e event.Event) []byte {
	t.Helper()
	b, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// receiver is an endpoint that checks every request (method, content
// type, Standard Webhooks signature by the library) and answers with
// respond's status.
type receiver struct {
	srv     *httptest.Server
	secret  string
	respond func(r *http.Request, id string, attempt int) int

	mu       sync.Mutex
	attempts map[string]int    // webhook-id -> requests
	got      map[string]int    // webhook-id -> 2xx answers
	bodies   map[string][]byte // webhook-id -> last body
	problems []string
}

func newReceiver(t testing.TB, respond func(r *http.Request, id string, attempt int) int) *receiver {
	t.Helper()
	rc := &receiver{
		secret: testSecret, respond: respond,
		attempts: map[string]int{}, got: map[string]int{}, bodies: map[string][]byte{},
	}
	wh, err := standardwebhooks.NewWebhook(rc.secret)
	if err != nil {
		t.Fatal(err)
	}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		id := r.Header.Get(HeaderID)
		rc.mu.Lock()
		switch {
		case err != nil:
			rc.problems = append(rc.problems, "read body: "+err.Error())
		case r.Method != http.MethodPost:
			rc.problems = append(rc.problems, "method "+r.Method)
		case r.Header.Get("Content-Type") != "application/json":
			rc.problems = append(rc.problems, "content type "+r.Header.Get("Content-Type"))
		}
		if err := wh.Verify(body, r.Header); err != nil {
			rc.problems = append(rc.problems, id+": signature: "+err.Error())
		}
		rc.attempts[id]++
		n := rc.attempts[id]
		rc.bodies[id] = body
		rc.mu.Unlock()
		status := http.StatusNoContent
		if rc.respond != nil {
			status = rc.respond(r, id, n)
		}
		if status >= 200 && status < 300 {
			rc.mu.Lock()
			rc.got[id]++
			rc.mu.Unlock()
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) endpoint(t testing.TB, id string) Endpoint {
	return Endpoint{ID: id, URL: mustURL(t, rc.srv.URL+"/hook?token=t0k3n"), SecretEnv: "SECRET_" + id, Secret: Secret(rc.secret)}
}

func (rc *receiver) delivered(id string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.got[id]
}

func (rc *receiver) tries(id string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.attempts[id]
}

func (rc *receiver) total() (attempts, delivered int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, n := range rc.attempts {
		attempts += n
	}
	for _, n := range rc.got {
		delivered += n
	}
	return attempts, delivered
}

func (rc *receiver) check(t *testing.T) {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, p := range rc.problems {
		t.Errorf("receiver: %s", p)
	}
}
