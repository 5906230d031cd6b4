package adaptive

import (
	"cmp"
	"fmt"
	"sync"
	"time"
)

// Defaults of WindowConfig.
const (
	DefaultWindowSpan    = 30 * time.Second
	DefaultWindowBuckets = 10
	DefaultMinSamples    = 20
)

// WindowConfig configures a Window.
type WindowConfig struct {
	// Span is the length of the window. Defaults to 30s.
	Span time.Duration
	// Buckets is how many buckets the span is cut into; older buckets drop
	// out whole. Defaults to 10.
	Buckets int
	// MinSamples is the fewest results for which a rate is computed; with
	// fewer the rate is 1. Defaults to 20.
	MinSamples int
}

// WithDefaults fills zero fields with their defaults.
func (c WindowConfig) WithDefaults() WindowConfig {
	c.Span = cmp.Or(c.Span, DefaultWindowSpan)
	c.Buckets = cmp.Or(c.Buckets, DefaultWindowBuckets)
	c.MinSamples = cmp.Or(c.MinSamples, DefaultMinSamples)
	return c
}

// Validate reports a field that is out of range.
func (c WindowConfig) Validate() error {
	switch {
	case c.Buckets < 1:
		return fmt.Errorf("adaptive: WindowConfig.Buckets %d must be at least 1", c.Buckets)
	case c.Span < time.Duration(c.Buckets):
		return fmt.Errorf("adaptive: WindowConfig.Span %v is too short for %d buckets", c.Span, c.Buckets)
	case c.MinSamples < 1:
		return fmt.Errorf("adaptive: WindowConfig.MinSamples %d must be at least 1", c.MinSamples)
	}
	return nil
}

// Window is a rolling success rate over the last Span, per relay and
// overall, kept in a ring of buckets. With fewer than MinSamples results in
// the window the rate is 1: a quiet relay is presumed healthy, so a
// single early failure does not stretch delays (optimistic by design; the
// circuit breaker, not this, handles a relay that is down).
type Window struct {
	mu      sync.Mutex
	cfg     WindowConfig
	width   time.Duration
	overall *ring
	relays  map[string]*ring
}

type bucket struct {
	slot     int64 // index of the bucket's interval since the epoch
	ok, fail int
}

type ring struct{ b []bucket }

// NewWindow returns an empty window.
func NewWindow(cfg WindowConfig) (*Window, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Window{
		cfg:     cfg,
		width:   cfg.Span / time.Duration(cfg.Buckets),
		overall: &ring{b: make([]bucket, cfg.Buckets)},
		relays:  map[string]*ring{},
	}, nil
}

// Observe records one result of a send to relay at now.
func (w *Window) Observe(now time.Time, relay string, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.relays[relay]
	if r == nil {
		r = &ring{b: make([]bucket, w.cfg.Buckets)}
		w.relays[relay] = r
	}
	slot := now.UnixNano() / int64(w.width)
	r.add(slot, ok)
	w.overall.add(slot, ok)
}

// Rate returns the success rate of relay over the window and the number
// of results it is based on; the rate is 1 below MinSamples results.
func (w *Window) Rate(now time.Time, relay string) (rate float64, samples int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rate(w.relays[relay], now)
}

// Overall returns the success rate over all relays, as Rate does.
func (w *Window) Overall(now time.Time) (rate float64, samples int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rate(w.overall, now)
}

func (w *Window) rate(r *ring, now time.Time) (float64, int) {
	if r == nil {
		return 1, 0
	}
	slot := now.UnixNano() / int64(w.width)
	ok, n := 0, 0
	for _, b := range r.b {
		if b.slot > slot-int64(len(r.b)) && b.slot <= slot {
			ok += b.ok
			n += b.ok + b.fail
		}
	}
	if n < w.cfg.MinSamples {
		return 1, n
	}
	return float64(ok) / float64(n), n
}

func (r *ring) add(slot int64, ok bool) {
	b := &r.b[int(((slot%int64(len(r.b)))+int64(len(r.b)))%int64(len(r.b)))]
	if b.slot != slot {
		*b = bucket{slot: slot}
	}
	if ok {
		b.ok++
	} else {
		b.fail++
	}
}
