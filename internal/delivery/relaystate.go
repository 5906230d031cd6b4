package delivery

import (
	"strconv"
	"time"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/failure"
)

// RelayState is one relay's send control as this worker sees it, for the
// fleet's shared view of its relays (postctl relays) and for seeding a
// joining worker's pacing.
type RelayState struct {
	Relay    string
	Priority int
	InFlight int // sends in flight now
	Limit    int // the concurrency limit now
	// Rate is the learned send rate in sends per second, math.Inf(1)
	// while the relay has not refused a send for its rate.
	Rate float64
	// FleetShare is this worker's share of the relay's fleet-wide rate,
	// math.Inf(1) when none is configured.
	FleetShare float64
	// Members is how many live workers the control shares the relay with.
	Members                   int
	ConcurrencyCuts, RateCuts int
	// LastCut is the send control's latest cut; zero when it never cut.
	LastCut Cut
}

// Cut is one decrease of a relay's send control.
type Cut struct {
	// Controller is what was cut: adaptive.ControllerConcurrency or
	// adaptive.ControllerRate.
	Controller string
	// Reason is the reply that caused it: the failure rule and the SMTP
	// codes ("throttle-text 450 4.7.1"), never the reply's text, which
	// may quote addresses.
	Reason string
	At     time.Time
}

// cutReason names the reply behind a cut.
func cutReason(v failure.Verdict) string {
	r := v.Rule
	if v.Code != 0 {
		r += " " + strconv.Itoa(v.Code)
	}
	if v.Enhanced != "" {
		r += " " + v.Enhanced
	}
	return r
}

// RelayStates returns the send control of every relay, in priority order.
func (p *Pipeline) RelayStates() []RelayState {
	out := make([]RelayState, len(p.relays))
	for i, relay := range p.relays {
		out[i] = relay.state()
	}
	return out
}

// SeedRates hands what the other live workers learned for the relays
// (fleetRates, by relay name; a relay missing is paced by none of them) to this worker's send controls: a control that is still
// unpaced starts at its share, so a worker joining a fleet that already
// paces a relay does not burst into it, and one that paces splits the
// fleet's total when a worker leaves (adaptive.SendControl.SetMembers).
// Relays without a send control are left alone.
func (p *Pipeline) SeedRates(now time.Time, fleetRates map[string]adaptive.LearnedRates) {
	for _, relay := range p.relays {
		if relay.control == nil {
			continue
		}
		if r := fleetRates[relay.Name]; relay.control.Seed(now, r) {
			p.logger.Info("relay paced at the fleet's learned rate", "relay", relay.Name,
				"fleet_rate", r.Sum, "workers", r.Workers, "rate", relay.control.Rate())
		}
	}
}
