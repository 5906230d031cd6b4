package delivery

import (
	"context"
	"sync"
	"time"

	"github.com/postline/postline/internal/adaptive"
)

// Provider is one SMTP relay. Providers are tried in the order given.
type Provider struct {
	Name string
	// NewSession opens a session (one SMTP connection) on the relay.
	NewSession func() Session
	// MaxConns caps the relay's open connections; 0 means one per sending
	// goroutine (Config.Senders).
	MaxConns int
	// FleetRate is the relay's rate for the whole fleet in sends per
	// second, shared over the consumer group's live members; 0 means none.
	// Used only when Config.SendControl is set.
	FleetRate float64
}

// relayPool holds a relay's sessions and decides when a send may start: at
// most size sessions, and with a send control, no more sends in flight than
// its concurrency limit and no faster than its rates. Sessions are opened on
// first use and kept; sessions beyond the limit are closed when they come
// back, so a relay that refuses connections sees fewer of them.
type relayPool struct {
	Provider
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
}

func newRelayPool(p Provider, senders int, control *adaptive.SendControl, nowFunc func() time.Time) *relayPool {
	size := senders
	if p.MaxConns > 0 {
		size = min(p.MaxConns, senders)
	}
	return &relayPool{Provider: p, size: size, control: control, nowFunc: nowFunc, changed: make(chan struct{})}
}

// limit is how many sessions may be in use now; rp.mu is held.
func (rp *relayPool) limit() int {
	if rp.control == nil {
		return rp.size
	}
	return min(rp.size, rp.control.Limit())
}

// acquire waits until a send may start and returns a session for it. It
// waits while the relay's sessions are all busy or
// its send control holds the send back: a busy primary is not a reason to
// fail over to a backup relay.
func (rp *relayPool) acquire(ctx context.Context) (Session, bool) {
	for {
		rp.mu.Lock()
		closing := rp.trimLocked()
		now := rp.nowFunc()
		var retryAt time.Time
		ok := rp.inUse < rp.size
		if ok && rp.control != nil {
			ok, retryAt = rp.control.Admit(now, rp.inUse)
		}
		if ok {
			rp.inUse++
			var s Session
			if n := len(rp.idle); n > 0 {
				s, rp.idle = rp.idle[n-1], rp.idle[:n-1]
			}
			rp.mu.Unlock()
			closeAll(closing)
			if s == nil {
				s = rp.NewSession()
			}
			return s, true
		}
		changed := rp.changed
		rp.waiting++
		rp.mu.Unlock()
		closeAll(closing)
		woke := rp.wait(ctx, changed, retryAt, now)
		rp.mu.Lock()
		rp.waiting--
		rp.mu.Unlock()
		if !woke {
			return nil, false
		}
	}
}

// wait waits until changed is closed or, when retryAt is set, until then;
// it reports false when ctx ended first.
func (rp *relayPool) wait(ctx context.Context, changed <-chan struct{}, retryAt, now time.Time) bool {
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

// release takes back a session after a send; the session is closed when
// the relay is past its concurrency limit.
func (rp *relayPool) release(s Session) {
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
