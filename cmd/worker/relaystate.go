package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/delivery"
	"github.com/postline/postline/internal/pgpool"
	"github.com/postline/postline/internal/relaystate"
)

const (
	// relayStateStaleAfter is how many publications a worker may miss
	// before the others stop counting its learned rates (postctl relays
	// shows it as stale after as long, by default).
	relayStateStaleAfter = 3
	// relayStateRetention is how long the rows of a worker that stopped
	// publishing (it crashed, or hangs) stay for operators to see.
	relayStateRetention = 10 * time.Minute
	// relayStatePruneEvery is how often each worker deletes them: often
	// enough, and not a statement per publication.
	relayStatePruneEvery = time.Minute
)

// relayStateSource is the pipeline's side of the shared relay state.
type relayStateSource interface {
	RelayStates() []delivery.RelayState
	SeedRates(now time.Time, fleetRates map[string]adaptive.LearnedRates)
}

// relayStateStore is postline_relay_state (relaystate.Store).
type relayStateStore interface {
	Publish(ctx context.Context, workerID string, at time.Time, states []relaystate.Snapshot) error
	FleetRates(ctx context.Context, exceptWorker string, freshAfter time.Time) (map[string]adaptive.LearnedRates, error)
	Prune(ctx context.Context, before time.Time) (int64, error)
}

// relayStatePublisher shares this worker's send control of each relay with
// the fleet: every interval it publishes the pipeline's relay states, and
// seeds the pipeline's unpaced relays with the rates the other live
// workers learned. It is a side channel: its failures are logged and
// counted, never fatal, and mail flows without it.
type relayStatePublisher struct {
	store    relayStateStore
	workerID string
	interval time.Duration
	logger   *slog.Logger
	failures *prometheus.CounterVec
	now      func() time.Time
	// broken holds the operations whose last failure will not mend by
	// itself (pgpool.MayHeal): logged once at Warn until they succeed.
	broken map[string]bool
}

// The operations of the publisher, as failure metric labels.
const (
	opPublish    = "publish"
	opFleetRates = "fleet_rates"
	opPrune      = "prune"
)

func newRelayStatePublisher(pool *pgxpool.Pool, workerID string, interval time.Duration, logger *slog.Logger,
	reg prometheus.Registerer) (*relayStatePublisher, error) {
	if interval <= 0 {
		return nil, fmt.Errorf("setting POSTLINE_RELAY_STATE_INTERVAL: %s must be positive", interval)
	}
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "postline_relay_state_failures_total",
		Help: "Failed statements of the shared relay state (postline_relay_state), by operation: publish, fleet_rates, prune.",
	}, []string{"op"})
	for _, op := range []string{opPublish, opFleetRates, opPrune} {
		failures.WithLabelValues(op)
	}
	if err := reg.Register(failures); err != nil {
		return nil, fmt.Errorf("relay state metrics: %w", err)
	}
	return &relayStatePublisher{store: relaystate.New(pool), workerID: workerID, interval: interval, logger: logger,
		failures: failures, now: time.Now, broken: make(map[string]bool)}, nil
}

// Run publishes until ctx ends, then deletes this worker's rows: a worker
// that stops cleanly is gone, not stale. It returns nil.
func (r *relayStatePublisher) Run(ctx context.Context, src relayStateSource) error {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	var lastPrune time.Time
	for {
		now := r.now()
		r.publish(ctx, src, now)
		if now.Sub(lastPrune) >= relayStatePruneEvery {
			lastPrune = now
			r.prune(ctx, now)
		}
		select {
		case <-ctx.Done():
			r.goodbye(ctx)
			return nil
		case <-t.C:
		}
	}
}

// publish writes this worker's rows, then hands the other live workers'
// learned rates to the pipeline.
func (r *relayStatePublisher) publish(ctx context.Context, src relayStateSource, now time.Time) {
	err := r.store.Publish(ctx, r.workerID, now, snapshots(src.RelayStates()))
	r.note(ctx, opPublish, err)
	rates, err := r.store.FleetRates(ctx, r.workerID, now.Add(-relayStateStaleAfter*r.interval))
	if r.note(ctx, opFleetRates, err) {
		src.SeedRates(now, rates)
	}
}

func (r *relayStatePublisher) prune(ctx context.Context, now time.Time) {
	n, err := r.store.Prune(ctx, now.Add(-relayStateRetention))
	if r.note(ctx, opPrune, err) && n > 0 {
		r.logger.Debug("relay state: deleted the rows of workers gone for long", "rows", n, "retention", relayStateRetention)
	}
}

// goodbye deletes this worker's rows as it stops, on a context of its own:
// ctx has ended.
func (r *relayStatePublisher) goodbye(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	r.note(ctx, opPublish, r.store.Publish(ctx, r.workerID, r.now(), nil))
}

// note counts and logs err and reports whether op succeeded. A failure that
// publishing again may mend is logged at Debug; one that will not (a
// missing table, a rejected value) at Warn, once until op succeeds. A
// cancelled context is the worker stopping, not a failure.
func (r *relayStatePublisher) note(ctx context.Context, op string, err error) bool {
	if err == nil {
		delete(r.broken, op)
		return true
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return false
	}
	r.failures.WithLabelValues(op).Inc()
	if pgpool.MayHeal(err) && !errors.Is(err, relaystate.ErrInvalid) {
		r.logger.Debug("relay state: failed; trying again at the next publication", "op", op, "error", err)
		return false
	}
	if !r.broken[op] {
		r.broken[op] = true
		r.logger.Warn("relay state: failed, and will fail again until fixed; mail is not affected",
			"op", op, "error", err)
	}
	return false
}

// snapshots converts the pipeline's relay states for the table.
func snapshots(states []delivery.RelayState) []relaystate.Snapshot {
	out := make([]relaystate.Snapshot, len(states))
	for i, s := range states {
		out[i] = relaystate.Snapshot{
			Relay: s.Relay, Priority: s.Priority, Limit: s.Limit, InFlight: s.InFlight,
			Rate: s.Rate, FleetShare: s.FleetShare, Members: s.Members,
			ConcurrencyCuts: s.ConcurrencyCuts, RateCuts: s.RateCuts,
			LastCut: relaystate.Cut{Controller: s.LastCut.Controller, Reason: s.LastCut.Reason, At: s.LastCut.At},
		}
	}
	return out
}
