package relaystate_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/relaystate"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
)

var unpaced = math.Inf(1)

// newStore migrates a fresh schema and returns a store on it.
func newStore(t *testing.T) (*relaystate.Store, *pgxpool.Pool) {
	t.Helper()
	_, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return relaystate.New(pool), pool
}

func TestPublishListFleetRatesPrune(t *testing.T) {
	t.Parallel()
	store, _ := newStore(t)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond) // Postgres keeps microseconds
	cut := relaystate.Cut{Controller: adaptive.ControllerRate, Reason: "throttle 450", At: now.Add(-3 * time.Second)}

	// w1 is paced on a and unpaced on b; w2 is paced on both; w3 stopped
	// publishing a minute ago.
	if err := store.Publish(ctx, "w1", now, []relaystate.Snapshot{
		{Relay: "a", Priority: 1, Limit: 8, InFlight: 3, Rate: 40, FleetShare: 50, Members: 2, RateCuts: 2, LastCut: cut},
		{Relay: "b", Priority: 2, Limit: 16, Rate: unpaced, FleetShare: unpaced},
	}); err != nil {
		t.Fatal(err)
	}
	if err := store.Publish(ctx, "w2", now, []relaystate.Snapshot{
		{Relay: "a", Priority: 1, Limit: 4, Rate: 35.5, FleetShare: 50, Members: 2},
		{Relay: "b", Priority: 2, Limit: 16, Rate: 10, FleetShare: unpaced},
	}); err != nil {
		t.Fatal(err)
	}
	if err := store.Publish(ctx, "w3", now.Add(-time.Minute), []relaystate.Snapshot{
		{Relay: "a", Priority: 1, Limit: 2, Rate: 1000, FleetShare: unpaced},
	}); err != nil {
		t.Fatal(err)
	}

	l, err := store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(l.At); d < -time.Minute || d > time.Minute {
		t.Errorf("database clock %v, want about now", l.At)
	}
	var keys []string
	for _, r := range l.Rows {
		keys = append(keys, r.Relay+"/"+r.WorkerID)
	}
	if got, want := strings.Join(keys, " "), "a/w1 a/w2 a/w3 b/w1 b/w2"; got != want {
		t.Fatalf("rows %s, want %s", got, want)
	}
	a1, b1 := l.Rows[0], l.Rows[3]
	want := relaystate.Row{WorkerID: "w1", UpdatedAt: now, Snapshot: relaystate.Snapshot{Relay: "a", Priority: 1, Limit: 8,
		InFlight: 3, Rate: 40, FleetShare: 50, Members: 2, RateCuts: 2, LastCut: cut}}
	if !equalRow(a1, want) {
		t.Errorf("a/w1 read back as %+v, want %+v", a1, want)
	}
	if b1.Paced() || b1.Shared() || b1.LastCut.Controller != "" || !b1.LastCut.At.IsZero() {
		t.Errorf("b/w1 read back as %+v, want unpaced, no fleet rate, never cut", b1)
	}

	// FleetRates leaves out the asking worker, stale workers and unpaced
	// rows: w1 asking sees w2 only (w3 is stale).
	fresh := now.Add(-6 * time.Second)
	tests := []struct {
		asking string
		want   map[string]adaptive.LearnedRates
	}{
		{"w1", map[string]adaptive.LearnedRates{"a": {Sum: 35.5, Workers: 1}, "b": {Sum: 10, Workers: 1}}},
		{"w2", map[string]adaptive.LearnedRates{"a": {Sum: 40, Workers: 1}}},
		{"new", map[string]adaptive.LearnedRates{"a": {Sum: 75.5, Workers: 2}, "b": {Sum: 10, Workers: 1}}},
	}
	for _, tt := range tests {
		got, err := store.FleetRates(ctx, tt.asking, fresh)
		if err != nil {
			t.Fatal(err)
		}
		if !equalRates(got, tt.want) {
			t.Errorf("FleetRates asked by %s = %v, want %v", tt.asking, got, tt.want)
		}
	}

	// w1 publishes again without b: its b row goes, a is updated, and an
	// older publication afterwards changes nothing.
	later := now.Add(2 * time.Second)
	if err := store.Publish(ctx, "w1", later, []relaystate.Snapshot{
		{Relay: "a", Priority: 1, Limit: 9, Rate: 42, FleetShare: 50, Members: 2, RateCuts: 2, LastCut: cut},
	}); err != nil {
		t.Fatal(err)
	}
	if err := store.Publish(ctx, "w1", now, []relaystate.Snapshot{
		{Relay: "a", Priority: 1, Limit: 1, Rate: 1, FleetShare: 50, Members: 2},
	}); err != nil {
		t.Fatal(err)
	}
	l, err = store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Rows) != 4 || l.Rows[0].WorkerID != "w1" || l.Rows[0].Limit != 9 || !l.Rows[0].UpdatedAt.Equal(later) {
		t.Errorf("after w1's second and stale publications: %+v, want a/w1 at limit 9, and no b/w1", l.Rows)
	}

	n, err := store.Prune(ctx, now.Add(-10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("Prune deleted %d rows, want 1 (w3's)", n)
	}
	l, err = store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range l.Rows {
		if r.WorkerID == "w3" {
			t.Errorf("w3's row survived the prune: %+v", r)
		}
	}

	// An empty publication removes all of the worker's rows.
	if err := store.Publish(ctx, "w2", later, nil); err != nil {
		t.Fatal(err)
	}
	l, err = store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Rows) != 1 || l.Rows[0].WorkerID != "w1" {
		t.Errorf("after w2 published nothing: %+v, want a/w1 only", l.Rows)
	}
}

func TestPublishRejects(t *testing.T) {
	t.Parallel()
	store, _ := newStore(t)
	ok := relaystate.Snapshot{Relay: "a", Limit: 1, Rate: unpaced, FleetShare: unpaced}
	with := func(f func(*relaystate.Snapshot)) relaystate.Snapshot { s := ok; f(&s); return s }
	now := time.Now()
	tests := []struct {
		name   string
		worker string
		at     time.Time
		states []relaystate.Snapshot
		want   string
	}{
		{"empty worker", "", now, []relaystate.Snapshot{ok}, "empty worker ID"},
		{"zero time", "w", time.Time{}, []relaystate.Snapshot{ok}, "zero time"},
		{"empty relay", "w", now, []relaystate.Snapshot{with(func(s *relaystate.Snapshot) { s.Relay = "" })}, "empty relay"},
		{"relay twice", "w", now, []relaystate.Snapshot{ok, ok}, "relay a twice"},
		{"NaN rate", "w", now, []relaystate.Snapshot{with(func(s *relaystate.Snapshot) { s.Rate = math.NaN() })}, "rate NaN"},
		{"negative rate", "w", now, []relaystate.Snapshot{with(func(s *relaystate.Snapshot) { s.Rate = -1 })}, "rate -1"},
		{"negative share", "w", now, []relaystate.Snapshot{with(func(s *relaystate.Snapshot) { s.FleetShare = -1 })}, "fleet share -1"},
		{"negative limit", "w", now, []relaystate.Snapshot{with(func(s *relaystate.Snapshot) { s.Limit = -1 })}, "negative count"},
		{"cut without time", "w", now, []relaystate.Snapshot{with(func(s *relaystate.Snapshot) { s.LastCut.Controller = "rate" })}, "controller and a time"},
	}
	for _, tt := range tests {
		err := store.Publish(t.Context(), tt.worker, tt.at, tt.states)
		if !errors.Is(err, relaystate.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Publish = %v, want an ErrInvalid containing %q", tt.name, err, tt.want)
		}
	}
	l, err := store.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Rows) != 0 {
		t.Errorf("rejected publications wrote %+v", l.Rows)
	}
}

func equalRow(a, b relaystate.Row) bool {
	return a.WorkerID == b.WorkerID && a.UpdatedAt.Equal(b.UpdatedAt) && a.LastCut.At.Equal(b.LastCut.At) &&
		a.LastCut.Controller == b.LastCut.Controller && a.LastCut.Reason == b.LastCut.Reason &&
		a.Relay == b.Relay && a.Priority == b.Priority && a.Limit == b.Limit && a.InFlight == b.InFlight &&
		a.Rate == b.Rate && a.FleetShare == b.FleetShare && a.Members == b.Members &&
		a.ConcurrencyCuts == b.ConcurrencyCuts && a.RateCuts == b.RateCuts
}

func equalRates(a, b map[string]adaptive.LearnedRates) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if got, ok := a[k]; !ok || math.Abs(got.Sum-v.Sum) > 1e-9 || got.Workers != v.Workers {
			return false
		}
	}
	return true
}
