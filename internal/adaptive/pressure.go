package adaptive

import (
	"cmp"
	"fmt"
	"math"
	"sync"
	"time"
)

// Defaults of PressureConfig.
const (
	DefaultGCPauseHigh      = 50 * time.Millisecond
	DefaultSchedLatencyHigh = 50 * time.Millisecond
	DefaultPressureLow      = 0.5
	DefaultPressureFloor    = 0.1
	DefaultPressureStep     = 0.1
)

// PressureConfig configures a PressureGuard.
type PressureConfig struct {
	// GCPauseHigh is the p99 GC pause at which the guard cuts concurrency.
	// Defaults to 50ms.
	GCPauseHigh time.Duration
	// SchedLatencyHigh is the p99 scheduler latency at which the guard cuts
	// concurrency. Defaults to 50ms: on a busy two-core machine shared with
	// Kafka and PostgreSQL a healthy worker's p99 reaches 5-20ms, and a
	// lower mark cut its concurrency to an eighth under an ordinary burst
	// (measured); 50ms means goroutines are starved, not merely queued.
	SchedLatencyHigh time.Duration
	// Low is the share of the high marks both readings must be under
	// before the guard restores concurrency (the hysteresis band). Defaults
	// to 0.5.
	Low float64
	// Floor is the lowest factor. Defaults to 0.1.
	Floor float64
	// Step is how much the factor grows per calm reading. Defaults to 0.1.
	Step float64
}

// WithDefaults fills zero fields with their defaults.
func (c PressureConfig) WithDefaults() PressureConfig {
	c.GCPauseHigh = cmp.Or(c.GCPauseHigh, DefaultGCPauseHigh)
	c.SchedLatencyHigh = cmp.Or(c.SchedLatencyHigh, DefaultSchedLatencyHigh)
	c.Low = cmp.Or(c.Low, DefaultPressureLow)
	c.Floor = cmp.Or(c.Floor, DefaultPressureFloor)
	c.Step = cmp.Or(c.Step, DefaultPressureStep)
	return c
}

// Validate reports a field that is out of range.
func (c PressureConfig) Validate() error {
	switch {
	case c.GCPauseHigh <= 0 || c.SchedLatencyHigh <= 0:
		return fmt.Errorf("adaptive: PressureConfig high marks %v, %v must be positive", c.GCPauseHigh, c.SchedLatencyHigh)
	case c.Low <= 0 || c.Low >= 1:
		return fmt.Errorf("adaptive: PressureConfig.Low %v must be in (0,1)", c.Low)
	case c.Floor <= 0 || c.Floor > 1:
		return fmt.Errorf("adaptive: PressureConfig.Floor %v must be in (0,1]", c.Floor)
	case c.Step <= 0 || c.Step > 1:
		return fmt.Errorf("adaptive: PressureConfig.Step %v must be in (0,1]", c.Step)
	}
	return nil
}

// PressureGuard turns Go runtime pressure into a concurrency factor in
// [Floor, 1]: a reading above either high mark halves the factor; only
// readings with both values under Low times their marks raise it again, by
// Step, so the factor does not flap around one threshold. Readings in
// between keep it.
type PressureGuard struct {
	mu     sync.Mutex
	cfg    PressureConfig
	factor float64
}

// NewPressureGuard returns a guard at factor 1.
func NewPressureGuard(cfg PressureConfig) (*PressureGuard, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &PressureGuard{cfg: cfg, factor: 1}, nil
}

// Observe takes one reading (p99 GC pause and p99 scheduler latency, from
// runtime/metrics /gc/pauses:seconds and /sched/latencies:seconds) and
// returns the new factor.
func (g *PressureGuard) Observe(gcPauseP99, schedLatencyP99 time.Duration) float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.cfg
	switch {
	case gcPauseP99 >= c.GCPauseHigh || schedLatencyP99 >= c.SchedLatencyHigh:
		g.factor = math.Max(c.Floor, g.factor/2)
	case float64(gcPauseP99) < c.Low*float64(c.GCPauseHigh) && float64(schedLatencyP99) < c.Low*float64(c.SchedLatencyHigh):
		g.factor = math.Min(1, g.factor+c.Step)
		if g.factor > 1-1e-9 {
			g.factor = 1 // steps of 0.1 do not sum to exactly 1
		}
	}
	return g.factor
}

// Factor returns the current factor.
func (g *PressureGuard) Factor() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.factor
}

// Apply scales a concurrency limit by the factor, never below 1.
func (g *PressureGuard) Apply(limit int) int {
	return max(1, int(math.Floor(float64(limit)*g.Factor())))
}
