package delivery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/job"
)

// TestPipelineChainsJobsOnAConnection runs jobs through one sending
// goroutine and one connection (MaxConns 1) to a real SMTP server over TCP
// that advertises PIPELINING, with the real sender: each job's envelope
// goes out behind the message before it. Around the chained jobs the
// server refuses a message at its final dot (554: failed), hangs up at one
// (421: retried on a new connection, the job chained behind it with it),
// fails one for a moment (451 4.3.0: a resend, which gives up the chain
// rather than wait for the connection it holds), refuses a recipient, and
// one job has expired. Every job ends in its one fate and the server
// takes every message it accepted exactly once.
func TestPipelineChainsJobsOnAConnection(t *testing.T) {
	srv := smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		switch {
		case c.Verb == smtptest.VerbData && c.Arg == "spam@x":
			return &smtptest.Reply{Code: 554, Enhanced: "5.7.1", Text: "looks like spam"}
		case c.Verb == smtptest.VerbData && c.Arg == "hangup@x" && c.Attempt == 1:
			return &smtptest.Reply{Code: 421, Enhanced: "4.3.2", Text: "shutting down", Disconnect: true}
		case c.Verb == smtptest.VerbData && c.Arg == "blip@x" && c.Attempt == 1:
			return &smtptest.Reply{Code: 451, Enhanced: "4.3.0", Text: "local error in processing"}
		case c.Verb == smtptest.VerbRcpt && c.Arg == "nobody@example.com":
			return &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "no such user"}
		}
		return nil
	}))
	reg := prometheus.NewRegistry()
	relay, err := sender.New(sender.Config{Name: "p1", Host: srv.Host(), Port: srv.Port()}, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	store, dlq := newFakeStore(), newFakeDLQ()
	p, err := New(Config{Senders: 1, BatchSize: 8, BatchLinger: time.Millisecond, ResendBase: time.Millisecond},
		slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), Deps{
			Store:       store,
			Relays:      []Relay{{Name: "p1", MaxConns: 1, NewSession: func() Session { return relay.NewSession() }}},
			DeadLetters: dlq,
			Retries:     newFakeRetries(),
		})
	if err != nil {
		t.Fatal(err)
	}

	want := map[string]idempotency.Status{}
	var records [][]byte
	add := func(j job.Job, status idempotency.Status) {
		records = append(records, mustJSON(t, j))
		want[j.MessageID] = status
	}
	for i := range 60 {
		add(testJob(fmt.Sprintf("m%d@x", i), "hello"), idempotency.StatusSent)
		switch i {
		case 10:
			add(testJob("spam@x", "buy now"), idempotency.StatusFailed)
		case 20:
			add(testJob("hangup@x", "hello"), idempotency.StatusSent)
		case 30:
			add(testJob("blip@x", "hello"), idempotency.StatusSent)
		case 40:
			nobody := testJob("nobody@x", "hello")
			nobody.To = []string{"nobody@example.com"}
			add(nobody, idempotency.StatusFailed)
		case 50:
			add(expired(testJob("late@x", "hello")), idempotency.StatusDead)
		}
	}
	src := newFakeSource(records, true)
	src.store = store
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := p.Run(ctx, src); err != nil {
		t.Fatalf("Run: %v", err)
	}

	if got := src.doneCount(); got != len(records) {
		t.Fatalf("records done = %d, want %d", got, len(records))
	}
	for id, w := range want {
		if got := store.status(id); got != w {
			t.Errorf("status of %s = %q, want %q", id, got, w)
		}
	}
	taken := map[string]int{}
	for _, m := range srv.Messages() {
		taken[m.MessageID]++
	}
	for id, w := range want {
		if n := taken[id]; (w == idempotency.StatusSent && n != 1) || (w != idempotency.StatusSent && n != 0) {
			t.Errorf("the server took %s %d times; its status is %s", id, n, w)
		}
	}
	if got, want := sortedReasons(dlq), []string{string(job.ReasonExpired), deadletter.ReasonSMTPPermanent, deadletter.ReasonSMTPPermanent}; got != fmt.Sprint(want) {
		t.Errorf("dead letters %s, want %v", got, want)
	}
	chained := counterValue(t, reg, "postline_sender_chained_envelopes_total", map[string]string{"provider": "p1"})
	if chained < 10 {
		t.Errorf("%v envelopes went out behind a message, want most of the %d jobs' (claims keep the queue full)", chained, len(records))
	}
	// One connection, a second after the hang-up, a third after the blip
	// gave up its chain: a chain never opened one of its own.
	if n := srv.Connections(); n > 3 {
		t.Errorf("%d connections, want at most 3", n)
	}
}

// sortedReasons is the dead-letter reasons in order, printed.
func sortedReasons(d *fakeDLQ) string { return fmt.Sprint(sorted(d.reasons())) }

// TestAdmitNext: a session in use takes one more send straight away only
// as a fresh acquire would get one, and not past a sender waiting for the
// relay's sessions.
func TestAdmitNext(t *testing.T) {
	now := time.Unix(1000, 0)
	nowFunc := func() time.Time { return now }
	tests := []struct {
		name    string
		control *adaptive.SendControl
		inUse   int
		waiting int
		want    bool
	}{
		{name: "no send control", inUse: 2, want: true},
		{name: "a sender waits", inUse: 2, waiting: 1, want: false},
		{name: "within the concurrency limit", control: sendControl(t, 2, 0), inUse: 2, want: true},
		{name: "past a cut concurrency limit", control: sendControl(t, 1, 0), inUse: 2, want: false},
		{name: "rate token free", control: sendControl(t, 4, 1), inUse: 1, want: true},
		{name: "rate token spent", control: spent(sendControl(t, 4, 1), now), inUse: 1, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rp := newRelayPool(Relay{Name: "p1"}, 4, tt.control, nowFunc)
			rp.inUse, rp.waiting = tt.inUse, tt.waiting
			if got := rp.admitNext(); got != tt.want {
				t.Errorf("admitNext = %v, want %v", got, tt.want)
			}
		})
	}
}

// spent takes c's rate token at now.
func spent(c *adaptive.SendControl, now time.Time) *adaptive.SendControl {
	c.Admit(now, 0)
	return c
}

// sendControl is a send control whose concurrency limit is limit, with a
// fleet-wide rate of rate sends a second when rate is not 0.
func sendControl(t *testing.T, limit int, rate float64) *adaptive.SendControl {
	t.Helper()
	c, err := adaptive.NewSendControl(adaptive.SendControlConfig{
		AIMD:      adaptive.AIMDConfig{Min: 1, Max: limit, Initial: limit},
		FleetRate: rate,
	}, nil, time.Unix(1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHardStopDropsAChain: a hard stop while a send has a job chained
// behind it leaves both records unfinished (they are redelivered) and
// hangs up the session that has the chained envelope on the wire, rather
// than return it to its relay for another job.
func TestHardStopDropsAChain(t *testing.T) {
	fake := &chainingFake{started: make(chan struct{})}
	p, err := New(Config{Senders: 1, BatchSize: 2, BatchLinger: time.Millisecond},
		slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), Deps{
			Store:       newFakeStore(),
			Relays:      []Relay{{Name: "p1", NewSession: func() Session { return fake }}},
			DeadLetters: newFakeDLQ(),
			Retries:     newFakeRetries(),
		})
	if err != nil {
		t.Fatal(err)
	}
	src := newFakeSource([][]byte{mustJSON(t, testJob("a@x", "hi")), mustJSON(t, testJob("b@x", "hi"))}, false)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx, src) }()
	select {
	case <-fake.started:
	case <-time.After(5 * time.Second):
		t.Fatal("no send chained a job")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run after a hard stop = %v, want nil", err)
	}
	if got := src.doneCount(); got != 0 {
		t.Errorf("records done after a hard stop = %d, want 0", got)
	}
	if got := fake.closes(); got != 1 {
		t.Errorf("session closed %d times, want once (hung up on the chain)", got)
	}
}

// chainingFake is a ChainingSession whose SendToThen chains the next job
// as soon as one waits, then blocks until its context ends.
type chainingFake struct {
	started chan struct{}
	mu      sync.Mutex
	closed  int
}

func (f *chainingFake) SendTo(_ context.Context, _ *job.Job, rcpts []sender.Recipient) (sender.Result, error) {
	return acceptAll(rcpts), nil
}

func (f *chainingFake) SendToThen(ctx context.Context, _ *job.Job, _ []sender.Recipient, then sender.Then) (sender.Result, bool, error) {
	for { // the claimer may not have queued the second job yet
		if _, _, ok := then(); ok {
			break
		}
		select {
		case <-ctx.Done():
			return sender.Result{}, false, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	close(f.started)
	<-ctx.Done()
	return sender.Result{}, true, ctx.Err()
}

func (f *chainingFake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed++
	return nil
}

func (f *chainingFake) closes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}
