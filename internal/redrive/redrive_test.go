package redrive

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/job"
)

// fixture is a dead-letter topic of several tenants, reasons and rows.
type fixture struct {
	src   sliceSource
	store *fakeStore
}

func newFixture(t *testing.T) fixture {
	failed := newJob("failed@x", "acme", "a@example.test", "b@example.test")
	failed.Priority = job.PriorityBulk
	failed.Metadata = map[string]string{"order": "7"}
	src := sliceSource{
		letterOf(t, failed, "smtp_permanent", "permanent"),
		letterOf(t, newJob("dead@x", "globex", "c@example.test"), "max_attempts", "transient"),
		letterOf(t, newJob("sent@x", "acme", "d@example.test"), "smtp_permanent", "permanent"),
		letterOf(t, newJob("pending@x", "acme", "e@example.test"), "smtp_permanent", "permanent"),
		letterOf(t, newJob("norow@x", "", "f@example.test"), "expired", "expired"),
		{Key: []byte("broken@x"), Value: []byte(`{"version":1,`), Headers: letterOf(t, newJob("broken@x", ""), "malformed_json", "invalid").Headers},
	}
	// The failed job dead-lettered twice: one re-drive takes it once.
	src = append(src, src[0])
	store := newFakeStore(map[string]idempotency.Status{
		"failed@x": idempotency.StatusFailed, "dead@x": idempotency.StatusDead,
		"sent@x": idempotency.StatusSent, "pending@x": idempotency.StatusPending,
	})
	return fixture{src: src, store: store}
}

func (f fixture) redriver(t *testing.T, pub *fakePublisher, ev *fakeEvents, lists *fakeLists, clock *fakeClock) *Redriver {
	t.Helper()
	cfg := Config{Source: f.src, Store: f.store, Publisher: pub, Clock: clock}
	if ev != nil {
		cfg.Events = ev
	}
	if lists != nil {
		cfg.Lists = lists
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestPlanCountsAndChangesNothing(t *testing.T) {
	tests := []struct {
		name   string
		filter Filter
		want   Summary
	}{
		{"everything", Filter{}, Summary{Matched: 7, Redriven: 3, SkippedNotReplayable: 3, SkippedInvalid: 1, DryRun: true}},
		{"one tenant", Filter{Tenants: []string{"acme"}}, Summary{Matched: 4, Redriven: 1, SkippedNotReplayable: 3, DryRun: true}},
		{"a class", Filter{Classes: []string{"transient", "expired"}}, Summary{Matched: 2, Redriven: 2, DryRun: true}},
		{"a reason, limited", Filter{Reasons: []string{"smtp_permanent"}, Limit: 2}, Summary{Matched: 2, Redriven: 1, SkippedNotReplayable: 1, DryRun: true}},
		{"none", Filter{Tenants: []string{"initech"}}, Summary{DryRun: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			pub := &fakePublisher{}
			got, err := f.redriver(t, pub, nil, nil, &fakeClock{}).Plan(t.Context(), tt.filter)
			if err != nil || got != tt.want {
				t.Errorf("Plan = %+v, %v; want %+v", got, err, tt.want)
			}
			if f.store.reopens != 0 || len(pub.batches) != 0 || f.store.get("failed@x") != idempotency.StatusFailed {
				t.Errorf("a plan changed something: %d reopens, %d publishes", f.store.reopens, len(pub.batches))
			}
		})
	}
}

// TestPlanReadsRowsInBatches checks that a plan's row reads are batched:
// one per Config.Batch jobs, not one per job.
func TestPlanReadsRowsInBatches(t *testing.T) {
	var src sliceSource
	for i := range 25 {
		src = append(src, letterOf(t, newJob(strings.Repeat("m", i+1)+"@x", "", "a@example.test"), "expired", "expired"))
	}
	store := newFakeStore(nil)
	r, err := New(Config{Source: src, Store: store, Batch: 10})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := r.Plan(t.Context(), Filter{}); err != nil || s.Redriven != 25 || store.reads != 3 {
		t.Errorf("Plan = %+v, %v after %d reads; want 25 in 3 reads", s, err, store.reads)
	}
	// Without a store, the rows are not read: every valid job counts.
	r, _ = New(Config{Source: newFixture(t).src})
	if s, err := r.Plan(t.Context(), Filter{}); err != nil || s != (Summary{Matched: 7, Redriven: 5, SkippedNotReplayable: 1, SkippedInvalid: 1, DryRun: true}) {
		t.Errorf("Plan without a store = %+v, %v", s, err)
	}
}

func TestRunRedrivesTheReplayableOnesOnce(t *testing.T) {
	f := newFixture(t)
	clock := &fakeClock{now: dlqTime.Add(time.Hour)}
	pub, ev, lists := &fakePublisher{clock: clock}, &fakeEvents{}, &fakeLists{}
	r := f.redriver(t, pub, ev, lists, clock)
	var (
		invalid  []string
		progress []Summary
	)
	opts := Options{Rate: DefaultRate, Note: "relay fixed, INC-42", Actor: "postctl:ada",
		Progress: func(s Summary) { progress = append(progress, s) },
		Invalid:  func(l DeadLetter, err error) { invalid = append(invalid, l.MessageID) }}
	got, err := r.Run(t.Context(), Filter{}, opts)
	want := Summary{Matched: 7, Redriven: 3, SkippedNotReplayable: 3, SkippedInvalid: 1, Unsuppressed: 3, Events: 4}
	if err != nil || got != want {
		t.Fatalf("Run = %+v, %v; want %+v", got, err, want)
	}
	if keys := pub.keys(); !slices.Equal(keys, []string{"failed@x", "dead@x", "norow@x"}) {
		t.Errorf("published %v, want failed@x, dead@x, norow@x", keys)
	}
	if !slices.Equal(invalid, []string{"broken@x"}) || !slices.Equal(lists.lifted, []string{"failed@x", "dead@x", "norow@x"}) {
		t.Errorf("invalid %v, lifted %v", invalid, lists.lifted)
	}
	if len(progress) == 0 || progress[len(progress)-1] != got {
		t.Errorf("progress %v, want it to end with the summary", progress)
	}
	if f.store.get("sent@x") != idempotency.StatusSent || f.store.get("failed@x") != idempotency.StatusPending {
		t.Errorf("rows: sent@x %s, failed@x %s", f.store.get("sent@x"), f.store.get("failed@x"))
	}

	// One redriven event per recipient, in the new life, with the note.
	failedLife := f.store.lives["failed@x"]
	for i, e := range ev.events[:2] {
		wantID := event.NewLifeID("failed@x", failedLife, i, event.Redriven, 0)
		if e.Type != event.Redriven || e.ID != wantID || e.RecipientIndex != i || e.Tenant != "acme" || e.Stream != event.StreamBulk ||
			e.Note != opts.Note || e.Actor != opts.Actor || e.Reason != "smtp_permanent" || e.Class != "permanent" ||
			e.Metadata["order"] != "7" || !e.At.Equal(pub.at[0]) || e.Attempt != 0 {
			t.Errorf("event %d = %+v", i, e)
		}
	}
	if ev.events[0].Recipient != "a@example.test" || ev.events[1].Recipient != "b@example.test" {
		t.Errorf("recipients %s, %s", ev.events[0].Recipient, ev.events[1].Recipient)
	}
	noRow := ev.events[3]
	if noRow.MessageID != "norow@x" || noRow.ID == event.NewID("norow@x", 0, event.Redriven, 0) {
		t.Errorf("a Message-ID without a row got %+v: want an ID of the run's own", noRow)
	}

	// The same re-drive again sends nothing: the rows are pending now.
	pub2, ev2 := &fakePublisher{}, &fakeEvents{}
	r = f.redriver(t, pub2, ev2, nil, clock)
	again, err := r.Run(t.Context(), Filter{Reasons: []string{"smtp_permanent", "max_attempts"}}, opts)
	if err != nil || again.Redriven != 0 || len(pub2.batches) != 0 || len(ev2.events) != 0 || again.SkippedNotReplayable != 5 {
		t.Errorf("second Run = %+v, %v; published %d batches, %d events", again, err, len(pub2.batches), len(ev2.events))
	}
}

// TestRunEventIDsAreNewForEachRedrive re-drives the same mail twice (it
// failed again in between): the redriven events of the two re-drives have
// different IDs, as do those of a Message-ID without a row.
func TestRunEventIDsAreNewForEachRedrive(t *testing.T) {
	src := sliceSource{letterOf(t, newJob("m@x", "", "a@example.test"), "expired", "expired"),
		letterOf(t, newJob("n@x", "", "a@example.test"), "expired", "expired")}
	store := newFakeStore(map[string]idempotency.Status{"m@x": idempotency.StatusFailed})
	ids := map[string]bool{}
	for range 2 {
		ev := &fakeEvents{}
		r, _ := New(Config{Source: src, Store: store, Publisher: &fakePublisher{}, Events: ev, Clock: &fakeClock{now: dlqTime}})
		if _, err := r.Run(t.Context(), Filter{}, Options{Rate: 10}); err != nil {
			t.Fatal(err)
		}
		for _, e := range ev.events {
			if ids[e.ID] {
				t.Errorf("event ID %s of %s repeated by the second re-drive", e.ID, e.MessageID)
			}
			ids[e.ID] = true
		}
		store.status["m@x"] = idempotency.StatusDead // failed again
		delete(store.status, "n@x")
	}
	if len(ids) != 4 {
		t.Errorf("%d distinct IDs, want 4", len(ids))
	}
}

// TestRunHoldsTheRate re-drives on a clock that moves only when the run
// sleeps: the rate is the limiter's, not the test machine's.
func TestRunHoldsTheRate(t *testing.T) {
	for _, tt := range []struct {
		n    int
		rate float64
	}{{1000, 100}, {2000, 500}, {30, 1}, {5000, MaxRate}} {
		var src sliceSource
		for i := range tt.n {
			src = append(src, letterOf(t, newJob("m."+strconv.Itoa(i)+"@x", "", "a@example.test"), "expired", "expired"))
		}
		clock := &fakeClock{now: dlqTime}
		pub := &fakePublisher{clock: clock}
		r, _ := New(Config{Source: src, Store: newFakeStore(nil), Publisher: pub, Clock: clock})
		s, err := r.Run(t.Context(), Filter{}, Options{Rate: tt.rate})
		if err != nil || s.Redriven != tt.n {
			t.Fatalf("%d at %g/s: %+v, %v", tt.n, tt.rate, s, err)
		}
		// The first burst goes at once, the rest at the rate.
		b := burst(tt.rate, DefaultBatch)
		want := time.Duration(float64(tt.n-b) / tt.rate * float64(time.Second))
		if got := clock.slept; got < want-time.Millisecond || got > want+time.Millisecond {
			t.Errorf("%d at %g/s took %s on the clock, want %s", tt.n, tt.rate, got, want)
		}
		// No stretch of a second holds more than the rate and a burst.
		for i := range pub.at {
			n := 0
			for j := i; j < len(pub.at) && pub.at[j].Sub(pub.at[i]) < time.Second; j++ {
				n += len(pub.batches[j])
			}
			if float64(n) > tt.rate+float64(b) {
				t.Fatalf("%d at %g/s: %d published within a second of %s", tt.n, tt.rate, n, pub.at[i])
			}
		}
	}
}

func TestRunErrors(t *testing.T) {
	f := newFixture(t)
	if _, err := f.redriver(t, &fakePublisher{}, nil, nil, &fakeClock{}).Run(t.Context(), Filter{}, Options{}); err == nil || !strings.HasPrefix(err.Error(), "rate ") {
		t.Errorf("Run without a rate: %v", err)
	}
	r, _ := New(Config{Source: f.src})
	if _, err := r.Run(t.Context(), Filter{}, Options{Rate: 1}); err == nil {
		t.Error("Run without a store and publisher succeeded")
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New without a source succeeded")
	}
	// A publish that fails names the rows left pending for the reaper.
	pub := &fakePublisher{fail: errors.New("broker down")}
	s, err := f.redriver(t, pub, nil, nil, &fakeClock{}).Run(t.Context(), Filter{Tenants: []string{"globex"}}, Options{Rate: 1})
	if err == nil || !strings.Contains(err.Error(), "dead@x were reset to pending") || !strings.Contains(err.Error(), "reaper") || s.Redriven != 0 {
		t.Errorf("failed publish: %+v, %v", s, err)
	}
	// A run stopped while it waits for the rate says the same.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	f = newFixture(t)
	if _, err := f.redriver(t, &fakePublisher{}, nil, nil, &fakeClock{}).Run(ctx, Filter{}, Options{Rate: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled run: %v", err)
	}
}
