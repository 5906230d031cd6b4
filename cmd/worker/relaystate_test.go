package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/delivery"
	"github.com/postline/postline/internal/relaystate"
)

// fakeRelayStore records what the publisher did; each operation fails with
// its error while one is set.
type fakeRelayStore struct {
	mu                             sync.Mutex
	publishErr, ratesErr, pruneErr error
	published                      [][]relaystate.Snapshot
	freshAfter                     []time.Duration // before the publication time
	prunes                         int
	rates                          map[string]adaptive.LearnedRates
}

func (f *fakeRelayStore) Publish(_ context.Context, workerID string, at time.Time, states []relaystate.Snapshot) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if workerID != "w1" || at.IsZero() {
		return fmt.Errorf("publish as %q at %v", workerID, at)
	}
	f.published = append(f.published, states)
	return f.publishErr
}

func (f *fakeRelayStore) FleetRates(_ context.Context, except string, freshAfter time.Time) (map[string]adaptive.LearnedRates, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if except != "w1" {
		return nil, fmt.Errorf("fleet rates except %q", except)
	}
	f.freshAfter = append(f.freshAfter, time.Since(freshAfter))
	return f.rates, f.ratesErr
}

func (f *fakeRelayStore) Prune(context.Context, time.Time) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prunes++
	return 1, f.pruneErr
}

// fakeRelaySource is a pipeline with one paced relay.
type fakeRelaySource struct {
	mu     sync.Mutex
	seeded []map[string]adaptive.LearnedRates
}

func (s *fakeRelaySource) RelayStates() []delivery.RelayState {
	return []delivery.RelayState{{Relay: "mx", Priority: 1, InFlight: 2, Limit: 5, Rate: 30, FleetShare: math.Inf(1),
		Members: 1, RateCuts: 1, LastCut: delivery.Cut{Controller: "rate", Reason: "throttle-text 450 4.7.1", At: time.Unix(100, 0)}}}
}

func (s *fakeRelaySource) SeedRates(_ time.Time, rates map[string]adaptive.LearnedRates) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seeded = append(s.seeded, rates)
}

func TestRelayStatePublisher(t *testing.T) {
	refused := &pgconn.PgError{Code: "28P01", Message: "password authentication failed"} // will not mend
	dropped := errors.New("connection reset by peer")                                    // may mend
	tests := []struct {
		name                           string
		publishErr, ratesErr, pruneErr error
		wantSeeded                     bool
		wantFailures                   map[string]float64
		wantWarns                      int
	}{
		{"healthy", nil, nil, nil, true, map[string]float64{}, 0},
		{"database away", dropped, dropped, dropped, false, map[string]float64{opPublish: -1, opFleetRates: -1, opPrune: 1}, 0},
		{"publish refused, reads work", refused, nil, nil, true, map[string]float64{opPublish: -1}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &fakeRelayStore{publishErr: tt.publishErr, ratesErr: tt.ratesErr, pruneErr: tt.pruneErr,
				rates: map[string]adaptive.LearnedRates{"mx": {Sum: 12.5, Workers: 1}}}
			src := &fakeRelaySource{}
			var logs bytes.Buffer
			logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			reg := prometheus.NewRegistry()
			p, err := newRelayStatePublisher(nil, "w1", 10*time.Millisecond, logger, reg)
			if err != nil {
				t.Fatal(err)
			}
			p.store = store
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			defer cancel()
			if err := p.Run(ctx, src); err != nil {
				t.Fatalf("Run = %v, want nil: failures never stop the worker", err)
			}

			store.mu.Lock()
			defer store.mu.Unlock()
			n := len(store.published)
			if n < 4 {
				t.Fatalf("%d publications in 100ms every 10ms, want several", n)
			}
			if got := store.published[0]; len(got) != 1 || got[0].Relay != "mx" || got[0].Rate != 30 ||
				got[0].LastCut.Reason != "throttle-text 450 4.7.1" || got[0].InFlight != 2 {
				t.Errorf("first publication %+v, want the pipeline's relay state", got)
			}
			if last := store.published[n-1]; last != nil {
				t.Errorf("last publication %+v, want the empty goodbye that deletes the worker's rows", last)
			}
			if store.prunes != 1 {
				t.Errorf("%d prunes in 100ms, want 1 (one a minute, the first at start)", store.prunes)
			}
			for _, d := range store.freshAfter {
				if d < 30*time.Millisecond || d > time.Second {
					t.Errorf("fleet rates fresh after %v ago, want 3 intervals (30ms)", d)
				}
			}
			src.mu.Lock()
			if got := len(src.seeded) > 0; got != tt.wantSeeded {
				t.Errorf("seeded %d times, want seeding %v", len(src.seeded), tt.wantSeeded)
			} else if got && src.seeded[0]["mx"] != (adaptive.LearnedRates{Sum: 12.5, Workers: 1}) {
				t.Errorf("seeded with %v, want the store's fleet rates", src.seeded[0])
			}
			src.mu.Unlock()
			for _, op := range []string{opPublish, opFleetRates, opPrune} {
				got := testutil.ToFloat64(p.failures.WithLabelValues(op))
				want := tt.wantFailures[op]
				if want < 0 { // every call failed
					want = float64(map[string]int{opPublish: n, opFleetRates: len(store.freshAfter)}[op])
				}
				if got != want {
					t.Errorf("%s failures %v, want %v", op, got, want)
				}
			}
			if warns := strings.Count(logs.String(), `"level":"WARN"`); warns != tt.wantWarns {
				t.Errorf("%d warnings, want %d (a lasting failure once, a passing one at debug):\n%s", warns, tt.wantWarns, logs.String())
			}
		})
	}
}

func TestRelayStateIntervalMustBePositive(t *testing.T) {
	_, err := newRelayStatePublisher(nil, "w1", 0, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err == nil || !strings.Contains(err.Error(), "POSTLINE_RELAY_STATE_INTERVAL") {
		t.Errorf("interval 0: %v, want an error naming the setting", err)
	}
}
