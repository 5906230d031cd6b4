package circuit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Decision is Allow's answer for one send.
type Decision struct {
	// Allowed: the send may go to the relay.
	Allowed bool
	// Probe: the send is the circuit's half-open probe, claimed by this
	// worker; report its result with Report, or it expires after
	// Policy.ProbeTimeout and another worker probes.
	Probe bool
}

// Snapshot is one relay's circuit as this worker's cache sees it.
type Snapshot struct {
	Relay     string
	State     State
	Health    Health
	Failures  int // faults in the counting window (or when it opened)
	Successes int // successes reported in the counting window
	Cooldown  time.Duration
	OpenUntil time.Time // zero while closed
	LastClass string
}

// Breakers holds the circuit breakers of a fixed set of relays for one
// worker (owner), backed by postline_circuits. Its methods are safe for
// concurrent use. Run must be running for the worker to see other
// replicas' changes.
type Breakers struct {
	pool    *pgxpool.Pool
	owner   string
	relays  []string
	policy  Policy
	logger  *slog.Logger
	metrics *metrics

	mu      sync.Mutex
	entries map[string]*entry
	changed chan struct{} // closed and replaced on every change
	refresh error         // last refresh error, to log transitions only
}

// entry is the cached circuit of one relay.
type entry struct {
	c         Circuit
	version   int64
	allowable bool      // closed or claimable, when last notified
	claiming  bool      // a goroutine of this worker is claiming the probe
	nextClaim time.Time // no claim attempt before (after a lost claim)
	pending   int       // successes seen in the cached window, not yet written
	flushed   time.Time // when pending was last written
}

// New returns the breakers of relays for the worker named owner (unique
// per replica: it owns probes). It creates the missing rows, closed, and
// loads the cache; logger and reg may be nil.
func New(pool *pgxpool.Pool, owner string, relays []string, p Policy, logger *slog.Logger, reg prometheus.Registerer) (*Breakers, error) {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	switch {
	case pool == nil:
		return nil, errors.New("circuit: nil pool")
	case owner == "":
		return nil, errors.New("circuit: owner is required")
	case len(relays) == 0:
		return nil, errors.New("circuit: no relays")
	}
	entries := make(map[string]*entry, len(relays))
	for _, name := range relays {
		if name == "" {
			return nil, errors.New("circuit: empty relay name")
		}
		if _, dup := entries[name]; dup {
			return nil, fmt.Errorf("circuit: relay %s listed twice", name)
		}
		entries[name] = &entry{version: -1}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg, relays)
	if err != nil {
		return nil, fmt.Errorf("circuit: metrics: %w", err)
	}
	b := &Breakers{
		pool:    pool,
		owner:   owner,
		relays:  slices.Clone(relays),
		policy:  p,
		logger:  logger,
		metrics: m,
		entries: entries,
		changed: make(chan struct{}),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ensureRows(ctx, pool, b.relays, p.BaseCooldown); err != nil {
		m.dbErrors.WithLabelValues(opEnsure).Inc()
		return nil, fmt.Errorf("circuit: create rows: %w", err)
	}
	if err := b.load(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// Run refreshes the cache every Policy.RefreshInterval until ctx ends, and
// wakes Changed when a cooldown or probe deadline passes (on a timer aimed at
// NextProbeAt, not at the next refresh). It returns nil when
// ctx ends; refresh errors are counted and logged, and the cache keeps its
// last state.
func (b *Breakers) Run(ctx context.Context) error {
	tick := time.NewTicker(b.policy.RefreshInterval)
	defer tick.Stop()
	wake := time.NewTimer(b.untilNextProbe())
	defer wake.Stop()
	for {
		changed := b.Changed()
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			// A write of this worker may have opened a circuit: re-aim wake.
		case <-tick.C:
			rctx, cancel := context.WithTimeout(ctx, max(5*b.policy.RefreshInterval, 5*time.Second))
			err := b.load(rctx)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			b.noteRefresh(err)
		case <-wake.C:
		}
		b.recheck()
		wake.Reset(b.untilNextProbe())
	}
}

// untilNextProbe is how long Run sleeps before rechecking cooldowns.
func (b *Breakers) untilNextProbe() time.Duration {
	at, ok := b.NextProbeAt()
	if !ok {
		return time.Hour
	}
	return max(at.Sub(b.policy.NowFunc()), time.Millisecond)
}

// noteRefresh logs a refresh failure once, and the recovery.
func (b *Breakers) noteRefresh(err error) {
	b.mu.Lock()
	prev := b.refresh
	b.refresh = err
	b.mu.Unlock()
	switch {
	case err != nil && prev == nil:
		b.logger.Warn("circuit refresh failing; answering from the last state", "error", err)
	case err == nil && prev != nil:
		b.logger.Info("circuit refresh recovered")
	}
}

// load reads every relay's row into the cache.
func (b *Breakers) load(ctx context.Context) error {
	rows, err := loadRows(ctx, b.pool, b.relays)
	if err != nil {
		b.metrics.dbErrors.WithLabelValues(opRefresh).Inc()
		return fmt.Errorf("circuit: refresh: %w", err)
	}
	for _, r := range rows {
		if prev, ok := b.cache(r); ok && prev.State != r.c.State {
			b.logger.Debug("circuit state observed", "relay", r.relay, "from", prev.State.String(), "to", r.c.State.String())
		}
	}
	return nil
}

// cache stores r if it is newer than the cached row, and returns the
// circuit it replaced.
func (b *Breakers) cache(r row) (prev Circuit, replaced bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[r.relay]
	if !ok || r.version <= e.version {
		return Circuit{}, false
	}
	prev = e.c
	e.c, e.version = r.c, r.version
	b.metrics.show(r.relay, r.c.State, r.c.Health(b.owner))
	e.allowable = allowable(r.c, b.policy.NowFunc())
	b.notifyLocked()
	return prev, true
}

// recheck wakes Changed when time made a relay allowed (a cooldown
// ended) or no longer allowed.
func (b *Breakers) recheck() {
	now := b.policy.NowFunc()
	b.mu.Lock()
	defer b.mu.Unlock()
	notify := false
	for _, e := range b.entries {
		if a := allowable(e.c, now); a != e.allowable {
			e.allowable = a
			notify = true
		}
	}
	if notify {
		b.notifyLocked()
	}
}

func (b *Breakers) notifyLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// allowable: a send may be tried, as a normal send or a probe.
func allowable(c Circuit, now time.Time) bool {
	return c.State == Closed || c.Claimable(now)
}

// Allow reports whether a send to relay may go now. It answers from the
// cache, except when the relay's cooldown (or another worker's probe
// deadline) has passed: then it tries to claim the probe in the table, and
// exactly one worker, one call, gets Decision{Allowed: true, Probe: true}.
// While a probe is in flight, every other call, this worker's included, is
// refused.
func (b *Breakers) Allow(ctx context.Context, relay string) (Decision, error) {
	now := b.policy.NowFunc()
	b.mu.Lock()
	e, ok := b.entries[relay]
	if !ok {
		b.mu.Unlock()
		return Decision{}, fmt.Errorf("circuit: unknown relay %q", relay)
	}
	if e.c.State == Closed {
		b.mu.Unlock()
		return Decision{Allowed: true}, nil
	}
	if !e.c.Claimable(now) || e.claiming || now.Before(e.nextClaim) {
		b.mu.Unlock()
		return Decision{}, nil
	}
	e.claiming = true
	b.mu.Unlock()

	before, after, err := apply(ctx, b.pool, relay, Event{Claim: true, Owner: b.owner}, b.policy)

	b.mu.Lock()
	e.claiming = false
	won := err == nil && after.version != before.version && after.c.State == HalfOpen && after.c.ProbeOwner == b.owner
	if !won {
		// Lost to another worker, or the database clock says not yet: do
		// not ask again before the next refresh could tell us more.
		e.nextClaim = now.Add(b.policy.RefreshInterval)
	}
	b.mu.Unlock()
	if err != nil {
		b.metrics.dbErrors.WithLabelValues(opClaim).Inc()
		return Decision{}, fmt.Errorf("circuit: claim probe of %s: %w", relay, err)
	}
	b.wrote(before, after, Event{Claim: true})
	if !won {
		return Decision{}, nil
	}
	b.metrics.probes.WithLabelValues(relay, probeClaimed).Inc()
	if before.c.State == HalfOpen {
		b.metrics.probes.WithLabelValues(relay, probeExpired).Inc()
	}
	return Decision{Allowed: true, Probe: true}, nil
}

// Report records the result of a send to relay; class is the failure
// class (empty for Success and Throttle). It writes to the table only when
// the result changes the shared circuit:
//
//   - a success while no counting window runs (the healthy path), a
//     throttle while closed, and any report while open (or half-open with
//     another worker's probe) cost no I/O;
//   - a success while the cached circuit counts a window is batched: the
//     worker writes its batch at most once per Policy.FlushInterval, and
//     with its next fault, so every worker's successes reach the decision
//     of every other (one success, say, does not need a write of its own);
//   - a fault is written at once, with the batch.
//
// While this worker holds a relay's probe, its next report for that
// relay decides the probe (Allow refuses every other send to it
// meanwhile, so that report is the probe's). A probe that is never reported,
// say because the job was not sent after all, expires after ProbeTimeout.
func (b *Breakers) Report(ctx context.Context, relay string, o SendResult, class string) error {
	if !o.valid() {
		return fmt.Errorf("circuit: report %s: invalid result %d", relay, int(o))
	}
	now := b.policy.NowFunc()
	ev := Event{Result: o, Class: class, Owner: b.owner}
	b.mu.Lock()
	e, ok := b.entries[relay]
	if !ok {
		b.mu.Unlock()
		return fmt.Errorf("circuit: unknown relay %q", relay)
	}
	cached := e.c
	switch {
	case cached.State != Closed:
		e.pending = 0
	case !cached.windowActive(now, b.policy):
		// Successes from before a window do not count in it.
		e.pending = 0
	case o == Success:
		e.pending++
		if now.Sub(e.flushed) < b.policy.FlushInterval {
			b.mu.Unlock()
			return nil
		}
		fallthrough
	case o.fault():
		ev.Successes, e.pending, e.flushed = e.pending, 0, now
	}
	b.mu.Unlock()
	if Next(cached, ev, now, b.policy).Equal(cached) {
		return nil
	}
	before, after, err := apply(ctx, b.pool, relay, ev, b.policy)
	if err != nil {
		b.metrics.dbErrors.WithLabelValues(opReport).Inc()
		return fmt.Errorf("circuit: report %s %s: %w", o, relay, err)
	}
	b.wrote(before, after, ev)
	return nil
}

// wrote updates the cache and metrics after a transaction on a row.
func (b *Breakers) wrote(before, after row, ev Event) {
	b.cache(before) // the locked row may be newer than the cache
	if after.version == before.version {
		return
	}
	b.cache(after)
	relay := after.relay
	if !ev.Claim && before.c.State == HalfOpen {
		result := probeSuccess
		if after.c.State != Closed {
			result = probeFailure
		}
		b.metrics.probes.WithLabelValues(relay, result).Inc()
	}
	if before.c.State == after.c.State {
		return
	}
	b.metrics.transitions.WithLabelValues(relay, after.c.State.String()).Inc()
	attrs := []any{"relay", relay, "from", before.c.State.String(), "to", after.c.State.String(),
		"failures", after.c.Failures, "successes", after.c.Successes}
	if after.c.State == Open {
		attrs = append(attrs, "class", after.c.LastClass, "cooldown", after.c.Cooldown.String(),
			"open_until", after.c.OpenUntil)
	}
	b.logger.Info("circuit transition", attrs...)
}

// Snapshot returns every relay's cached circuit, in the order given to
// New.
func (b *Breakers) Snapshot() []Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Snapshot, 0, len(b.relays))
	for _, name := range b.relays {
		c := b.entries[name].c
		out = append(out, Snapshot{
			Relay:     name,
			State:     c.State,
			Health:    c.Health(b.owner),
			Failures:  c.Failures,
			Successes: c.Successes,
			Cooldown:  c.Cooldown,
			OpenUntil: c.OpenUntil,
			LastClass: c.LastClass,
		})
	}
	return out
}

// AnyAllowed reports, from the cache, whether some relay is closed or
// has a probe to claim. When it is false the worker should pause
// consumption and wait on Changed.
func (b *Breakers) AnyAllowed() bool {
	now := b.policy.NowFunc()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.entries {
		if allowable(e.c, now) {
			return true
		}
	}
	return false
}

// NextProbeAt returns the earliest time a circuit that refuses sends now may
// be probed: the end of an open circuit's cooldown, or the deadline of
// another worker's half-open probe. ok is false when no circuit waits.
func (b *Breakers) NextProbeAt() (at time.Time, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.entries {
		var t time.Time
		switch e.c.State {
		case Open:
			t = e.c.OpenUntil
		case HalfOpen:
			t = e.c.ProbeUntil
		default:
			continue
		}
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	return at, ok
}

// Changed returns a channel that is closed at the next change of the cached
// state: a refresh or write that changed a row, or (while Run runs) a
// cooldown or probe deadline that passed. Take the channel before checking
// AnyAllowed, then wait on it, and no change is missed:
//
//	ch := b.Changed()
//	if !b.AnyAllowed() { <-ch }
func (b *Breakers) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}
