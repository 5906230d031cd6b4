package delivery

import (
	"cmp"
	"context"
	"math"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/postline/postline/internal/adaptive"
)

// Relay is one SMTP relay. Relays are given in priority order.
type Relay struct {
	Name string
	// Priority orders relays for failover: lower is preferred. Relays of
	// one priority share the load (see acquireAny); the next priority is
	// used only while every relay of this one is unavailable (its circuit
	// open, or refusing our credentials).
	Priority int
	// NewSession opens a session (one SMTP connection) on the relay.
	NewSession func() Session
	// MaxConns caps the relay's open connections; 0 means one per sending
	// goroutine (Config.Senders).
	MaxConns int
	// FleetRate is the relay's rate for the whole fleet in sends per
	// second, shared over the consumer group's members that have mail to
	// send; 0 means none.
	// Used only when Config.SendControl is set.
	FleetRate float64
}

// relayPool holds a relay's sessions and decides when a send may start: at
// most size sessions, and with a send control, no more sends in flight than
// its concurrency limit and no faster than its rates. Sessions are opened on
// first use and kept; sessions beyond the limit are closed when they come
// back, so a relay that refuses connections sees fewer of them.
type relayPool struct {
	Relay
	size    int
	control *adaptive.SendControl // nil: size sessions, no pacing
	nowFunc func() time.Time

	mu      sync.Mutex
	idle    []Session
	inUse   int
	changed chan struct{} // closed and replaced when a send ends while senders wait
	waiting int           // senders waiting on changed
	// cooldownUntil is when the relay last said it takes mail again (its
	// latest throttle's retry hint).
	cooldownUntil time.Time
	lastCut       Cut
}

func newRelayPool(p Relay, senders int, control *adaptive.SendControl, nowFunc func() time.Time) *relayPool {
	size := senders
	if p.MaxConns > 0 {
		size = min(p.MaxConns, senders)
	}
	return &relayPool{Relay: p, size: size, control: control, nowFunc: nowFunc, changed: make(chan struct{})}
}

// limit is how many sessions may be in use now; rp.mu is held.
func (rp *relayPool) limit() int {
	if rp.control == nil {
		return rp.size
	}
	return min(rp.size, rp.control.Limit())
}

// acquire waits until a send may start and returns a session for it. It
// waits while the relay's sessions are all busy or its send control holds
// the send back: a busy primary is not a reason to fail over to a backup
// relay.
func (rp *relayPool) acquire(ctx context.Context) (Session, bool) {
	s, _, ok := acquireAny(ctx, []*relayPool{rp})
	return s, ok
}

// attempt is one try at starting a send on a relay without waiting.
type attempt struct {
	session Session // the session to send on, when ok
	ok      bool
	// retryAt is when the send control next lets a send through; zero when
	// only a finishing send (changed) can.
	retryAt time.Time
	changed <-chan struct{} // closed when a send on the relay ends
}

// try starts a send if one may start now. When it may not, the caller
// must call stopWaiting once it has waited on the returned changed.
func (rp *relayPool) try() attempt {
	rp.mu.Lock()
	closing := rp.trimLocked()
	now := rp.nowFunc()
	var a attempt
	a.ok = rp.inUse < rp.size
	if a.ok && rp.control != nil {
		a.ok, a.retryAt = rp.control.Admit(now, rp.inUse)
	}
	if a.ok {
		rp.inUse++
		if n := len(rp.idle); n > 0 {
			a.session, rp.idle = rp.idle[n-1], rp.idle[:n-1]
		}
		rp.mu.Unlock()
		closeAll(closing)
		if a.session == nil {
			a.session = rp.NewSession()
		}
		return a
	}
	a.changed = rp.changed
	rp.waiting++
	rp.mu.Unlock()
	closeAll(closing)
	return a
}

func (rp *relayPool) stopWaiting() {
	rp.mu.Lock()
	rp.waiting--
	rp.mu.Unlock()
}

// headroom is how many more sends the relay's limits let in flight now:
// the tie-break between relays of one priority.
func (rp *relayPool) headroom() int {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.limit() - rp.inUse
}

// rankedPool is a relay and its headroom when acquireAny ranked it.
type rankedPool struct {
	pool *relayPool
	room int
}

// acquireAny waits until a send may start on one of pools, relays of one
// priority, and returns that relay and a session on it. Relays that may
// take a send now are tried in order of most headroom, so relays of one
// priority share the load by what each takes: a relay that paces or
// narrows its concurrency gets fewer sends, and none is left idle while
// another holds sends back.
func acquireAny(ctx context.Context, pools []*relayPool) (Session, *relayPool, bool) {
	order := pools
	if len(pools) > 1 {
		order = slices.Clone(pools) // sorted by headroom below; the caller's order stays
	}
	for {
		if len(order) > 1 {
			// Each headroom is read once, into a slice rather than a map:
			// this runs for every send.
			var buf [8]rankedPool
			ranked := buf[:0]
			for _, rp := range order {
				ranked = append(ranked, rankedPool{rp, rp.headroom()})
			}
			slices.SortStableFunc(ranked, func(a, b rankedPool) int { return cmp.Compare(b.room, a.room) })
			for i, r := range ranked {
				order[i] = r.pool
			}
		}
		var (
			waits   []*relayPool
			changed []<-chan struct{}
			retryAt time.Time
		)
		for _, rp := range order {
			a := rp.try()
			if a.ok {
				for _, w := range waits {
					w.stopWaiting()
				}
				return a.session, rp, true
			}
			waits = append(waits, rp)
			changed = append(changed, a.changed)
			if !a.retryAt.IsZero() && (retryAt.IsZero() || a.retryAt.Before(retryAt)) {
				retryAt = a.retryAt
			}
		}
		woke := waitAny(ctx, changed, retryAt, order[0].nowFunc())
		for _, w := range waits {
			w.stopWaiting()
		}
		if !woke {
			return nil, nil, false
		}
	}
}

// waitAny waits until one of changed is closed or, when retryAt is set,
// until then; it reports false when ctx ended first.
func waitAny(ctx context.Context, changed []<-chan struct{}, retryAt, now time.Time) bool {
	if len(changed) == 1 {
		return waitOne(ctx, changed[0], retryAt, now)
	}
	cases := make([]reflect.SelectCase, 0, len(changed)+2)
	for _, c := range changed {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)})
	}
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	if !retryAt.IsZero() {
		t := time.NewTimer(retryAt.Sub(now))
		defer t.Stop()
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C)})
	}
	chosen, _, _ := reflect.Select(cases)
	return chosen != len(changed)
}

// waitOne waits until changed is closed or, when retryAt is set, until
// then; it reports false when ctx ended first.
func waitOne(ctx context.Context, changed <-chan struct{}, retryAt, now time.Time) bool {
	var timer <-chan time.Time
	if !retryAt.IsZero() {
		t := time.NewTimer(retryAt.Sub(now))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-changed:
	case <-timer:
	case <-ctx.Done():
		return false
	}
	return true
}

// admitNext decides whether a session in use may carry one more send
// straight after its current one, as if it were put back and acquired
// again: the relay's concurrency limit and rates apply as to any send, and
// a sender waiting for one of the relay's sessions goes first.
func (rp *relayPool) admitNext() bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.waiting > 0 {
		return false
	}
	if rp.control == nil {
		return true
	}
	ok, _ := rp.control.Admit(rp.nowFunc(), rp.inUse-1)
	return ok
}

// putBack takes back a session after a send; the session is closed when
// the relay is past its concurrency limit.
func (rp *relayPool) putBack(s Session) {
	rp.mu.Lock()
	rp.inUse--
	rp.idle = append(rp.idle, s)
	closing := rp.trimLocked()
	if rp.waiting > 0 {
		close(rp.changed)
		rp.changed = make(chan struct{})
	}
	rp.mu.Unlock()
	closeAll(closing)
}

// discard takes back a session that must not be reused (a send panicked
// in it) and closes it.
func (rp *relayPool) discard(s Session) {
	rp.mu.Lock()
	rp.inUse--
	if rp.waiting > 0 {
		close(rp.changed)
		rp.changed = make(chan struct{})
	}
	rp.mu.Unlock()
	closeAll([]Session{s})
}

// trimLocked removes idle sessions beyond the limit and returns them to be
// closed outside the lock; rp.mu is held.
func (rp *relayPool) trimLocked() []Session {
	excess := rp.inUse + len(rp.idle) - rp.limit()
	if excess <= 0 || len(rp.idle) == 0 {
		return nil
	}
	excess = min(excess, len(rp.idle))
	// The oldest idle sessions go first: the newest were used last.
	closing := append([]Session(nil), rp.idle[:excess]...)
	rp.idle = append(rp.idle[:0], rp.idle[excess:]...)
	return closing
}

func closeAll(sessions []Session) {
	for _, s := range sessions {
		_ = s.Close() // an idle connection past the limit; nothing to report
	}
}

// throttled records a throttle reply at now with the relay's retry hint.
func (rp *relayPool) throttled(now time.Time, hint time.Duration) {
	if hint <= 0 {
		return
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if until := now.Add(hint); until.After(rp.cooldownUntil) {
		rp.cooldownUntil = until
	}
}

// cooldown returns when the relay said it takes mail again.
func (rp *relayPool) cooldown() time.Time {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.cooldownUntil
}

// close closes every idle session; no send may be in progress.
func (rp *relayPool) close() []error {
	rp.mu.Lock()
	idle := rp.idle
	rp.idle = nil
	rp.mu.Unlock()
	var errs []error
	for _, s := range idle {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// noteCut records the send control's latest cut.
func (rp *relayPool) noteCut(c Cut) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	rp.lastCut = c
}

// state is the relay's RelayState.
func (rp *relayPool) state() RelayState {
	rp.mu.Lock()
	st := RelayState{Relay: rp.Name, Priority: rp.Priority, InFlight: rp.inUse, Limit: rp.limit(),
		Rate: math.Inf(1), FleetShare: math.Inf(1), Members: 1, LastCut: rp.lastCut}
	rp.mu.Unlock()
	if c := rp.control; c != nil {
		st.Rate, st.FleetShare, st.Members = c.Rate(), c.FleetShare(), c.Members()
		st.ConcurrencyCuts, st.RateCuts = c.Decreases(adaptive.ControllerConcurrency), c.Decreases(adaptive.ControllerRate)
	}
	return st
}
