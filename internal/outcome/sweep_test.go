package outcome

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
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
	events := newFakeEvents()
	if cfg.NowFunc == nil {
		cfg.NowFunc = func() time.Time { return testNow }
	}
	s, err := NewSweeper(cfg, discard(), prometheus.NewRegistry(), store, events)
	if err != nil {
		t.Fatalf("NewSweeper: %v", err)
	}
	return s, store, events
}

// SweepUnconfirmed is the fake store's pass, on the rules of the Postgres
// store's: up to Limit due recipients walked (DueUnconfirmed), the mail
// they belong to handed to publish whole, and marked (MarkUnconfirmed)
// only once publish succeeded.
func (s *fakeStore) SweepUnconfirmed(ctx context.Context, sw idempotency.UnconfirmedSweep,
	publish func(context.Context, []idempotency.Recipient) error) (idempotency.UnconfirmedPass, error) {
	walked, err := s.DueUnconfirmed(ctx, sw.Limit)
	if err != nil {
		return idempotency.UnconfirmedPass{}, err
	}
	mails := map[string]bool{}
	var ids []string
	for _, r := range walked {
		if !mails[r.MessageID] {
			mails[r.MessageID] = true
			ids = append(ids, r.MessageID)
		}
	}
	all, err := s.DueUnconfirmed(ctx, math.MaxInt)
	if err != nil {
		return idempotency.UnconfirmedPass{}, err
	}
	var due []idempotency.Recipient
	for _, r := range all {
		if mails[r.MessageID] {
			due = append(due, r)
		}
	}
	pass := idempotency.UnconfirmedPass{Swept: true, Recipients: len(due), More: len(walked) == sw.Limit}
	if len(due) == 0 {
		return pass, nil
	}
	if err := publish(ctx, due); err != nil {
		return idempotency.UnconfirmedPass{}, err
	}
	if pass.Marked, err = s.MarkUnconfirmed(ctx, ids); err != nil {
		return idempotency.UnconfirmedPass{}, err
	}
	return pass, nil
}

// turnTaken is a store whose every pass finds another worker's pass
// holding the turn.
type turnTaken struct{ passes int }

func (s *turnTaken) SweepUnconfirmed(context.Context, idempotency.UnconfirmedSweep,
	func(context.Context, []idempotency.Recipient) error) (idempotency.UnconfirmedPass, error) {
	s.passes++
	return idempotency.UnconfirmedPass{}, nil
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
	calls := events.Calls()
	if n, err := s.Sweep(t.Context()); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v; want 0", n, err)
	}
	if events.Calls() != calls || len(events.published()) != 3 {
		t.Errorf("the second pass published: %d calls, %d events", events.Calls()-calls, len(events.published()))
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
		{"publish fails", func(_ *fakeStore, e *fakeEvents) { e.Fail(-1, boom) }, 0},
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
			events.Fail(0, nil)
			if n, err := s.Sweep(t.Context()); err != nil || n != 1 {
				t.Fatalf("retry = %d, %v", n, err)
			}
			if got := store.row("late@postline.test", 0).Confirmation; got != "unconfirmed" {
				t.Errorf("confirmation = %q, want unconfirmed", got)
			}
		})
	}
}

// TestSweepSkippedPass checks a pass that finds another worker's pass
// holding the turn: it publishes and counts nothing, and Run waits for
// its next tick rather than trying again at once.
func TestSweepSkippedPass(t *testing.T) {
	store, events := &turnTaken{}, newFakeEvents()
	s, err := NewSweeper(SweepConfig{Interval: time.Hour}, discard(), prometheus.NewRegistry(), store, events)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(t.Context()); n != 0 || err != nil {
		t.Fatalf("Sweep = %d, %v; want 0, nil", n, err)
	}
	if events.Calls() != 0 || testutil.ToFloat64(s.marked) != 0 {
		t.Errorf("a skipped pass published %d times and counted %v", events.Calls(), testutil.ToFloat64(s.marked))
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if store.passes > 2 {
		t.Errorf("Run made %d passes before its context ended, want 1: a skipped pass waits for the tick", store.passes-1)
	}
}

func TestNewSweeperValidates(t *testing.T) {
	store, events := newFakeStore(time.Now), newFakeEvents()
	tests := []struct {
		name   string
		cfg    SweepConfig
		store  SweepStore
		events Events
	}{
		{"negative interval", SweepConfig{Interval: -time.Second}, store, events},
		{"negative batch", SweepConfig{Batch: -1}, store, events},
		{"negative late grace", SweepConfig{LateGrace: -time.Second}, store, events},
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
	if s.cfg.Interval != DefaultSweepInterval || s.cfg.Batch != DefaultSweepBatch ||
		s.cfg.LateGrace != idempotency.DefaultLateGrace || s.cfg.NowFunc == nil {
		t.Errorf("defaults = %+v", s.cfg)
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
		testkit.Eventually(t, 10*time.Second, "all five mails marked", func() bool {
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
		testkit.Eventually(t, 10*time.Second, "two failed passes", func() bool {
			store.mu.Lock()
			defer store.mu.Unlock()
			return store.markCalls >= 2
		})
		store.mu.Lock()
		store.markErr = nil
		store.mu.Unlock()
		testkit.Eventually(t, 10*time.Second, "the mail marked", func() bool { return store.row("late@postline.test", 0).Confirmation == "unconfirmed" })
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}

// gatedEvents holds its first Publish until unblock is closed, after
// telling entered.
type gatedEvents struct {
	*fakeEvents
	entered, unblock chan struct{}
	once             sync.Once
}

func (e *gatedEvents) Publish(ctx context.Context, events ...event.Event) error {
	first := false
	e.once.Do(func() { first = true })
	if first {
		close(e.entered)
		select {
		case <-e.unblock:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return e.fakeEvents.Publish(ctx, events...)
}

// sweeperOn returns a sweeper with its own store, pool and registry on the
// database of url: another worker.
func sweeperOn(t *testing.T, url string, cfg SweepConfig, events Events) *Sweeper {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := idempotency.New(idempotency.Config{Owner: testenv.UniqueName("w")}, pool, discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSweeper(cfg, discard(), prometheus.NewRegistry(), store, events)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestIntegrationSweepOncePerFleet runs two workers' sweepers on one
// database: while one's pass publishes, the other's pass skips without
// reading or publishing anything, and afterwards finds nothing left.
func TestIntegrationSweepOncePerFleet(t *testing.T) {
	t.Parallel()
	url, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	e := newPGOn(t, pool)
	const id = "fleet-1@postline.test"
	e.send(t, id, event.StreamBulk, time.Now().Add(-time.Minute), accepted(0, "ada@example.com"), accepted(1, "bob@example.com"))

	gated := &gatedEvents{fakeEvents: newFakeEvents(), entered: make(chan struct{}), unblock: make(chan struct{})}
	a := sweeperOn(t, url, SweepConfig{}, gated)
	bEvents := newFakeEvents()
	b := sweeperOn(t, url, SweepConfig{}, bEvents)

	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := a.Sweep(t.Context())
		done <- result{n, err}
	}()
	select {
	case <-gated.entered:
	case r := <-done:
		t.Fatalf("a's pass ended before publishing: %d, %v", r.n, r.err)
	}
	// A skipped pass returns at once: one that waited for a's would wait
	// for ever here.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if n, err := b.Sweep(ctx); n != 0 || err != nil || bEvents.Calls() != 0 {
		t.Fatalf("b's pass while a's publishes = %d, %v with %d publications; want it skipped", n, err, bEvents.Calls())
	}
	close(gated.unblock)
	if r := <-done; r.n != 2 || r.err != nil {
		t.Fatalf("a's pass = %d, %v; want both recipients", r.n, r.err)
	}
	if n, err := b.Sweep(t.Context()); n != 0 || err != nil || bEvents.Calls() != 0 {
		t.Fatalf("b's next pass = %d, %v with %d publications; want nothing left", n, err, bEvents.Calls())
	}
	if got := len(gated.published()); got != 2 {
		t.Errorf("a published %d events, want 2", got)
	}
	if c := e.rows(t, id)[0].Confirmation; c != "unconfirmed" {
		t.Errorf("confirmation = %q, want unconfirmed", c)
	}
	if ma, mb := testutil.ToFloat64(a.marked), testutil.ToFloat64(b.marked); ma != 1 || mb != 0 {
		t.Errorf("unconfirmed_total = %v and %v, want 1 and 0", ma, mb)
	}
}

// TestIntegrationSweepersRaceOnce lets four workers' sweepers pass at once,
// again and again, over 24 due mails until all are marked: every recipient
// gets one unconfirmed event, from one of them, and every mail is counted
// once.
func TestIntegrationSweepersRaceOnce(t *testing.T) {
	t.Parallel()
	url, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	e := newPGOn(t, pool)
	const mails = 24
	for i := range mails {
		e.send(t, fmt.Sprintf("race-%02d@postline.test", i), event.StreamBulk, time.Now().Add(-time.Duration(mails-i)*time.Second),
			accepted(0, "ada@example.com"), accepted(1, "bob@example.com"))
	}
	sweepers := make([]*Sweeper, 4)
	events := make([]*fakeEvents, len(sweepers))
	for i := range sweepers {
		events[i] = newFakeEvents()
		sweepers[i] = sweeperOn(t, url, SweepConfig{Batch: 3}, events[i])
	}
	marked := func() float64 {
		sum := 0.0
		for _, s := range sweepers {
			sum += testutil.ToFloat64(s.marked)
		}
		return sum
	}
	// Each sweeps until the fleet has marked every mail: a pass that
	// finds the turn taken returns at once, so a count of passes would
	// not say when the work is done.
	deadline := time.Now().Add(30 * time.Second)
	var wg sync.WaitGroup
	for _, s := range sweepers {
		wg.Go(func() {
			for marked() < mails && time.Now().Before(deadline) {
				if _, err := s.Sweep(t.Context()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	count := map[string]int{}
	for i := range sweepers {
		for _, ev := range events[i].published() {
			count[ev.ID]++
		}
	}
	for i := range mails {
		id := fmt.Sprintf("race-%02d@postline.test", i)
		for idx := range 2 {
			if c := count[event.NewLifeID(id, e.life(t, id), idx, event.Unconfirmed, 0)]; c != 1 {
				t.Errorf("recipient %d of %s had %d unconfirmed events, want 1", idx, id, c)
			}
		}
		if c := e.rows(t, id)[0].Confirmation; c != "unconfirmed" {
			t.Errorf("%s confirmation = %q, want unconfirmed", id, c)
		}
	}
	if got := marked(); got != mails {
		t.Errorf("unconfirmed_total summed over the workers = %v, want %d", got, mails)
	}
}
