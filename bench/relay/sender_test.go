package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/postline/postline/bench/relay"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/job"
)

// newSender returns a sender.Relay for r (no TLS on loopback).
func newSender(t testing.TB, r *relay.Relay) *sender.Relay {
	t.Helper()
	s, err := sender.New(sender.Config{Name: "bench", Host: r.Host(), Port: r.Port(), SendTimeout: 5 * time.Second}, nil, nil)
	if err != nil {
		t.Fatalf("sender.New: %v", err)
	}
	return s
}

func mailJob(i int) *job.Job {
	return &job.Job{
		Version:   job.SchemaVersion,
		MessageID: fmt.Sprintf("relay-%d@test.postline", i),
		From:      "sender@example.com",
		To:        []string{rcpt(i)},
		Subject:   "relay",
		Text:      "hello",
	}
}

// TestSenderClassification drives each fault through the project's own
// sender and checks what failure.Classify makes of the error.
func TestSenderClassification(t *testing.T) {
	tests := []struct {
		name  string
		cfg   relay.Config
		hold  bool // keep a first session's connection open while sending
		class failure.Class
		code  int
		enh   string
		hint  time.Duration
	}{
		{"empty bucket", relay.Config{Rate: 1.0 / 3, Burst: 1}, false, failure.Throttled, 450, "4.7.1", 3 * time.Second},
		{"empty bucket at DATA", relay.Config{Rate: 0.5, Burst: 1, ThrottleAt: relay.AtData}, false, failure.Throttled, 450, "4.7.1", 2 * time.Second},
		{"dropped transaction", relay.Config{TransientDrop: 1}, false, failure.Transient, 421, "4.4.2", 0},
		{"unknown recipient", relay.Config{PermanentReject: 1}, false, failure.Permanent, 550, "5.1.1", 0},
		{"too many connections", relay.Config{MaxConns: 1}, true, failure.Throttled, 421, "4.7.0", 0},
		{"hung up", relay.Config{HangUpAbove: 1}, true, failure.Throttled, 421, "4.7.0", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := start(t, tt.cfg)
			s := newSender(t, r)
			first, second := s.NewSession(), s.NewSession()
			defer func() { _ = first.Close() }()
			defer func() { _ = second.Close() }()

			ctx := context.Background()
			var err error
			switch {
			case tt.hold:
				// The first session delivers and keeps its connection.
				if err := first.Send(ctx, mailJob(1)); err != nil {
					t.Fatalf("first send: %v", err)
				}
				err = second.Send(ctx, mailJob(2))
			case tt.cfg.Rate > 0:
				if err := first.Send(ctx, mailJob(1)); err != nil {
					t.Fatalf("first send: %v", err)
				}
				err = first.Send(ctx, mailJob(2))
			default:
				err = first.Send(ctx, mailJob(1))
			}
			if err == nil {
				t.Fatal("send succeeded, want a failure")
			}
			v := failure.Classify(err)
			if v.Class != tt.class || v.Code != tt.code || v.Enhanced != tt.enh || v.RetryAfter != tt.hint {
				t.Errorf("Classify(%v) = %s %d %q retry %s (rule %s), want %s %d %q retry %s",
					err, v.Class, v.Code, v.Enhanced, v.RetryAfter, v.Rule, tt.class, tt.code, tt.enh, tt.hint)
			}
		})
	}
}

// TestSenderUnderLoad sends a burst from eight sender sessions (one per
// goroutine, as the worker does) through a relay with every fault on, and
// checks that each error classifies as the fault that caused it and that the
// client's tally matches the relay's.
func TestSenderUnderLoad(t *testing.T) {
	const (
		workers = 8
		jobs    = 400
	)
	cfg := relay.Config{Rate: 300, Burst: 30, TransientDrop: 0.03, PermanentReject: 0.05, Seed: 3}
	r := start(t, cfg)
	s := newSender(t, r)

	var (
		mu      sync.Mutex
		classes = map[failure.Class]int{}
		sent    int
		rejects int
	)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			sess := s.NewSession()
			defer func() { _ = sess.Close() }()
			for i := range next {
				err := sess.Send(context.Background(), mailJob(i))
				mu.Lock()
				if cfg.Rejects(rcpt(i)) {
					rejects++
				}
				if err == nil {
					sent++
					mu.Unlock()
					continue
				}
				v := failure.Classify(err)
				classes[v.Class]++
				mu.Unlock()
				switch {
				case v.Class == failure.Throttled && v.Code == 450 && v.RetryAfter >= time.Second:
				case v.Class == failure.Transient && v.Code == 421 && v.Enhanced == "4.4.2":
				case v.Class == failure.Permanent && v.Code == 550 && cfg.Rejects(rcpt(i)):
				default:
					t.Errorf("job %d: %v classified %+v", i, err, v)
				}
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()

	st := r.Stats()
	if st.Accepted != int64(sent) || st.Throttled != int64(classes[failure.Throttled]) ||
		st.TransientDrops != int64(classes[failure.Transient]) || st.PermanentRejects != int64(classes[failure.Permanent]) ||
		st.Attempts() != jobs {
		t.Errorf("relay Stats %+v, client sent %d and classified %v", st, sent, classes)
	}
	if classes[failure.Permanent] != rejects {
		t.Errorf("permanent failures %d, want %d (the addresses Rejects names)", classes[failure.Permanent], rejects)
	}
	if classes[failure.Throttled] == 0 || sent == 0 {
		t.Errorf("sent %d, classes %v: want some throttling and some deliveries", sent, classes)
	}
	if st.PeakOpen > workers {
		t.Errorf("PeakOpen %d > %d sessions", st.PeakOpen, workers)
	}
	t.Logf("sent %d, failures by class %v, peak connections %d", sent, classes, st.PeakOpen)
}

// TestSenderPostfixScenario runs Postfix's scenario with the real sender:
// 20 sessions against a relay that hangs up above 5 open connections. Each
// job is retried at once until delivered; every one must get through, and
// the hang-ups must show in the counters.
func TestSenderPostfixScenario(t *testing.T) {
	const (
		sessions = 20
		perJob   = 10
		limit    = 5
	)
	r := start(t, relay.Config{HangUpAbove: limit})
	s := newSender(t, r)
	var (
		mu       sync.Mutex
		failures int
	)
	var wg sync.WaitGroup
	for w := range sessions {
		wg.Go(func() {
			sess := s.NewSession()
			defer func() { _ = sess.Close() }()
			for i := range perJob {
				j := mailJob(w*perJob + i)
				for attempt := 1; ; attempt++ {
					err := sess.Send(context.Background(), j)
					if err == nil {
						break
					}
					if v := failure.Classify(err); v.Class != failure.Throttled || v.Code != 421 || attempt > 1000 {
						t.Errorf("job %s attempt %d: %v classified %s", j.MessageID, attempt, err, v.Class)
						return
					}
					mu.Lock()
					failures++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	st := r.Stats()
	if st.Accepted != sessions*perJob || st.HungUp == 0 || st.HungUp < int64(failures) || st.PeakOpen <= limit {
		t.Errorf("Stats accepted %d hung up %d peak %d, client failures %d: want %d accepted, hang-ups, peak above %d",
			st.Accepted, st.HungUp, st.PeakOpen, failures, sessions*perJob, limit)
	}
	t.Logf("delivered %d; %d hang-ups (%d seen by the client), %.1f %% deferred, peak %d connections",
		st.Accepted, st.HungUp, failures, 100*float64(st.Deferred())/float64(st.Attempts()), st.PeakOpen)
}
