package circuit

import (
	"cmp"
	"fmt"
	"time"
)

// Policy defaults.
const (
	DefaultFailureThreshold = 5
	DefaultBaseCooldown     = 30 * time.Second
	DefaultMaxCooldown      = time.Hour
	DefaultGrowth           = 2
	DefaultTimeoutGrowth    = 4
	DefaultProbeTimeout     = 30 * time.Second
	DefaultRefreshInterval  = time.Second
)

// Policy sets when circuits open and for how long. Every replica of a fleet
// should use the same Policy: the shared row records the cooldown, but the
// thresholds and multipliers are applied by whichever replica reports.
type Policy struct {
	// FailureThreshold is the number of consecutive provider faults that
	// opens a closed circuit. An auth failure opens it at once. Defaults to 5.
	FailureThreshold int
	// BaseCooldown is how long a circuit stays open the first time it opens,
	// and again after a probe closed it. Defaults to 30s.
	BaseCooldown time.Duration
	// MaxCooldown caps the cooldown. Defaults to 1h.
	MaxCooldown time.Duration
	// Growth multiplies the cooldown when a probe fails. Defaults to 2.
	Growth int
	// TimeoutGrowth multiplies the cooldown when a probe fails with a
	// timeout, which costs a sender far longer than a refusal. Defaults to 4.
	TimeoutGrowth int
	// ProbeTimeout is how long a claimed probe may go unreported before
	// another worker may claim it. Defaults to 30s.
	ProbeTimeout time.Duration
	// RefreshInterval is how often the local cache is reloaded from the
	// table, which bounds how late a replica sees another's change. Defaults
	// to 1s.
	RefreshInterval time.Duration
	// NowFunc is the local clock for decisions taken from the cache (whether
	// a probe is worth claiming). Transitions written to the table use the
	// database clock. Defaults to time.Now.
	NowFunc func() time.Time
}

// WithDefaults returns p with zero fields set to their defaults.
func (p Policy) WithDefaults() Policy {
	p.FailureThreshold = cmp.Or(p.FailureThreshold, DefaultFailureThreshold)
	p.BaseCooldown = cmp.Or(p.BaseCooldown, DefaultBaseCooldown)
	p.MaxCooldown = cmp.Or(p.MaxCooldown, DefaultMaxCooldown)
	p.Growth = cmp.Or(p.Growth, DefaultGrowth)
	p.TimeoutGrowth = cmp.Or(p.TimeoutGrowth, DefaultTimeoutGrowth)
	p.ProbeTimeout = cmp.Or(p.ProbeTimeout, DefaultProbeTimeout)
	p.RefreshInterval = cmp.Or(p.RefreshInterval, DefaultRefreshInterval)
	if p.NowFunc == nil {
		p.NowFunc = time.Now
	}
	return p
}

// Validate reports the first field of p that is out of range.
func (p Policy) Validate() error {
	switch {
	case p.FailureThreshold < 1:
		return fmt.Errorf("circuit policy: FailureThreshold %d: must be at least 1", p.FailureThreshold)
	case p.BaseCooldown < time.Millisecond:
		return fmt.Errorf("circuit policy: BaseCooldown %v: must be at least 1ms", p.BaseCooldown)
	case p.MaxCooldown < p.BaseCooldown:
		return fmt.Errorf("circuit policy: MaxCooldown %v: must be at least BaseCooldown %v", p.MaxCooldown, p.BaseCooldown)
	case p.Growth < 1:
		return fmt.Errorf("circuit policy: Growth %d: must be at least 1", p.Growth)
	case p.TimeoutGrowth < 1:
		return fmt.Errorf("circuit policy: TimeoutGrowth %d: must be at least 1", p.TimeoutGrowth)
	case p.ProbeTimeout < time.Millisecond:
		return fmt.Errorf("circuit policy: ProbeTimeout %v: must be at least 1ms", p.ProbeTimeout)
	case p.RefreshInterval < time.Millisecond:
		return fmt.Errorf("circuit policy: RefreshInterval %v: must be at least 1ms", p.RefreshInterval)
	}
	return nil
}
