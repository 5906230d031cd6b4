package circuit

import (
	"fmt"
	"time"
)

// State is the position of a circuit breaker.
type State uint8

// The circuit states.
const (
	// Closed lets every send through.
	Closed State = iota + 1
	// Open refuses sends until the cooldown has passed.
	Open
	// HalfOpen lets the one probe of the worker that claimed it through.
	HalfOpen
)

var states = []State{Closed, Open, HalfOpen}

var stateNames = map[State]string{Closed: "closed", Open: "open", HalfOpen: "half_open"}

// String returns the state's name as stored in postline_circuits.state and
// used in metric labels: closed, open or half_open.
func (s State) String() string {
	if name, ok := stateNames[s]; ok {
		return name
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

func parseState(s string) (State, error) {
	for _, st := range states {
		if st.String() == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("unknown circuit state %q", s)
}

// Health is a relay's health as one worker sees it.
type Health uint8

// The health values.
const (
	// Healthy: closed, no recent fault.
	Healthy Health = iota + 1
	// Degraded: closed with faults in the counting window, or half-open
	// with this worker's probe in flight.
	Degraded
	// Unavailable: open, or half-open with another worker's probe.
	Unavailable
)

var healths = []Health{Healthy, Degraded, Unavailable}

var healthNames = map[Health]string{Healthy: "healthy", Degraded: "degraded", Unavailable: "unavailable"}

// String returns the health's name as used in metric labels.
func (h Health) String() string {
	if name, ok := healthNames[h]; ok {
		return name
	}
	return fmt.Sprintf("Health(%d)", uint8(h))
}

// SendResult is what a worker reports about one send to a relay.
type SendResult int

// The results.
const (
	// Success: the relay accepted the mail, or refused it for a reason
	// that is not the relay's fault (a permanent recipient error).
	Success SendResult = iota + 1
	// Failure: a relay fault that says the relay is down or refuses us
	// (a refused or reset connection, 421 service not available).
	Failure
	// TimeoutFailure: a relay fault that was a timeout.
	TimeoutFailure
	// AuthFailure: the relay refused our credentials; opens at once.
	AuthFailure
	// Throttle: the relay asked us to slow down (421/450 4.7.x, rate
	// texts). That is the send control's business (pacing, concurrency),
	// not an outage: a closed circuit ignores it, and a half-open probe
	// that meets it closes the circuit, because the relay is answering.
	Throttle
)

var sendResultNames = map[SendResult]string{
	Success: "success", Failure: "failure", TimeoutFailure: "timeout_failure", AuthFailure: "auth_failure", Throttle: "throttle",
}

// String returns the result's name.
func (o SendResult) String() string {
	if name, ok := sendResultNames[o]; ok {
		return name
	}
	return fmt.Sprintf("SendResult(%d)", int(o))
}

func (o SendResult) valid() bool { return o >= Success && o <= Throttle }

// fault reports whether o counts toward opening a closed circuit.
func (o SendResult) fault() bool { return o == Failure || o == TimeoutFailure || o == AuthFailure }

// Circuit is the whole state of one relay's breaker: a row of
// postline_circuits without its bookkeeping columns.
type Circuit struct {
	State State
	// Failures counts the relay faults of the current window (see
	// WindowStart); it is kept when the circuit opens, for logs, and grows
	// with every failed probe.
	Failures int
	// Successes counts the accepted sends that workers reported in the
	// current window. Workers batch them (Event.Successes), so it lags the
	// truth by up to Policy.FlushInterval per worker.
	Successes int
	// WindowStart is when the fault that began the current counting window
	// was counted; zero while no fault is being counted. The window ends
	// Policy.Window later, and the next fault begins a new one.
	WindowStart time.Time
	// Cooldown is the current open period, or the next one while closed.
	Cooldown time.Duration
	// OpenedAt and OpenUntil bound the open period; zero while closed.
	OpenedAt, OpenUntil time.Time
	// ProbeOwner holds the half-open probe until ProbeUntil.
	ProbeOwner string
	ProbeUntil time.Time
	// LastClass is the failure class of the last fault counted.
	LastClass string
}

// Event is something that happens to a circuit: a worker's report of one
// send, or its request to claim the half-open probe.
type Event struct {
	// Claim asks for the probe; Result and Class are then ignored.
	Claim bool
	// Result is what the reported send did.
	Result SendResult
	// Class is the failure class of a failed send (internal/failure's name),
	// recorded as LastClass.
	Class string
	// Owner names the worker reporting or claiming.
	Owner string
	// Successes is how many accepted sends the report carries: a worker
	// batches its successes and writes them with its next fault, or on its
	// own at most once per Policy.FlushInterval. For a Success result, 0
	// counts as 1. They count only in a window that is already running:
	// successes from before a relay's first fault say nothing about
	// whether it is down now.
	Successes int
}

// windowActive reports whether c is counting a window at now.
func (c Circuit) windowActive(now time.Time, p Policy) bool {
	return !c.WindowStart.IsZero() && now.Before(c.WindowStart.Add(p.Window))
}

// WindowActive reports whether c, closed, is counting faults and successes
// at now under p (zero fields of p take their defaults): a fault began a
// window less than Policy.Window ago.
func (c Circuit) WindowActive(now time.Time, p Policy) bool {
	return c.State == Closed && c.windowActive(now, p.WithDefaults())
}

// refusing reports whether the window's counts say the relay is not
// accepting mail: at least FailureThreshold faults, and successes below
// SuccessFloor of all the sends counted.
func (c Circuit) refusing(p Policy) bool {
	return c.Failures >= p.FailureThreshold &&
		float64(c.Successes) < p.SuccessFloor*float64(c.Failures+c.Successes)
}

// Next returns the circuit after ev happened at now under p (zero fields of
// p take their defaults). It returns c unchanged when ev does not apply: a
// claim that is not due, a report while open, a report in half-open from a
// worker that does not hold the probe, an invalid result.
func Next(c Circuit, ev Event, now time.Time, p Policy) Circuit {
	p = p.WithDefaults()
	if ev.Claim {
		return claim(c, ev.Owner, now, p)
	}
	if !ev.Result.valid() {
		return c
	}
	switch c.State {
	case Closed:
		if ev.Result == Throttle {
			return c // the send control's business
		}
		if !c.windowActive(now, p) {
			if c.WindowStart.IsZero() && c.Failures == 0 && ev.Result == Success {
				return c // the healthy path: nothing is being counted
			}
			// The window ended (or none runs): the successes carried were
			// seen before this window and do not count in it.
			c.Failures, c.Successes, c.WindowStart = 0, 0, time.Time{}
			ev.Successes = 0
			if ev.Result == Success {
				return c
			}
			c.WindowStart = now
		}
		if ev.Result == Success {
			c.Successes += max(ev.Successes, 1)
			return c
		}
		c.Successes += max(ev.Successes, 0)
		c.Failures++
		c.LastClass = ev.Class
		if ev.Result == AuthFailure || c.refusing(p) {
			return open(c, p.BaseCooldown, now)
		}
		return c
	case HalfOpen:
		if ev.Owner == "" || ev.Owner != c.ProbeOwner {
			return c // a straggler's report says nothing about the probe
		}
		if !ev.Result.fault() {
			// A success, or a throttle: the relay is answering again.
			return Circuit{State: Closed, Cooldown: p.BaseCooldown, LastClass: c.LastClass}
		}
		factor := p.Growth
		if ev.Result == TimeoutFailure {
			factor = p.TimeoutGrowth
		}
		c.Failures++
		c.LastClass = ev.Class
		return open(c, grow(c.Cooldown, factor, p), now)
	}
	// Open: stragglers must not extend the cooldown.
	return c
}

// claim hands the probe to owner when the cooldown, or the previous probe's
// deadline, has passed.
func claim(c Circuit, owner string, now time.Time, p Policy) Circuit {
	if owner == "" {
		return c
	}
	switch {
	case c.State == Open && !now.Before(c.OpenUntil):
	case c.State == HalfOpen && !now.Before(c.ProbeUntil):
	default:
		return c
	}
	c.State = HalfOpen
	c.ProbeOwner = owner
	c.ProbeUntil = now.Add(p.ProbeTimeout)
	return c
}

func open(c Circuit, cooldown time.Duration, now time.Time) Circuit {
	c.State = Open
	c.Cooldown = cooldown
	c.OpenedAt = now
	c.OpenUntil = now.Add(cooldown)
	c.ProbeOwner = ""
	c.ProbeUntil = time.Time{}
	return c
}

// grow multiplies d by factor within [BaseCooldown, MaxCooldown], without
// overflowing.
func grow(d time.Duration, factor int, p Policy) time.Duration {
	d = max(d, p.BaseCooldown)
	if d > p.MaxCooldown/time.Duration(factor) {
		return p.MaxCooldown
	}
	return min(d*time.Duration(factor), p.MaxCooldown)
}

// Health returns the circuit's health as the worker named owner sees it.
func (c Circuit) Health(owner string) Health {
	switch c.State {
	case Closed:
		if c.Failures > 0 {
			return Degraded // faults in the window; the next success after it ends clears them
		}
		return Healthy
	case HalfOpen:
		if owner != "" && c.ProbeOwner == owner {
			return Degraded
		}
	}
	return Unavailable
}

// Claimable reports whether a probe may be claimed at now: the circuit is
// open past its cooldown, or half-open past its probe deadline.
func (c Circuit) Claimable(now time.Time) bool {
	switch c.State {
	case Open:
		return !now.Before(c.OpenUntil)
	case HalfOpen:
		return !now.Before(c.ProbeUntil)
	}
	return false
}

// Equal reports whether c and d are the same state (times compared with
// time.Time.Equal).
func (c Circuit) Equal(d Circuit) bool {
	return c.State == d.State && c.Failures == d.Failures && c.Successes == d.Successes &&
		c.WindowStart.Equal(d.WindowStart) && c.Cooldown == d.Cooldown &&
		c.OpenedAt.Equal(d.OpenedAt) && c.OpenUntil.Equal(d.OpenUntil) &&
		c.ProbeOwner == d.ProbeOwner && c.ProbeUntil.Equal(d.ProbeUntil) && c.LastClass == d.LastClass
}
