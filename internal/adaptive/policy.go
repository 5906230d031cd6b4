package adaptive

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/postline/postline/internal/failure"
)

// Inputs is what a Policy knows when a send has failed.
type Inputs struct {
	// Class is the failure class of the attempt that failed.
	Class failure.Class
	// Attempt is the number of the attempt that failed, from 1.
	Attempt int
	// Throttles is how many of the attempts so far failed as throttled
	// (this one included). Adaptive grows its exponential delay only with
	// Attempt-Throttles, so waiting out a relay's cool-down does not make
	// the next real failure wait longer.
	Throttles int
	// RetryAfter is the relay's hint ("try again in 30 seconds"); 0 = none.
	RetryAfter time.Duration
	// Lag is the consumer lag of mail.jobs for the whole group, in records.
	Lag int64
	// SuccessRate is the rolling success rate in [0,1] (Window.Rate).
	SuccessRate float64
	// RelayCooldownUntil is when the relay said it takes mail again;
	// zero when it did not.
	RelayCooldownUntil time.Time
	// Now is the current time.
	Now time.Time
}

// Decision is what a Policy decides for a failed job.
type Decision struct {
	// Retry is false when the job must not be tried again on this relay.
	Retry bool
	// Delay is how long the job waits before its next attempt.
	Delay time.Duration
	// NotBefore is Now+Delay.
	NotBefore time.Time
	// Reason says which rule decided, for logs and metrics (low cardinality):
	// one of the Reason constants.
	Reason string
}

// The reasons a Decision carries.
const (
	ReasonPermanent = "permanent"        // never accepted: no retry
	ReasonFailover  = "failover"         // auth or relay policy: no retry on this relay
	ReasonThrottled = "throttled: wait"  // wait until the relay takes mail again
	ReasonFailed    = "failed: backoff"  // exponential backoff by attempt
	ReasonModel     = "reference: model" // the reference formula
)

// Policy decides how long a failed job waits. Implementations are pure;
// see the package comment for their concurrency contract.
type Policy interface {
	// Decide returns the decision for one failure.
	Decide(in Inputs) Decision
}

var (
	_ Policy = (*Uniform)(nil)
	_ Policy = (*Reference)(nil)
	_ Policy = (*Adaptive)(nil)
)

func decide(in Inputs, d time.Duration, reason string) Decision {
	d = max(d, 0)
	return Decision{Retry: true, Delay: d, NotBefore: in.Now.Add(d), Reason: reason}
}

func noRetry(in Inputs, reason string) Decision {
	return Decision{NotBefore: in.Now, Reason: reason}
}

func float64Func(f func() float64) func() float64 {
	if f == nil {
		return rand.Float64
	}
	return f
}

// Uniform is the baseline: cenkalti/backoff v5's ExponentialBackOff with its
// defaults (500ms initial, factor 1.5, 60s cap, ±50% randomisation), the
// n-th interval for attempt n, blind to the failure class (it retries even
// permanent failures) and to load.
type Uniform struct {
	// Float64Func returns a number in [0,1) for the randomisation. Defaults
	// to math/rand/v2's Float64.
	Float64Func func() float64
}

// Decide implements Policy.
func (u *Uniform) Decide(in Inputs) Decision {
	// backoff's NextBackOff draws from the global source; take its
	// un-randomised interval sequence and randomise with ours, exactly as
	// backoff does, so a seeded run is deterministic.
	b := backoff.NewExponentialBackOff()
	b.RandomizationFactor = 0
	var iv time.Duration
	for range max(in.Attempt, 1) {
		iv = b.NextBackOff()
	}
	delta := backoff.DefaultRandomizationFactor * float64(iv)
	lo, hi := float64(iv)-delta, float64(iv)+delta
	d := time.Duration(lo + float64Func(u.Float64Func)()*(hi-lo+1))
	return decide(in, d, ReasonFailed)
}

// Defaults of Reference.
const (
	DefaultReferenceBase = time.Second
	DefaultReferenceCap  = 10 * time.Minute
)

// Reference is the design brief's model, implemented as is:
//
//	delay = base * max(0.5, log2(lag+1)) / max(0.1, success_rate)^2
//
// capped at Cap, then equal jitter (a uniform draw in [delay/2, delay]). It
// is blind to the class except that permanent failures are not retried.
type Reference struct {
	// Base is the formula's base. Defaults to 1s.
	Base time.Duration
	// Cap bounds the delay before jitter. Defaults to 10m.
	Cap time.Duration
	// Float64Func returns a number in [0,1) for the jitter. Defaults to
	// math/rand/v2's Float64.
	Float64Func func() float64
}

// Decide implements Policy.
func (r *Reference) Decide(in Inputs) Decision {
	if in.Class == failure.Permanent {
		return noRetry(in, ReasonPermanent)
	}
	base := cmp.Or(r.Base, DefaultReferenceBase)
	maxDelay := cmp.Or(r.Cap, DefaultReferenceCap)
	sr := math.Max(0.1, clamp01(in.SuccessRate))
	f := math.Max(0.5, math.Log2(float64(max(in.Lag, 0))+1)) / (sr * sr)
	d := min(time.Duration(float64(base)*f), maxDelay)
	j := float64Func(r.Float64Func)()
	return decide(in, d/2+time.Duration(j*float64(d/2)), ReasonModel)
}

// Defaults of AdaptiveConfig.
const (
	DefaultTransientBase    = time.Second
	DefaultTransientCap     = 5 * time.Minute
	DefaultThrottleWait     = 5 * time.Second
	DefaultMaxLagFactor     = 2.0
	DefaultMaxSuccessFactor = 2.0
	DefaultLagScale         = 20.0
)

// AdaptiveConfig configures Adaptive.
type AdaptiveConfig struct {
	// TransientBase is the first ceiling of the full-jitter backoff for
	// transient failures. Defaults to 1s.
	TransientBase time.Duration
	// TransientCap bounds the transient ceiling. Defaults to 5m.
	TransientCap time.Duration
	// ThrottleWait is how long a throttled job waits when the relay gave no
	// hint and no cool-down is known. Defaults to 5s.
	ThrottleWait time.Duration
	// ThrottleSpread is the largest random spread added to a throttled
	// wait, so jobs handed back by one cool-down do not return at one instant.
	// Defaults to 0: in the worker the delay is rounded up to a tier and
	// the retry-scheduler spreads each tier's re-injections, and a spread
	// here would push a hint that equals a tier into the next one.
	ThrottleSpread time.Duration
	// MaxLagFactor bounds the lag multiplier, which grows from 1 with
	// log2(lag+1)/LagScale. Defaults to 2.
	MaxLagFactor float64
	// LagScale is log2(lag+1) at which the lag multiplier adds 1. Defaults
	// to 20.
	LagScale float64
	// MaxSuccessFactor bounds the success-rate multiplier 1/success_rate.
	// Defaults to 2.
	MaxSuccessFactor float64
	// Float64Func returns a number in [0,1) for jitter. Defaults to
	// math/rand/v2's Float64.
	Float64Func func() float64
}

// WithDefaults fills zero fields with their defaults.
func (c AdaptiveConfig) WithDefaults() AdaptiveConfig {
	c.TransientBase = cmp.Or(c.TransientBase, DefaultTransientBase)
	c.TransientCap = cmp.Or(c.TransientCap, DefaultTransientCap)
	c.ThrottleWait = cmp.Or(c.ThrottleWait, DefaultThrottleWait)
	c.MaxLagFactor = cmp.Or(c.MaxLagFactor, DefaultMaxLagFactor)
	c.LagScale = cmp.Or(c.LagScale, DefaultLagScale)
	c.MaxSuccessFactor = cmp.Or(c.MaxSuccessFactor, DefaultMaxSuccessFactor)
	c.Float64Func = float64Func(c.Float64Func)
	return c
}

// Validate reports a field that is out of range.
func (c AdaptiveConfig) Validate() error {
	switch {
	case c.TransientBase <= 0:
		return fmt.Errorf("adaptive: TransientBase %v must be positive", c.TransientBase)
	case c.TransientCap < c.TransientBase:
		return fmt.Errorf("adaptive: TransientCap %v must be at least TransientBase %v", c.TransientCap, c.TransientBase)
	case c.ThrottleWait <= 0:
		return fmt.Errorf("adaptive: ThrottleWait %v must be positive", c.ThrottleWait)
	case c.ThrottleSpread < 0:
		return fmt.Errorf("adaptive: ThrottleSpread %v must not be negative", c.ThrottleSpread)
	case c.MaxLagFactor < 1:
		return fmt.Errorf("adaptive: MaxLagFactor %v must be at least 1", c.MaxLagFactor)
	case c.LagScale <= 0:
		return fmt.Errorf("adaptive: LagScale %v must be positive", c.LagScale)
	case c.MaxSuccessFactor < 1:
		return fmt.Errorf("adaptive: MaxSuccessFactor %v must be at least 1", c.MaxSuccessFactor)
	}
	return nil
}

// Adaptive is the project's policy. Its rules, by class:
//   - permanent: no retry (ReasonPermanent);
//   - auth: no retry on this relay (ReasonFailover: another relay may
//     take it);
//   - throttled: wait until max(Now+RetryAfter, RelayCooldownUntil), or
//     ThrottleWait scaled by the success multiplier when neither is known,
//     plus a random spread below ThrottleSpread; the attempt number plays
//     no part (ReasonThrottled);
//   - transient and unknown: full jitter, a uniform draw in [0, ceiling)
//     with ceiling = min(TransientCap, TransientBase*2^(n-1)) where n is
//     Attempt-Throttles, times the lag and success multipliers
//     (ReasonFailed).
//
// The lag multiplier is min(MaxLagFactor, 1+log2(lag+1)/LagScale) and the
// success multiplier min(MaxSuccessFactor, 1/success_rate): load stretches
// delays, but by a bounded factor, unlike the reference model's 100x.
type Adaptive struct {
	cfg AdaptiveConfig
}

// NewAdaptive returns the policy for cfg (zero fields take defaults).
func NewAdaptive(cfg AdaptiveConfig) (*Adaptive, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Adaptive{cfg: cfg}, nil
}

// Decide implements Policy.
func (a *Adaptive) Decide(in Inputs) Decision {
	c := a.cfg
	switch in.Class {
	case failure.Permanent:
		return noRetry(in, ReasonPermanent)
	case failure.Auth:
		return noRetry(in, ReasonFailover)
	case failure.Throttled:
		until := in.RelayCooldownUntil
		if in.RetryAfter > 0 {
			until = later(until, in.Now.Add(in.RetryAfter))
		}
		wait := until.Sub(in.Now)
		if wait <= 0 {
			wait = time.Duration(float64(c.ThrottleWait) * a.successFactor(in.SuccessRate))
		}
		wait += time.Duration(c.Float64Func() * float64(c.ThrottleSpread))
		return decide(in, wait, ReasonThrottled)
	default:
		n := max(in.Attempt-max(in.Throttles, 0), 1)
		ceiling := c.TransientCap
		if n-1 < 40 {
			ceiling = min(ceiling, c.TransientBase<<(n-1))
			if ceiling <= 0 { // overflow
				ceiling = c.TransientCap
			}
		}
		f := a.lagFactor(in.Lag) * a.successFactor(in.SuccessRate)
		d := time.Duration(c.Float64Func() * float64(ceiling) * f)
		return decide(in, d, ReasonFailed)
	}
}

func (a *Adaptive) lagFactor(lag int64) float64 {
	return math.Min(a.cfg.MaxLagFactor, 1+math.Log2(float64(max(lag, 0))+1)/a.cfg.LagScale)
}

func (a *Adaptive) successFactor(rate float64) float64 {
	r := clamp01(rate)
	if r == 0 {
		return a.cfg.MaxSuccessFactor
	}
	return math.Min(a.cfg.MaxSuccessFactor, 1/r)
}

func clamp01(v float64) float64 {
	if math.IsNaN(v) {
		return 1
	}
	return math.Min(1, math.Max(0, v))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
