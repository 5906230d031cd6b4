package outcome

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/idempotency"
)

// pastRow is an accepted recipient of mail whose window ended an hour
// before testNow.
func pastRow(id string, idx int, state idempotency.RecipientState) idempotency.Recipient {
	r := row(id, idx, fmt.Sprintf("r%d@example.com", idx), state, event.StreamBulk)
	r.ConfirmBy = testNow.Add(-time.Hour)
	r.Attempt = 2
	return r
}

func newSweepHarness(t *testing.T, cfg SweepConfig, rows ...idempotency.Recipient) (*Sweeper, *fakeStore, *fakeEvents) {
	t.Helper()
	store := newFakeStore(func() time.Time { return testNow }, rows...)
	events := &fakeEvents{t: t}
	if cfg.NowFunc == nil {
		cfg.NowFunc = func() time.Time { return testNow }
	}
	s, err := NewSweeper(cfg, discard(), prometheus.NewRegistry(), store, events)
	if err != nil {
		t.Fatalf("NewSweeper: %v", err)
	}
	return s, store, events
}

func TestSweep(t *testing.T) {
	const late, lone, early, settled = "late@postline.test", "lone@postline.test", "early@postline.test", "settled@postline.test"
	rows := []idempotency.Recipient{
		pastRow(late, 0, idempotency.RecipientAccepted),
		pastRow(late, 1, idempotency.RecipientBounced), // resolved: no event
		pastRow(late, 2, idempotency.RecipientAccepted),
		pastRow(lone, 0, idempotency.RecipientAccepted),
		row(early, 0, "e@example.com", idempotency.RecipientAccepted, event.StreamTransactional), // window still open
	}
	done := pastRow(settled, 0, idempotency.RecipientDelivered)
	done.Confirmation = "confirmed"
	rows = append(rows, done)
	s, store, events := newSweepHarness(t, SweepConfig{}, rows...)

	n, err := s.Sweep(t.Context())
	if err != nil || n != 3 {
		t.Fatalf("Sweep = %d, %v; want 3 recipients", n, err)
	}
	want := map[string]idempotency.Recipient{}
	for _, r := range []idempotency.Recipient{rows[0], rows[2], rows[3]} {
		want[event.NewID(r.MessageID, r.Index, event.Unconfirmed, 0)] = r
	}
	evs := events.published()
	if len(evs) != len(want) {
		t.Fatalf("published %d events, want %d: %+v", len(evs), len(want), evs)
	}
	for _, e := range evs {
		r, ok := want[e.ID]
		if !ok {
			t.Errorf("unexpected event %+v", e)
			continue
		}
		delete(want, e.ID)
		if e.Type != event.Unconfirmed || e.MessageID != r.MessageID || e.RecipientIndex != r.Index || e.Recipient != r.Address ||
			e.Stream != event.StreamBulk || e.Tenant != "acme" || e.Attempt != 2 || e.Provider != "primary" ||
			e.Metadata["order"] != "42" || !e.At.Equal(testNow) {
			t.Errorf("event = %+v, want one of recipient %d of %s", e, r.Index, r.MessageID)
		}
	}
	for _, c := range []struct{ id, want string }{{late, "unconfirmed"}, {lone, "unconfirmed"}, {early, ""}, {settled, "confirmed"}} {
		if got := store.row(c.id, 0).Confirmation; got != c.want {
			t.Errorf("%s confirmation = %q, want %q", c.id, got, c.want)
		}
	}
	if got := testutil.ToFloat64(s.marked); got != 2 {
		t.Errorf("unconfirmed_total = %v, want 2", got)
	}

	// A second pass finds nothing and publishes nothing.
	calls := events.calls
	if n, err := s.Sweep(t.Context()); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v; want 0", n, err)
	}
	if events.calls != calls || len(events.published()) != 3 {
		t.Errorf("the second pass published: %d calls, %d events", events.calls-calls, len(events.published()))
	}
}

// TestSweepBatches checks that small batches give every still accepted
// recipient exactly one event and mark every mail, whether a batch cuts
// a mail in two or is smaller than one mail's recipients.
func TestSweepBatches(t *testing.T) {
	for _, batch := range []int{1, 2, 3, 4, 5, 100} {
		t.Run(fmt.Sprint("batch ", batch), func(t *testing.T) {
			var rows []idempotency.Recipient
			for m, n := range []int{2, 3, 1, 4} {
				for i := range n {
					rows = append(rows, pastRow(fmt.Sprintf("m%d@postline.test", m), i, idempotency.RecipientAccepted))
				}
			}
			s, store, events := newSweepHarness(t, SweepConfig{Batch: batch}, rows...)
			passes := 0
			for {
				passes++
				if passes > len(rows)+2 {
					t.Fatalf("still sweeping after %d passes", passes)
				}
				n, err := s.Sweep(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if n < batch {
					break
				}
			}
			ids := map[string]int{}
			for _, e := range events.published() {
				ids[e.ID]++
			}
			for _, r := range rows {
				if c := ids[event.NewID(r.MessageID, r.Index, event.Unconfirmed, 0)]; c != 1 {
					t.Errorf("recipient %d of %s had %d unconfirmed events, want 1", r.Index, r.MessageID, c)
				}
				if got := store.row(r.MessageID, r.Index).Confirmation; got != "unconfirmed" {
					t.Errorf("%s confirmation = %q, want unconfirmed", r.MessageID, got)
				}
			}
			if got := testutil.ToFloat64(s.marked); got != 4 {
				t.Errorf("unconfirmed_total = %v, want 4", got)
			}
		})
	}
}

func TestSweepFailures(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name      string
		set       func(s *fakeStore, e *fakeEvents)
		wantMarks int
	}{
		{"listing fails", func(s *fakeStore, _ *fakeEvents) { s.dueErr = boom }, 0},
		{"publish fails", func(_ *fakeStore, e *fakeEvents) { e.err = boom }, 0},
		{"marking fails", func(s *fakeStore, _ *fakeEvents) { s.markErr = boom }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, store, events := newSweepHarness(t, SweepConfig{}, pastRow("late@postline.test", 0, idempotency.RecipientAccepted))
			tt.set(store, events)
			if _, err := s.Sweep(t.Context()); !errors.Is(err, boom) {
				t.Fatalf("Sweep = %v, want it to wrap %v", err, boom)
			}
			if store.markCalls != tt.wantMarks {
				t.Errorf("MarkUnconfirmed called %d times, want %d", store.markCalls, tt.wantMarks)
			}
			if got := store.row("late@postline.test", 0).Confirmation; got != "" {
				t.Errorf("confirmation = %q after a failed pass, want none", got)
			}
			// The next pass, once the failure passed, does the work.
			store.mu.Lock()
			store.dueErr, store.markErr = nil, nil
			store.mu.Unlock()
			events.mu.Lock()
			events.err = nil
			events.mu.Unlock()
			if n, err := s.Sweep(t.Context()); err != nil || n != 1 {
				t.Fatalf("retry = %d, %v", n, err)
			}
			if got := store.row("late@postline.test", 0).Confirmation; got != "unconfirmed" {
				t.Errorf("confirmation = %q, want unconfirmed", got)
			}
		})
	}
}

func TestNewSweeperValidates(t *testing.T) {
	store, events := newFakeStore(time.Now), &fakeEvents{t: t}
	tests := []struct {
		name   string
		cfg    SweepConfig
		store  SweepStore
		events Events
	}{
		{"negative interval", SweepConfig{Interval: -time.Second}, store, events},
		{"negative batch", SweepConfig{Batch: -1}, store, events},
		{"no store", SweepConfig{}, nil, events},
		{"no events", SweepConfig{}, store, nil},
	}
	for _, tt := range tests {
		if _, err := NewSweeper(tt.cfg, discard(), prometheus.NewRegistry(), tt.store, tt.events); err == nil {
			t.Errorf("%s: NewSweeper succeeded", tt.name)
		}
	}
	s, err := NewSweeper(SweepConfig{}, discard(), prometheus.NewRegistry(), store, events)
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.Interval != DefaultSweepInterval || s.cfg.Batch != DefaultSweepBatch || s.cfg.NowFunc == nil {
		t.Errorf("defaults = %+v", s.cfg)
	}
}

// waitFor polls cond until it holds or the test's time is up.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSweeperRun checks that Run sweeps at once, keeps going while
// passes are full, survives a failing pass, and returns when its context
// ends.
func TestSweeperRun(t *testing.T) {
	t.Run("full passes follow at once", func(t *testing.T) {
		var rows []idempotency.Recipient
		for m := range 5 {
			rows = append(rows, pastRow(fmt.Sprintf("m%d@postline.test", m), 0, idempotency.RecipientAccepted))
		}
		// An interval longer than the test: only the passes that follow a
		// full one can mark all five mails.
		s, store, _ := newSweepHarness(t, SweepConfig{Batch: 2, Interval: time.Hour}, rows...)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		waitFor(t, "all five mails marked", func() bool {
			for _, r := range rows {
				if store.row(r.MessageID, 0).Confirmation != "unconfirmed" {
					return false
				}
			}
			return true
		})
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
	t.Run("a failed pass is tried again at the next tick", func(t *testing.T) {
		s, store, _ := newSweepHarness(t, SweepConfig{Interval: 5 * time.Millisecond},
			pastRow("late@postline.test", 0, idempotency.RecipientAccepted))
		store.mu.Lock()
		store.markErr = errors.New("database down")
		store.mu.Unlock()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		waitFor(t, "two failed passes", func() bool {
			store.mu.Lock()
			defer store.mu.Unlock()
			return store.markCalls >= 2
		})
		store.mu.Lock()
		store.markErr = nil
		store.mu.Unlock()
		waitFor(t, "the mail marked", func() bool { return store.row("late@postline.test", 0).Confirmation == "unconfirmed" })
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}
