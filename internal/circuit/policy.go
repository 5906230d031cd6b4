package circuit

import (
	"cmp"
	"time"

	"github.com/postline/postline/internal/configerr"
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
	DefaultWindow           = 10 * time.Second
	DefaultSuccessFloor     = 0.05
	DefaultFlushInterval    = time.Second
)

// Policy sets when circuits open and for how long. Every replica of a fleet
// should use the same Policy: the shared row records the cooldown, but the
// thresholds and multipliers are applied by whichever replica reports.
type Policy struct {
	// FailureThreshold is the number of relay faults, counted over the
	// whole fleet within Window, that opens a closed circuit, provided the
	// successes counted in that window are below SuccessFloor of all the
	// sends counted: a relay still accepting mail is never opened, however
	// many faults some worker meets. Throttle replies are never counted. An
	// auth failure opens at once. Defaults to 5.
	FailureThreshold int
	// Window is how long a counting window runs from the fault that began
	// it; the next fault after it begins a new one. Defaults to 10s.
	Window time.Duration
	// SuccessFloor is the share of successes, among the sends counted in a
	// window, below which FailureThreshold faults open the circuit: the
	// relay refuses (nearly) everything. In (0, 1]; defaults to 0.05.
	SuccessFloor float64
	// FlushInterval is how often at most a worker writes the successes it
	// batched while a window runs (its faults carry them at once). Outside
	// a window a success writes nothing. Defaults to 1s.
	FlushInterval time.Duration
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
	p.Window = cmp.Or(p.Window, DefaultWindow)
	p.SuccessFloor = cmp.Or(p.SuccessFloor, DefaultSuccessFloor)
	p.FlushInterval = cmp.Or(p.FlushInterval, DefaultFlushInterval)
	if p.NowFunc == nil {
		p.NowFunc = time.Now
	}
	return p
}

// Validate reports the first field of p that is out of range.
func (p Policy) Validate() error {
	switch {
	case p.FailureThreshold < 1:
		return configerr.Errorf("FailureThreshold", "circuit policy: FailureThreshold %d: must be at least 1", p.FailureThreshold)
	case p.BaseCooldown < time.Millisecond:
		return configerr.Errorf("BaseCooldown", "circuit policy: BaseCooldown %v: must be at least 1ms", p.BaseCooldown)
	case p.MaxCooldown < p.BaseCooldown:
		return configerr.Errorf("MaxCooldown", "circuit policy: MaxCooldown %v: must be at least BaseCooldown %v", p.MaxCooldown, p.BaseCooldown)
	case p.Growth < 1:
		return configerr.Errorf("Growth", "circuit policy: Growth %d: must be at least 1", p.Growth)
	case p.TimeoutGrowth < 1:
		return configerr.Errorf("TimeoutGrowth", "circuit policy: TimeoutGrowth %d: must be at least 1", p.TimeoutGrowth)
	case p.ProbeTimeout < time.Millisecond:
		return configerr.Errorf("ProbeTimeout", "circuit policy: ProbeTimeout %v: must be at least 1ms", p.ProbeTimeout)
	case p.RefreshInterval < time.Millisecond:
		return configerr.Errorf("RefreshInterval", "circuit policy: RefreshInterval %v: must be at least 1ms", p.RefreshInterval)
	case p.Window < time.Millisecond:
		return configerr.Errorf("Window", "circuit policy: Window %v: must be at least 1ms", p.Window)
	case !(p.SuccessFloor > 0 && p.SuccessFloor <= 1):
		return configerr.Errorf("SuccessFloor", "circuit policy: SuccessFloor %v: must be in (0, 1]", p.SuccessFloor)
	case p.FlushInterval < time.Millisecond:
		return configerr.Errorf("FlushInterval", "circuit policy: FlushInterval %v: must be at least 1ms", p.FlushInterval)
	}
	return nil
}
