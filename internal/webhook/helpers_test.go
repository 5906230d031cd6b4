package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.uber.org/goleak"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
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

// fakeDLQ records dead letters; the first failures writes fail.
type fakeDLQ struct {
	mu       sync.Mutex
	letters  []deadletter.Letter
	failures int
}

func (f *fakeDLQ) Publish(_ context.Context, ls ...deadletter.Letter) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failures > 0 {
		f.failures--
		return errors.New("broker unavailable")
	}
	f.letters = append(f.letters, ls...)
	return nil
}

func (f *fakeDLQ) all() []deadletter.Letter {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]deadletter.Letter(nil), f.letters...)
}

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

// harness runs a dispatcher over a fakeSource.
type harness struct {
	t    *testing.T
	d    *Dispatcher
	src  *fakeSource
	dlq  *fakeDLQ
	reg  *prometheus.Registry
	logs *syncBuffer

	cancel context.CancelFunc
	exited chan error
	next   int64 // offset of the next message sent
}

func startHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	return startHarnessWithTransport(t, cfg, &http.Transport{})
}

// startHarnessWithTransport starts a harness whose requests go through tr.
func startHarnessWithTransport(t *testing.T, cfg Config, tr *http.Transport) *harness {
	t.Helper()
	h := &harness{t: t, src: newFakeSource(), dlq: &fakeDLQ{}, reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
	if cfg.DeadLetters == nil {
		cfg.DeadLetters = h.dlq
	}
	cfg.Kafka = testCluster(t)
	cfg.RetryBase = cmpDur(cfg.RetryBase, time.Millisecond)
	cfg.RetryMaxDelay = cmpDur(cfg.RetryMaxDelay, 20*time.Millisecond)
	cfg.Transport = tr
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(io.MultiWriter(h.logs, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug}))
	d, err := newDispatcher(cfg, logger, h.reg, h.src)
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

// send hands out a record with value v and returns its offset.
func (h *harness) send(v []byte) int64 {
	h.t.Helper()
	m := h.msg(v)
	h.next++
	off := m.Offset
	select {
	case h.src.ch <- m:
	case <-time.After(10 * time.Second):
		h.t.Fatalf("the dispatcher did not take record %d within 10s", off)
	}
	return off
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
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

func newReceiver(t *testing.T, respond func(r *http.Request, id string, attempt int) int) *receiver {
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

func (rc *receiver) endpoint(t *testing.T, id string) Endpoint {
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

// header returns the value of header key of l, and whether it is there.
func header(hs []kafka.Header, key string) (string, bool) {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}
