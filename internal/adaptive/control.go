package adaptive

import (
	"math"
	"sync"
	"time"

	"github.com/postline/postline/internal/failure"
)

// The controllers a SendControl cuts on throttling (SendControl.Done).
const (
	ControllerConcurrency = "concurrency"
	ControllerRate        = "rate"
)

// SendControlConfig configures a SendControl.
type SendControlConfig struct {
	// AIMD is the concurrency limit. Its Max should be the most sends the
	// caller can have in flight (the relay's connection pool).
	AIMD AIMDConfig
	// Pacer is the learned rate. A zero Initial leaves sends unpaced until
	// the relay first refuses one for its rate; the pacer then starts at
	// the rate the relay was accepting over the last second, cut by
	// Factor, so a relay that never pushes back is never slowed down.
	Pacer PacerConfig
	// FleetRate is the relay's rate for the whole fleet in sends per
	// second, split over the consumer group's members that have mail to send (FleetShare);
	// 0 means none.
	FleetRate float64
}

// SendControl decides when a send to one relay may start: the AIMD
// concurrency limit (scaled by the runtime pressure guard), the learned
// send rate and this worker's share of the fleet-wide rate must all let it
// through. It learns from each send's result: a refusal for too many
// connections cuts the concurrency, one for too many messages cuts the
// rate, and successes let both grow back. Safe for concurrent use; the
// caller counts the sends in flight.
type SendControl struct {
	mu     sync.Mutex
	cfg    SendControlConfig
	aimd   *AIMD
	pacer  *Pacer  // nil until the first rate refusal, when Pacer.Initial is 0
	recent *Window // results over the last second, to seed the pacer
	// firstResult is when Done was first called: the start of the
	// traffic the recent window has seen.
	firstResult time.Time
	fleet       *RateLimiter
	members     int
	// membersKnown is set once the group's size was given (SetMembers or
	// Seed): only later changes rescale a learned rate.
	membersKnown bool
	// others is what the other live workers learned for the relay, as
	// last heard at othersAt (Seed).
	others    LearnedRates
	othersAt  time.Time
	pressure  *PressureGuard // nil = none
	decreases map[string]int
}

// NewSendControl returns a control at now. pressure may be nil.
func NewSendControl(cfg SendControlConfig, pressure *PressureGuard, now time.Time) (*SendControl, error) {
	aimd, err := NewAIMD(cfg.AIMD)
	if err != nil {
		return nil, err
	}
	pacerCfg := cfg.Pacer.WithDefaults()
	if cfg.Pacer.Initial == 0 {
		pacerCfg.Initial = pacerCfg.Min // validated now, replaced when the pacer starts
	}
	if err := pacerCfg.Validate(); err != nil {
		return nil, err
	}
	recent, err := NewWindow(WindowConfig{Span: time.Second, Buckets: 10, MinSamples: 1})
	if err != nil {
		return nil, err
	}
	c := &SendControl{cfg: cfg, aimd: aimd, recent: recent, members: 1, pressure: pressure,
		decreases: map[string]int{}}
	if cfg.Pacer.Initial > 0 {
		c.pacer, _ = NewPacer(cfg.Pacer, now)
	}
	if cfg.FleetRate > 0 {
		c.fleet = NewRateLimiter(now, FleetShare(cfg.FleetRate, 1), 1)
	}
	return c, nil
}

// Limit returns how many sends may be in flight now.
func (c *SendControl) Limit() int {
	l := c.aimd.Limit()
	if c.pressure != nil {
		l = c.pressure.Apply(l)
	}
	return l
}

// Rate returns the learned send rate in sends per second, or +Inf while
// the relay has not refused a send for its rate.
func (c *SendControl) Rate() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pacer == nil {
		return math.Inf(1)
	}
	return c.pacer.Rate()
}

// FleetShare returns this worker's share of the fleet-wide rate in sends
// per second, or +Inf when there is no fleet-wide rate.
func (c *SendControl) FleetShare() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fleet == nil {
		return math.Inf(1)
	}
	return c.fleet.Rate()
}

// Decreases returns how many times controller (ControllerConcurrency or
// ControllerRate) was cut.
func (c *SendControl) Decreases(controller string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.decreases[controller]
}

// SetMembers sets the number of live workers sharing the relay. The
// fleet-wide rate is split over them, and a learned rate is rescaled: the
// relay's rate was learned as this worker's share, and a worker joining
// (or leaving) changes the share at once rather than after the refusals
// that would teach it. A worker joining scales the rate by old/new members.
// One leaving (or running out of mail) frees the share it was sending at,
// which need not be this worker's: the members left split the others'
// mean learned rate (last heard, Seed) per worker gone, on top of their own
// rates, and never get less than old/new times their rate. So a worker that
// had paced itself far below the others (cut while they took the relay's
// bucket) takes the whole relay when it is left alone, instead of doubling
// its small share and climbing from there. The first count only tells the
// control the size of the group its rate was learned in, and a count below
// 1 means not known yet (the group was not described): neither rescales.
func (c *SendControl) SetMembers(now time.Time, members int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if members < 1 || (c.membersKnown && members == c.members) {
		return
	}
	old, known := c.members, c.membersKnown
	c.members, c.membersKnown = members, true
	if c.pacer != nil && known {
		// Only a change seen: the first count is the group the pacer
		// learned in, whatever the control assumed before.
		c.pacer.Scale(now, c.shareScale(now, old, members))
	}
	if c.fleet != nil {
		c.fleet.SetRate(now, FleetShare(c.cfg.FleetRate, members))
	}
}

// othersMaxAge is how long the others' rates heard by Seed count for
// SetMembers: a few of the fleet's publications (every 2 s by default).
const othersMaxAge = 10 * time.Second

// shareScale is the factor by which the learned rate changes when the
// members sharing the relay go from old to members; callers hold mu and
// c.pacer is set.
func (c *SendControl) shareScale(now time.Time, old, members int) float64 {
	f := float64(old) / float64(members)
	o := c.others
	if members >= old || !o.paced() || now.Sub(c.othersAt) > othersMaxAge {
		return f
	}
	own := c.pacer.Rate()
	freed := min(o.Sum, float64(old-members)*o.Sum/float64(o.Workers))
	return max(f, (own+freed/float64(members))/own)
}

// Members returns the number of live workers the control shares the
// relay with (itself included).
func (c *SendControl) Members() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members
}

// catchUp aims a pacer that fell below half its fair share (the fleet's
// learned total, its own rate included, split evenly over the workers that
// pace) at that share, while other members send too: such a worker was cut
// while the others took the relay's bucket (its first second of traffic
// accepted little), and growing by a tenth of itself per second it would
// take half a minute to reach its share while its partitions wait behind
// the others'. Aimed, it climbs half the distance per second; the refusals
// of the overshoot cut the workers above their share. Callers hold mu.
func (c *SendControl) catchUp(others LearnedRates) {
	if c.members < 2 || !others.paced() {
		return
	}
	own := c.pacer.Rate()
	fair := (own + others.Sum) / float64(others.Workers+1)
	if own < fair/2 {
		c.pacer.aim(fair)
	}
}

// LearnedRates is what the other live workers learned for one relay:
// the sum of their rates and how many of them pace it.
type LearnedRates struct {
	Sum     float64
	Workers int
}

// paced reports whether r says anything: some worker paces the relay at
// a finite rate.
func (r LearnedRates) paced() bool {
	return r.Workers > 0 && r.Sum > 0 && !math.IsInf(r.Sum, 1)
}

// Seed hears others, what the other live workers learned for the relay
// (zero when none paces it), which SetMembers shares out when a worker
// leaves; a pacing control far below its fair share of it catches up
// (catchUp). It starts pacing at this worker's share of their sum when this
// control is still unpaced: a worker joining a fleet that has learned the
// relay's rate starts at its share instead of at full speed, so adding a
// worker does not add refusals. The share is the sum split over the
// members, this worker included (at least two, since other workers
// reported). Seeding does nothing once the control paces or for a sum <= 0.
// Seed reports whether it started the pacer.
func (c *SendControl) Seed(now time.Time, others LearnedRates) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.others, c.othersAt = others, now
	if c.pacer != nil {
		c.catchUp(others)
		return false
	}
	if !others.paced() {
		return false
	}
	// Other workers reported, so there are at least two of us even when
	// the group was not described yet; a later SetMembers rescales from
	// this count.
	c.members, c.membersKnown = max(c.members, 2), true
	if c.fleet != nil {
		c.fleet.SetRate(now, FleetShare(c.cfg.FleetRate, c.members))
	}
	cfg := c.cfg.Pacer.WithDefaults()
	cfg.Initial = math.Min(cfg.Max, math.Max(cfg.Min, others.Sum/float64(c.members)))
	c.pacer, _ = NewPacer(cfg, now) // cfg was validated by NewSendControl
	c.pacer.learned(now)
	return true
}

// Admit decides whether a send may start at now while inFlight sends are
// in flight, and takes its rate tokens when it may. When it may not,
// retryAt is zero if the concurrency limit holds it back (try again when a
// send finishes) and otherwise the time a rate token is free.
func (c *SendControl) Admit(now time.Time, inFlight int) (ok bool, retryAt time.Time) {
	if inFlight >= c.Limit() {
		c.aimd.Blocked(now)
		return false, time.Time{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	at := now
	if c.pacer != nil {
		at = later(at, c.pacer.Next(now))
	}
	if c.fleet != nil {
		at = later(at, c.fleet.Next(now))
	}
	if at.After(now) {
		return false, at
	}
	if c.pacer != nil {
		c.pacer.Take(now)
	}
	if c.fleet != nil {
		c.fleet.Allow(now)
	}
	return true, time.Time{}
}

// Done records the result of a send that started at sent and ended at
// now: ok, or refused for the relay limit limit ("" for any other
// failure). It returns the controller it cut, or "".
func (c *SendControl) Done(now, sent time.Time, ok bool, limit failure.Limit) (cut string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.firstResult.IsZero() {
		c.firstResult = now
	}
	c.recent.Observe(now, "", ok)
	switch {
	case ok:
		c.aimd.OnSuccess(now)
		if c.pacer != nil {
			c.pacer.OnSuccess(now)
		}
	case limit == failure.LimitConnections:
		if c.aimd.OnThrottleSent(now, sent) {
			cut = ControllerConcurrency
		}
	case limit == failure.LimitRate && c.rationing(now):
		if c.pacer == nil {
			if c.startPacer(now) {
				cut = ControllerRate
			}
		} else if c.pacer.OnThrottleAccepted(now, sent, c.acceptedRate(now)) {
			cut = ControllerRate
		}
	}
	if cut != "" {
		c.decreases[cut]++
	}
	return cut
}

// rationing reports whether the relay accepted mail in the last second:
// a relay that takes some mail and refuses the rest for its rate is
// rationing, and a lower rate helps. One that refuses everything (a burst
// of greylisting, an outage dressed as a throttle) would only drive the
// rate to its minimum; those refusals are left to the jobs' own waits and
// the circuit breaker. c.mu is held.
func (c *SendControl) rationing(now time.Time) bool {
	ratio, n := c.recent.Overall(now)
	return ratio*float64(n) >= 1
}

// acceptedRate is the rate the relay accepted over the last second, or
// +Inf within the first second of traffic, when the window says nothing
// about it. c.mu is held.
func (c *SendControl) acceptedRate(now time.Time) float64 {
	if now.Sub(c.firstResult) < time.Second {
		return math.Inf(1)
	}
	ratio, n := c.recent.Overall(now)
	return ratio * float64(n) / time.Second.Seconds()
}

// paceMinSamples is the fewest results in the last second for which a rate
// refusal starts the pacer: below it the sample says nothing about the
// relay's rate (one refused job among a trickle), and the refused job's
// own wait for the relay's hint is answer enough.
const paceMinSamples = 10

// startPacer starts pacing at the rate the relay accepted over the last
// second, within the pacer's bounds. It reports false, leaving sends
// unpaced, below paceMinSamples. c.mu is held.
//
// After a second of traffic that rate is what the relay takes, and the
// pacer starts cut by Factor with it as the ceiling. Within the first
// second it is not known: the relay's burst makes the accepted count over
// the elapsed time look faster than the relay is (a bucket of 40 emptied in
// 100 ms reads as 400/s), and over a whole second slower. The pacer then
// starts at the slower figure in slow start, doubling each second until the
// relay's next refusal, and refusals of the sends already under way do not
// count against it.
func (c *SendControl) startPacer(now time.Time) bool {
	cfg := c.cfg.Pacer.WithDefaults()
	ratio, n := c.recent.Overall(now)
	if n < paceMinSamples {
		return false
	}
	seen := ratio * float64(n)
	cfg.Initial = math.Min(cfg.Max, math.Max(cfg.Min, seen/time.Second.Seconds()))
	c.pacer, _ = NewPacer(cfg, now) // cfg was validated by NewSendControl
	if now.Sub(c.firstResult) < time.Second {
		c.pacer.startSlow(now)
		return true
	}
	c.pacer.OnThrottle(now) // the cut, which also ends slow start
	return true
}
