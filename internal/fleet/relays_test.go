package fleet

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/postline/postline/internal/relaystate"
)

var relaysAt = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

// row is a worker's relay state published age before relaysAt.
func row(worker, relay string, priority int, age time.Duration, s relaystate.Snapshot) relaystate.Row {
	s.Relay, s.Priority = relay, priority
	return relaystate.Row{WorkerID: worker, UpdatedAt: relaysAt.Add(-age), Snapshot: s}
}

func TestNewRelays(t *testing.T) {
	inf := math.Inf(1)
	unpaced := relaystate.Snapshot{Limit: 16, Rate: inf, FleetShare: inf}
	cut := relaystate.Cut{Controller: "rate", Reason: "throttle 450", At: relaysAt.Add(-5 * time.Second)}
	tests := []struct {
		name     string
		rows     []relaystate.Row
		breakers []BreakerRow
		want     []Relay
	}{
		{name: "nothing published", want: []Relay{}},
		{
			name: "a stale worker is listed but left out of the fleet's rate and counts",
			rows: []relaystate.Row{
				row("w1", "mx", 1, time.Second, relaystate.Snapshot{Limit: 6, InFlight: 4, Rate: 42.25, FleetShare: inf, RateCuts: 3, LastCut: cut}),
				row("w2", "mx", 1, 2*time.Second, unpaced),
				row("w3", "mx", 1, time.Minute, relaystate.Snapshot{Limit: 2, Rate: 500, FleetShare: inf}),
			},
			want: []Relay{{Name: "mx", FleetRate: 42.25, Live: 2, Paced: 1, Workers: []WorkerControl{
				{WorkerID: "w1", Priority: 1, Limit: 6, InFlight: 4, Rate: ptr(42.25), RateCuts: 3,
					LastCut:   &Cut{Controller: "rate", Reason: "throttle 450", At: relaysAt.Add(-5 * time.Second)},
					UpdatedAt: relaysAt.Add(-time.Second), AgeSeconds: 1},
				{WorkerID: "w2", Priority: 1, Limit: 16, UpdatedAt: relaysAt.Add(-2 * time.Second), AgeSeconds: 2},
				{WorkerID: "w3", Stale: true, Priority: 1, Limit: 2, Rate: ptr(500.0), UpdatedAt: relaysAt.Add(-time.Minute), AgeSeconds: 60},
			}}},
		},
		{
			name: "a worker exactly at the stale-after age is live; a shared fleet rate is kept",
			rows: []relaystate.Row{row("w1", "mx", 2, 6*time.Second, relaystate.Snapshot{Limit: 8, Rate: 10, FleetShare: 25, Members: 2})},
			want: []Relay{{Name: "mx", FleetRate: 10, Live: 1, Paced: 1, Workers: []WorkerControl{
				{WorkerID: "w1", Priority: 2, Limit: 8, Rate: ptr(10.0), FleetShare: ptr(25.0), Members: 2,
					UpdatedAt: relaysAt.Add(-6 * time.Second), AgeSeconds: 6},
			}}},
		},
		{
			name: "breakers: closed keeps no times, open its opening, half-open its probe too",
			breakers: []BreakerRow{
				{Provider: "a", State: "closed", Failures: 2, OpenedAt: relaysAt.Add(-time.Hour), LastClass: "connection_refused"},
				{Provider: "b", State: "open", Failures: 5, OpenedAt: relaysAt.Add(-20 * time.Second),
					OpenUntil: relaysAt.Add(10 * time.Second), ProbeOwner: "w9", LastClass: "timeout"},
				{Provider: "c", State: "half_open", Failures: 6, OpenedAt: relaysAt.Add(-90 * time.Second),
					OpenUntil: relaysAt.Add(-30 * time.Second), ProbeOwner: "w2", ProbeUntil: relaysAt.Add(5 * time.Second)},
			},
			want: []Relay{
				{Name: "a", Breaker: &Breaker{State: "closed", Failures: 2, LastClass: "connection_refused"}, Workers: []WorkerControl{}},
				{Name: "b", Breaker: &Breaker{State: "open", Failures: 5, LastClass: "timeout",
					Since: ptr(relaysAt.Add(-20 * time.Second)), OpenUntil: ptr(relaysAt.Add(10 * time.Second))}, Workers: []WorkerControl{}},
				{Name: "c", Breaker: &Breaker{State: "half_open", Failures: 6, Since: ptr(relaysAt.Add(-90 * time.Second)),
					OpenUntil: ptr(relaysAt.Add(-30 * time.Second)), ProbeOwner: "w2", ProbeUntil: ptr(relaysAt.Add(5 * time.Second))},
					Workers: []WorkerControl{}},
			},
		},
		{
			name: "by the lowest priority a worker gives, then name; relays without workers last",
			rows: []relaystate.Row{
				row("w1", "zeta", 1, time.Second, unpaced),
				row("w1", "beta", 3, time.Second, unpaced),
				row("w2", "beta", 2, time.Second, unpaced),
				row("w1", "alpha", 2, time.Second, unpaced),
			},
			breakers: []BreakerRow{{Provider: "old", State: "closed"}, {Provider: "aaa", State: "closed"}},
			want: []Relay{
				{Name: "zeta", Live: 1, Workers: []WorkerControl{{WorkerID: "w1", Priority: 1, Limit: 16,
					UpdatedAt: relaysAt.Add(-time.Second), AgeSeconds: 1}}},
				{Name: "alpha", Live: 1, Workers: []WorkerControl{{WorkerID: "w1", Priority: 2, Limit: 16,
					UpdatedAt: relaysAt.Add(-time.Second), AgeSeconds: 1}}},
				{Name: "beta", Live: 2, Workers: []WorkerControl{
					{WorkerID: "w1", Priority: 3, Limit: 16, UpdatedAt: relaysAt.Add(-time.Second), AgeSeconds: 1},
					{WorkerID: "w2", Priority: 2, Limit: 16, UpdatedAt: relaysAt.Add(-time.Second), AgeSeconds: 1},
				}},
				{Name: "aaa", Breaker: &Breaker{State: "closed"}, Workers: []WorkerControl{}},
				{Name: "old", Breaker: &Breaker{State: "closed"}, Workers: []WorkerControl{}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NewRelays(relaystate.Listing{At: relaysAt, Rows: tt.rows}, tt.breakers, DefaultStaleAfter)
			if !got.At.Equal(relaysAt) || got.StaleAfterSeconds != 6 {
				t.Errorf("at %v, stale after %vs; want %v, 6s", got.At, got.StaleAfterSeconds, relaysAt)
			}
			if !reflect.DeepEqual(got.Relays, tt.want) {
				t.Errorf("got\n%s\nwant\n%s", mustJSON(t, got.Relays), mustJSON(t, tt.want))
			}
		})
	}
}

// TestNewRelaysUTC: times read in another zone come out in UTC, ages from
// the database's clock.
func TestNewRelaysUTC(t *testing.T) {
	zone := time.FixedZone("UTC+2", 2*60*60)
	at := relaysAt.In(zone)
	l := relaystate.Listing{At: at, Rows: []relaystate.Row{{WorkerID: "w1", UpdatedAt: at.Add(-1500 * time.Millisecond),
		Snapshot: relaystate.Snapshot{Relay: "mx", Rate: math.Inf(1), FleetShare: math.Inf(1),
			LastCut: relaystate.Cut{Controller: "concurrency", Reason: "refused", At: at.Add(-time.Minute)}}}}}
	got := NewRelays(l, []BreakerRow{{Provider: "mx", State: "open", OpenedAt: at.Add(-time.Minute), OpenUntil: at}}, time.Second)
	w := got.Relays[0].Workers[0]
	for what, tm := range map[string]time.Time{"at": got.At, "updated": w.UpdatedAt, "cut": w.LastCut.At,
		"since": *got.Relays[0].Breaker.Since, "open until": *got.Relays[0].Breaker.OpenUntil} {
		if tm.Location() != time.UTC {
			t.Errorf("%s in %v, want UTC", what, tm.Location())
		}
	}
	if !w.Stale || w.AgeSeconds != 1.5 || got.StaleAfterSeconds != 1 || got.Relays[0].Live != 0 {
		t.Errorf("worker %+v, stale after %vs, live %d; want stale at 1.5s past 1s, none live", w, got.StaleAfterSeconds, got.Relays[0].Live)
	}
}

func TestReaderRelays(t *testing.T) {
	errGone := errors.New("relation does not exist")
	listing := relaystate.Listing{At: relaysAt, Rows: []relaystate.Row{
		row("w1", "mx", 1, 10*time.Second, relaystate.Snapshot{Rate: 5, FleetShare: math.Inf(1)})}}
	tests := []struct {
		name       string
		source     fakeRelays
		staleAfter time.Duration
		wantErr    error
		wantStale  bool
	}{
		{name: "default stale-after: 10s old is stale", source: fakeRelays{listing: listing}, wantStale: true},
		{name: "stale-after 30s: 10s old is live", source: fakeRelays{listing: listing}, staleAfter: 30 * time.Second},
		{name: "the states fail", source: fakeRelays{statesErr: errGone}, wantErr: errGone},
		{name: "the breakers fail", source: fakeRelays{listing: listing, breakerErr: errGone}, wantErr: errGone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(Config{StaleAfter: tt.staleAfter})
			if err != nil {
				t.Fatal(err)
			}
			r.relays = tt.source
			got, err := r.Relays(t.Context())
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Relays) != 1 || got.Relays[0].Workers[0].Stale != tt.wantStale {
				t.Errorf("relays %+v, want the worker stale: %v", got.Relays, tt.wantStale)
			}
		})
	}
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Relays(t.Context()); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("Relays without a database: %v, want ErrNotConfigured", err)
	}
	if _, err := New(Config{StaleAfter: -time.Second}); err == nil {
		t.Error("New with a negative StaleAfter: no error")
	}
}
