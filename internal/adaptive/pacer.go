package adaptive

import (
	"cmp"
	"fmt"
	"math"
	"sync"
	"time"
)

// Defaults of PacerConfig.
const (
	DefaultPacerInitial  = 10.0
	DefaultPacerMin      = 1.0
	DefaultPacerMax      = 1000.0
	DefaultPacerIncrease = 0.5
	DefaultPacerProbe    = 0.01
	DefaultPacerFactor   = 0.7
	DefaultPacerInterval = time.Second
	DefaultPacerBurst    = 1
)

// PacerConfig configures a Pacer.
type PacerConfig struct {
	// Initial is the starting rate in sends per second. Defaults to 10.
	Initial float64
	// Min is the lowest rate. Defaults to 1.
	Min float64
	// Max is the highest rate. Defaults to 1000.
	Max float64
	// Increase is the least the rate gains per second of successes at the
	// current rate once the first throttle ended the slow start, in sends
	// per second (each success adds at least Increase/rate). Defaults to
	// 0.5.
	Increase float64
	// Probe is the share of the rate gained per second on the plateau just
	// under the rate of the last cut, where the pacer probes for more:
	// 0.01 is 0.5/s at 50/s (Increase) and 2/s at 200/s. Below the plateau
	// the pacer climbs back by half the distance per second, above the
	// ceiling the gain doubles every second up to a tenth of the rate (see
	// Pacer). Defaults to 0.01.
	Probe float64
	// Factor multiplies the rate on throttling, in (0,1). Defaults to 0.7.
	Factor float64
	// Interval is the shortest time between two decreases: the rejections
	// of one overshoot count once. Defaults to 1s.
	Interval time.Duration
	// Burst is how many sends may start back to back. Defaults to 1.
	Burst int
}

// WithDefaults fills zero fields with their defaults.
func (c PacerConfig) WithDefaults() PacerConfig {
	c.Initial = cmp.Or(c.Initial, DefaultPacerInitial)
	c.Min = cmp.Or(c.Min, DefaultPacerMin)
	c.Max = cmp.Or(c.Max, DefaultPacerMax)
	c.Increase = cmp.Or(c.Increase, DefaultPacerIncrease)
	c.Probe = cmp.Or(c.Probe, DefaultPacerProbe)
	c.Factor = cmp.Or(c.Factor, DefaultPacerFactor)
	c.Interval = cmp.Or(c.Interval, DefaultPacerInterval)
	c.Burst = cmp.Or(c.Burst, DefaultPacerBurst)
	return c
}

// Validate reports a field that is out of range.
func (c PacerConfig) Validate() error {
	switch {
	case !(c.Min > 0):
		return fmt.Errorf("adaptive: PacerConfig.Min %v must be positive", c.Min)
	case !(c.Max >= c.Min):
		return fmt.Errorf("adaptive: PacerConfig.Max %v must be at least Min %v", c.Max, c.Min)
	case !(c.Initial >= c.Min && c.Initial <= c.Max):
		return fmt.Errorf("adaptive: PacerConfig.Initial %v must be within [%v, %v]", c.Initial, c.Min, c.Max)
	case !(c.Increase > 0):
		return fmt.Errorf("adaptive: PacerConfig.Increase %v must be positive", c.Increase)
	case !(c.Probe > 0 && c.Probe < 1):
		return fmt.Errorf("adaptive: PacerConfig.Probe %v must be in (0,1)", c.Probe)
	case !(c.Factor > 0 && c.Factor < 1):
		return fmt.Errorf("adaptive: PacerConfig.Factor %v must be in (0,1)", c.Factor)
	case c.Interval < 0:
		return fmt.Errorf("adaptive: PacerConfig.Interval %v must not be negative", c.Interval)
	case c.Burst < 1:
		return fmt.Errorf("adaptive: PacerConfig.Burst %d must be at least 1", c.Burst)
	}
	return nil
}

// Pacer paces sends to one relay at a learned rate: a token bucket whose
// rate grows on success and shrinks on throttling, as TCP's congestion
// window does. It starts in slow start (each success adds 1/s, so the rate
// doubles every second) until the first throttle; each throttle multiplies
// the rate by Factor, at most once per Interval, and remembers the rate it
// cut from as the relay's ceiling. Growth after that has the shape of
// TCP CUBIC's window, so a short dip costs seconds, not minutes, while the
// pacer lingers just under the rate the relay last refused:
//   - below a plateau 5 % under the ceiling the rate climbs back by half
//     the remaining distance per second (a cut of 0.7 is 90 % recovered in
//     about 3 s);
//   - on the plateau it probes by Probe of itself per second (at least
//     Increase);
//   - above the ceiling the gain doubles every second, up to a tenth of
//     the rate per second, so a relay whose capacity came back (a drop
//     from 50/s to 10/s that ended) is found again in seconds rather than
//     at Increase per second, and one whose token bucket hides an
//     overshoot for a while is not met at twice its rate.
//
// Unlike a pause for the whole retry hint, the relay keeps receiving mail
// just below the rate it was last seen to take.
type Pacer struct {
	mu        sync.Mutex
	cfg       PacerConfig
	rate      float64
	ceiling   float64 // the rate of the last cut, before it; 0 before any
	tokens    float64
	last      time.Time
	cut       lastCut
	since     time.Time // when a slow start began: refusals of sends started before it were answered by the start
	decreases int
	limitedAt time.Time // when Next last made a send wait
	ignoredAt time.Time // when a slow start last ignored a refusal (OnThrottleAccepted)
}

// NewPacer returns a pacer at cfg.Initial with a full bucket at now.
func NewPacer(cfg PacerConfig, now time.Time) (*Pacer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Pacer{cfg: cfg, rate: cfg.Initial, tokens: float64(cfg.Burst), last: now}, nil
}

// refill adds the tokens earned since the last call; callers hold mu.
func (p *Pacer) refill(now time.Time) {
	if now.After(p.last) {
		p.tokens = math.Min(float64(p.cfg.Burst), p.tokens+now.Sub(p.last).Seconds()*p.rate)
		p.last = now
	}
}

// Next returns when the next send may start: now when a token is free.
// It takes nothing.
func (p *Pacer) Next(now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refill(now)
	if p.tokens >= 1 {
		return now
	}
	wait := time.Duration(math.Ceil((1 - p.tokens) / p.rate * float64(time.Second)))
	p.limitedAt = now
	return now.Add(wait)
}

// Take takes a token at now if one is free.
func (p *Pacer) Take(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refill(now)
	if p.tokens < 1 {
		return false
	}
	p.tokens--
	return true
}

// OnSuccess records an accepted send. The rate grows only while it is what
// holds sends back (Next made one wait within the last Interval, or the
// last second): a rate that is not used is not validated by successes.
func (p *Pacer) OnSuccess(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.limitedAt.IsZero() || now.Sub(p.limitedAt) > max(p.cfg.Interval, time.Second) {
		return
	}
	if !p.cut.set && !p.ignoredAt.IsZero() && now.Sub(p.ignoredAt) < p.cfg.Interval {
		return // a slow start waits for a second without refusals
	}
	p.refill(now)
	p.rate = math.Min(p.cfg.Max, p.rate+p.gain()/p.rate)
}

// gain is how many sends per second the rate gains over one second of
// successes at the current rate; callers hold mu.
func (p *Pacer) gain() float64 {
	if !p.cut.set {
		return p.rate // slow start: +1 per success
	}
	// Half the distance to the plateau below it; the probe on the
	// plateau, just under the ceiling, where the relay last said no;
	// above the ceiling the distance itself (doubling every second).
	probe := max(p.cfg.Increase, p.cfg.Probe*p.rate)
	plateau := p.ceiling * (1 - plateauWidth)
	switch {
	case p.rate < plateau:
		return max(probe, (plateau-p.rate)/2)
	case p.rate > p.ceiling:
		return max(probe, min(p.rate-p.ceiling, maxGainShare*p.rate))
	}
	return probe
}

// maxGainShare bounds the gain above the ceiling to this share of the rate
// per second: a relay's token bucket hides an overshoot until it is
// empty, and a rate that kept doubling meanwhile would meet it far above
// the relay's rate, with a burst of refusals.
const maxGainShare = 0.1

// plateauWidth is the share of the ceiling below it where the pacer only
// probes: the rate of the last cut was too much for the relay, so the
// pacer comes back quickly to just under it and lingers there.
const plateauWidth = 0.05

// OnThrottle records a send the relay refused for its rate, and reports
// whether the rate was decreased (false within Interval of the last one).
// Callers that know when the refused send started should use
// OnThrottleSent.
func (p *Pacer) OnThrottle(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut.within(now, p.cfg.Interval) {
		return false
	}
	p.decrease(now)
	return true
}

// OnThrottleSent records a refused send that started at sent, and reports
// whether the rate was decreased: a send that started before the last
// decrease is ignored (that decrease answered it), and one that started
// after it decreases again. Interval still applies, because a relay's
// bucket keeps refusing for a while after the rate drops below its refill
// rate while it earns tokens back.
func (p *Pacer) OnThrottleSent(now, sent time.Time) bool {
	return p.OnThrottleAccepted(now, sent, 0)
}

// OnThrottleAccepted is OnThrottleSent for a caller that knows the rate
// the relay accepted over the last second: 0 when it does not, +Inf
// when it cannot know yet (less than a second of traffic).
//
// In slow start, a refusal while the relay accepts more than the
// pacer's rate (or may, +Inf) is not this pacer's to answer: it answers
// someone else's burst, such as an unpaced worker starting beside this one.
// The pacer holds its rate for an Interval instead of cutting it. Once
// known, when the accepted rate is below what one cut would leave
// (rate*Factor), the cut is from it: a relay whose capacity fell (from
// 50/s to 10/s) is followed in one cut instead of one a second (50, 35,
// 24.5, 17, 12 while it refuses most of them); in steady state the relay
// accepts about the pacer's rate and the cut is the usual one.
func (p *Pacer) OnThrottleAccepted(now, sent time.Time, accepted float64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sent.Before(p.since) || p.cut.answered(sent) || p.cut.within(now, p.cfg.Interval) {
		return false
	}
	if !p.cut.set && accepted > p.rate {
		p.ignoredAt = now // someone else's burst: hold, don't cut
		return false
	}
	if accepted < p.rate*p.cfg.Factor && accepted > 0 {
		p.refill(now)
		p.rate = math.Max(p.cfg.Min, accepted)
	}
	p.decrease(now)
	return true
}

// startSlow makes refusals of sends that started before now answered by
// the pacer's start, keeping the slow start: the rate doubles each second
// until the relay refuses a send made at it.
func (p *Pacer) startSlow(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.since = now
}

// learned ends the slow start without a cut: the current rate is known to
// be the relay's (a share the fleet learned), so the pacer probes from
// it.
func (p *Pacer) learned(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ceiling = p.rate
	p.cut = lastCut{at: now.Add(-p.cfg.Interval), set: true}
}

// aim raises the ceiling to r once the slow start is over: the rate then
// climbs back by half the distance to it per second instead of by a tenth
// of itself. A ceiling above r, or a rate at it already, stays.
func (p *Pacer) aim(r float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut.set && r > p.ceiling && r > p.rate {
		p.ceiling = math.Min(p.cfg.Max, r)
	}
}

func (p *Pacer) decrease(now time.Time) {
	p.refill(now)
	p.ceiling = p.rate
	p.rate = math.Max(p.cfg.Min, p.rate*p.cfg.Factor)
	p.cut.mark(now)
	p.decreases++
}

// Scale multiplies the rate and the ceiling by f > 0 from now on: the
// relay's rate is shared with more (f < 1) or fewer (f > 1) workers.
func (p *Pacer) Scale(now time.Time, f float64) {
	if !(f > 0) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refill(now)
	p.rate = math.Min(p.cfg.Max, math.Max(p.cfg.Min, p.rate*f))
	p.ceiling *= f
}

// Rate returns the current rate in sends per second.
func (p *Pacer) Rate() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rate
}

// Decreases returns how many times the rate was decreased, for metrics.
func (p *Pacer) Decreases() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.decreases
}
