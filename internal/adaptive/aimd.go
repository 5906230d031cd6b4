package adaptive

import (
	"cmp"
	"fmt"
	"math"
	"sync"
	"time"
)

// Defaults of AIMDConfig.
const (
	DefaultAIMDMin      = 1
	DefaultAIMDMax      = 20
	DefaultAIMDInitial  = 4
	DefaultAIMDFactor   = 0.5
	DefaultAIMDInterval = time.Second
	DefaultAIMDProbe    = 0.1
)

// AIMDConfig configures an AIMD limit.
type AIMDConfig struct {
	// Min is the lowest limit. Defaults to 1.
	Min int
	// Max is the highest limit. Defaults to 20.
	Max int
	// Initial is the starting limit. Defaults to 4.
	Initial int
	// Factor multiplies the limit on throttling, in (0,1). Defaults to 0.5.
	Factor float64
	// Interval is the shortest time between two decreases: the rejections
	// of one burst of sends count once. Defaults to 1s.
	Interval time.Duration
	// Probe scales the additive increase within one step of the limit at
	// which the relay last throttled, in (0,1]: the limit climbs
	// back quickly after a decrease, then probes the known ceiling slowly
	// (as TCP BIC/CUBIC plateau near their last maximum), so a relay
	// with a fixed connection cap is not refused every few sends. 1
	// disables the plateau. Defaults to 0.1.
	Probe float64
}

// WithDefaults fills zero fields with their defaults.
func (c AIMDConfig) WithDefaults() AIMDConfig {
	c.Min = cmp.Or(c.Min, DefaultAIMDMin)
	c.Max = cmp.Or(c.Max, DefaultAIMDMax)
	c.Initial = cmp.Or(c.Initial, min(DefaultAIMDInitial, c.Max))
	c.Factor = cmp.Or(c.Factor, DefaultAIMDFactor)
	c.Interval = cmp.Or(c.Interval, DefaultAIMDInterval)
	c.Probe = cmp.Or(c.Probe, DefaultAIMDProbe)
	return c
}

// Validate reports a field that is out of range.
func (c AIMDConfig) Validate() error {
	switch {
	case c.Min < 1:
		return fmt.Errorf("adaptive: AIMDConfig.Min %d must be at least 1", c.Min)
	case c.Max < c.Min:
		return fmt.Errorf("adaptive: AIMDConfig.Max %d must be at least Min %d", c.Max, c.Min)
	case c.Initial < c.Min || c.Initial > c.Max:
		return fmt.Errorf("adaptive: AIMDConfig.Initial %d must be within [%d, %d]", c.Initial, c.Min, c.Max)
	case c.Factor <= 0 || c.Factor >= 1:
		return fmt.Errorf("adaptive: AIMDConfig.Factor %v must be in (0,1)", c.Factor)
	case c.Interval < 0:
		return fmt.Errorf("adaptive: AIMDConfig.Interval %v must not be negative", c.Interval)
	case !(c.Probe > 0 && c.Probe <= 1):
		return fmt.Errorf("adaptive: AIMDConfig.Probe %v must be in (0,1]", c.Probe)
	}
	return nil
}

// AIMD is the send concurrency for one relay: each success adds
// 1/Limit() (about one per round of sends, as TCP's congestion window), or
// Probe/Limit() within one step either side of the limit at the last
// decrease; each
// throttling multiplies it by Factor, at most once per Interval, within
// [Min, Max].
type AIMD struct {
	mu      sync.Mutex
	cfg     AIMDConfig
	limit   float64
	cut     lastCut
	ceiling float64 // the limit at the last decrease; 0 = none known
	blocked time.Time
}

// NewAIMD returns a limit at cfg.Initial.
func NewAIMD(cfg AIMDConfig) (*AIMD, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &AIMD{cfg: cfg, limit: float64(cfg.Initial)}, nil
}

// Limit returns how many sends may be in flight now.
func (a *AIMD) Limit() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int(math.Floor(a.limit + 1e-9))
}

// Blocked records that a send waited at now because Limit() were in
// flight. The limit grows only while it holds sends back: successes at a
// limit that is not reached do not show the relay would take more.
func (a *AIMD) Blocked(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.blocked = now
}

// OnSuccess records an accepted send. It raises the limit only when a send
// was Blocked within the last max(Interval, 1s).
func (a *AIMD) OnSuccess(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.blocked.IsZero() || now.Sub(a.blocked) > max(a.cfg.Interval, time.Second) {
		return
	}
	step := 1 / math.Max(math.Floor(a.limit+1e-9), 1)
	switch {
	case a.ceiling > 0 && a.limit >= a.ceiling+1:
		a.ceiling = 0 // probed past it without a throttle: forget it
	case a.ceiling > 0 && a.limit+1 > a.ceiling:
		step *= a.cfg.Probe
	}
	a.limit = math.Min(float64(a.cfg.Max), a.limit+step)
}

// OnThrottle records a send the relay refused for load, and reports
// whether the limit was decreased (false within Interval of the last one).
// Callers that know when the refused send started should use
// OnThrottleSent.
func (a *AIMD) OnThrottle(now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cut.within(now, a.cfg.Interval) {
		return false
	}
	a.decrease(now)
	return true
}

// OnThrottleSent records a refused send that started at sent, and reports
// whether the limit was decreased. A send that started before the last
// decrease belongs to the round that decrease already answered and is
// ignored; one that started after it shows the decrease was not enough, so
// it decreases again however soon (Interval plays no part). This follows
// the cause rather than a timer, so a fast refusal (421 at the greeting)
// cannot repeat for a whole Interval while the limit climbs back.
func (a *AIMD) OnThrottleSent(now, sent time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cut.answered(sent) {
		return false
	}
	a.decrease(now)
	return true
}

func (a *AIMD) decrease(now time.Time) {
	a.ceiling = math.Floor(a.limit + 1e-9)
	a.limit = math.Max(float64(a.cfg.Min), math.Floor(a.limit*a.cfg.Factor))
	a.cut.mark(now)
}
