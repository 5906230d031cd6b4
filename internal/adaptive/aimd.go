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
}

// WithDefaults fills zero fields with their defaults.
func (c AIMDConfig) WithDefaults() AIMDConfig {
	c.Min = cmp.Or(c.Min, DefaultAIMDMin)
	c.Max = cmp.Or(c.Max, DefaultAIMDMax)
	c.Initial = cmp.Or(c.Initial, min(DefaultAIMDInitial, c.Max))
	c.Factor = cmp.Or(c.Factor, DefaultAIMDFactor)
	c.Interval = cmp.Or(c.Interval, DefaultAIMDInterval)
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
	}
	return nil
}

// AIMD is the send concurrency for one provider: each success adds
// 1/Limit() (about one per round of sends, as TCP's congestion window), each
// throttling multiplies it by Factor, at most once per Interval, within
// [Min, Max].
type AIMD struct {
	mu       sync.Mutex
	cfg      AIMDConfig
	limit    float64
	lastDrop time.Time
	dropped  bool
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

// OnSuccess records an accepted send.
func (a *AIMD) OnSuccess(time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.limit = math.Min(float64(a.cfg.Max), a.limit+1/math.Max(math.Floor(a.limit+1e-9), 1))
}

// OnThrottle records a send the provider refused for load, and reports
// whether the limit was decreased (false within Interval of the last one).
func (a *AIMD) OnThrottle(now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dropped && now.Sub(a.lastDrop) < a.cfg.Interval {
		return false
	}
	a.limit = math.Max(float64(a.cfg.Min), math.Floor(a.limit*a.cfg.Factor))
	a.lastDrop, a.dropped = now, true
	return true
}
