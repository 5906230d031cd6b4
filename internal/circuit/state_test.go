package circuit

import (
	"cmp"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestNext(t *testing.T) {
	p := Policy{FailureThreshold: 3, BaseCooldown: 30 * time.Second, MaxCooldown: time.Hour,
		Growth: 2, TimeoutGrowth: 4, ProbeTimeout: 10 * time.Second, Window: 10 * time.Second, SuccessFloor: 0.05}
	closed := Circuit{State: Closed, Cooldown: 30 * time.Second}
	openAt := func(failures int, cooldown time.Duration, since time.Time, class string) Circuit {
		return Circuit{State: Open, Failures: failures, Cooldown: cooldown, OpenedAt: since,
			OpenUntil: since.Add(cooldown), LastClass: class}
	}
	halfOpen := func(c Circuit, owner string, until time.Time) Circuit {
		c.State, c.ProbeOwner, c.ProbeUntil = HalfOpen, owner, until
		return c
	}
	// counting is a closed circuit counting a window begun at start.
	counting := func(faults, successes int, start time.Time, class string) Circuit {
		return Circuit{State: Closed, Failures: faults, Successes: successes, WindowStart: start,
			Cooldown: 30 * time.Second, LastClass: class}
	}
	// opened is c opened at since for cooldown, its window kept for logs.
	opened := func(c Circuit, cooldown time.Duration, since time.Time) Circuit {
		c.State, c.Cooldown, c.OpenedAt, c.OpenUntil = Open, cooldown, since, since.Add(cooldown)
		return c
	}
	fail := func(owner string) Event { return Event{Result: Failure, Class: "transient", Owner: owner} }
	ok := func(owner string) Event { return Event{Result: Success, Owner: owner} }
	oks := func(owner string, n int) Event { return Event{Result: Success, Owner: owner, Successes: n} }
	throttle := func(owner string) Event { return Event{Result: Throttle, Class: "throttled", Owner: owner} }
	claim := func(owner string) Event { return Event{Claim: true, Owner: owner} }
	open1 := openAt(3, 30*time.Second, t0, "transient")

	tests := []struct {
		name string
		c    Circuit
		ev   Event
		now  time.Time
		want Circuit
	}{
		// closed
		{"closed: success without a window changes nothing", closed, ok("a"), t0, closed},
		{"closed: batched successes without a window change nothing", closed, oks("a", 50), t0, closed},
		{"closed: a throttle changes nothing", closed, throttle("a"), t0, closed},
		{"closed: a throttle in a window changes nothing", counting(2, 0, t0, "transient"), throttle("a"), at(time.Second),
			counting(2, 0, t0, "transient")},
		{"closed: a fault begins a window", closed, fail("a"), at(time.Second), counting(1, 0, at(time.Second), "transient")},
		{"closed: the successes a window-beginning fault carries are from before it", closed,
			Event{Result: Failure, Class: "transient", Owner: "a", Successes: 40}, t0, counting(1, 0, t0, "transient")},
		{"closed: a success in the window counts", counting(1, 0, t0, "transient"), ok("b"), at(time.Second),
			counting(1, 1, t0, "transient")},
		{"closed: a batch of successes counts", counting(1, 0, t0, "transient"), oks("b", 40), at(time.Second),
			counting(1, 40, t0, "transient")},
		{"closed: a fault in the window counts with the successes it carries", counting(1, 3, t0, "transient"),
			Event{Result: TimeoutFailure, Class: "transient", Owner: "a", Successes: 7}, at(time.Second),
			counting(2, 10, t0, "transient")},
		{"closed: the threshold-th fault without successes opens with the base cooldown", counting(2, 0, t0, "transient"), fail("b"),
			at(2 * time.Second), opened(counting(3, 0, t0, "transient"), 30*time.Second, at(2*time.Second))},
		{"closed: the threshold-th fault with the relay accepting mail does not open", counting(2, 1, t0, "transient"), fail("b"),
			at(2 * time.Second), counting(3, 1, t0, "transient")},
		{"closed: below the success floor opens", counting(39, 2, t0, "transient"), fail("b"), at(2 * time.Second),
			opened(counting(40, 2, t0, "transient"), 30*time.Second, at(2*time.Second))},
		{"closed: at the success floor does not open", counting(37, 2, t0, "transient"), fail("b"), at(2 * time.Second),
			counting(38, 2, t0, "transient")},
		{"closed: timeouts count like faults", counting(2, 0, t0, "transient"),
			Event{Result: TimeoutFailure, Class: "transient", Owner: "a"}, t0,
			opened(counting(3, 0, t0, "transient"), 30*time.Second, t0)},
		{"closed: first opening uses the base even after a long cooldown",
			Circuit{State: Closed, Failures: 2, WindowStart: t0, Cooldown: time.Hour}, fail("a"), t0,
			opened(Circuit{State: Closed, Failures: 3, WindowStart: t0, LastClass: "transient"}, 30*time.Second, t0)},
		{"closed: a fault after the window begins a new one", counting(2, 0, t0, "transient"), fail("a"), at(10 * time.Second),
			counting(1, 0, at(10*time.Second), "transient")},
		{"closed: a success after the window clears it", counting(2, 5, t0, "transient"), ok("a"), at(10 * time.Second),
			Circuit{State: Closed, Cooldown: 30 * time.Second, LastClass: "transient"}},
		{"closed: a success clears a count without a window (a row from before windows)",
			Circuit{State: Closed, Failures: 3, Cooldown: 30 * time.Second}, ok("a"), t0, closed},
		{"closed: auth opens at once", closed, Event{Result: AuthFailure, Class: "auth", Owner: "a"}, t0,
			opened(counting(1, 0, t0, "auth"), 30*time.Second, t0)},
		{"closed: auth opens even while the relay accepts mail", counting(1, 100, t0, "transient"),
			Event{Result: AuthFailure, Class: "auth", Owner: "a"}, at(time.Second),
			opened(counting(2, 100, t0, "auth"), 30*time.Second, at(time.Second))},
		{"closed: a claim changes nothing", closed, claim("a"), t0, closed},
		{"closed: an invalid result changes nothing", closed, Event{Result: 0, Owner: "a"}, t0, closed},
		{"closed: a result past Throttle is invalid", closed, Event{Result: Throttle + 1, Owner: "a"}, t0, closed},
		// open
		{"open: failures are ignored", open1, fail("a"), at(time.Second), open1},
		{"open: timeouts are ignored", open1, Event{Result: TimeoutFailure, Owner: "a"}, at(time.Second), open1},
		{"open: auth failures are ignored", open1, Event{Result: AuthFailure, Owner: "a"}, at(time.Second), open1},
		{"open: successes are ignored", open1, ok("a"), at(time.Second), open1},
		{"open: throttles are ignored", open1, throttle("a"), at(time.Second), open1},
		{"open: no claim before the cooldown ends", open1, claim("a"), at(29 * time.Second), open1},
		{"open: claim when the cooldown ends", open1, claim("a"), at(30 * time.Second),
			halfOpen(open1, "a", at(40*time.Second))},
		{"open: claim after the cooldown", open1, claim("b"), at(time.Minute),
			halfOpen(open1, "b", at(70*time.Second))},
		{"open: a claim needs an owner", open1, claim(""), at(time.Minute), open1},
		// half-open
		{"half-open: a live probe cannot be claimed", halfOpen(open1, "a", at(40*time.Second)), claim("b"), at(39 * time.Second),
			halfOpen(open1, "a", at(40*time.Second))},
		{"half-open: nor re-claimed by its owner", halfOpen(open1, "a", at(40*time.Second)), claim("a"), at(39 * time.Second),
			halfOpen(open1, "a", at(40*time.Second))},
		{"half-open: an expired probe may be claimed by another", halfOpen(open1, "a", at(40*time.Second)), claim("b"), at(40 * time.Second),
			halfOpen(open1, "b", at(50*time.Second))},
		{"half-open: probe success closes and resets", halfOpen(open1, "a", at(40*time.Second)), ok("a"), at(35 * time.Second),
			Circuit{State: Closed, Cooldown: 30 * time.Second, LastClass: "transient"}},
		{"half-open: success after a longer cooldown resets it to base", halfOpen(openAt(9, 8*time.Minute, t0, "transient"), "a", at(9*time.Minute)),
			ok("a"), at(8*time.Minute + time.Second), Circuit{State: Closed, Cooldown: 30 * time.Second, LastClass: "transient"}},
		{"half-open: probe failure doubles the cooldown", halfOpen(open1, "a", at(40*time.Second)), fail("a"), at(35 * time.Second),
			openAt(4, time.Minute, at(35*time.Second), "transient")},
		{"half-open: probe timeout multiplies by TimeoutGrowth", halfOpen(open1, "a", at(40*time.Second)),
			Event{Result: TimeoutFailure, Class: "transient", Owner: "a"}, at(35 * time.Second),
			openAt(4, 2*time.Minute, at(35*time.Second), "transient")},
		{"half-open: probe auth failure grows like a failure", halfOpen(open1, "a", at(40*time.Second)),
			Event{Result: AuthFailure, Class: "auth", Owner: "a"}, at(35 * time.Second),
			openAt(4, time.Minute, at(35*time.Second), "auth")},
		{"half-open: growth stops at MaxCooldown", halfOpen(openAt(9, 40*time.Minute, t0, "transient"), "a", at(41*time.Minute)),
			fail("a"), at(40*time.Minute + time.Second), openAt(10, time.Hour, at(40*time.Minute+time.Second), "transient")},
		{"half-open: a timeout at MaxCooldown stays there", halfOpen(openAt(9, time.Hour, t0, "transient"), "a", at(61*time.Minute)),
			Event{Result: TimeoutFailure, Class: "transient", Owner: "a"}, at(60*time.Minute + time.Second),
			openAt(10, time.Hour, at(60*time.Minute+time.Second), "transient")},
		{"half-open: another worker's failure is a straggler", halfOpen(open1, "a", at(40*time.Second)), fail("b"), at(35 * time.Second),
			halfOpen(open1, "a", at(40*time.Second))},
		{"half-open: a throttled probe closes: the relay is answering", halfOpen(open1, "a", at(40*time.Second)), throttle("a"),
			at(35 * time.Second), Circuit{State: Closed, Cooldown: 30 * time.Second, LastClass: "transient"}},
		{"half-open: another worker's throttle is a straggler", halfOpen(open1, "a", at(40*time.Second)), throttle("b"),
			at(35 * time.Second), halfOpen(open1, "a", at(40*time.Second))},
		{"half-open: another worker's success does not close", halfOpen(open1, "a", at(40*time.Second)), ok("b"), at(35 * time.Second),
			halfOpen(open1, "a", at(40*time.Second))},
		{"half-open: the previous owner's late report after a takeover is ignored", halfOpen(open1, "b", at(50*time.Second)), fail("a"),
			at(45 * time.Second), halfOpen(open1, "b", at(50*time.Second))},
		{"half-open: the owner may still report after the deadline", halfOpen(open1, "a", at(40*time.Second)), ok("a"), at(45 * time.Second),
			Circuit{State: Closed, Cooldown: 30 * time.Second, LastClass: "transient"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Next(tt.c, tt.ev, tt.now, p)
			if !got.Equal(tt.want) {
				t.Errorf("Next(%+v, %+v)\n got  %+v\n want %+v", tt.c, tt.ev, got, tt.want)
			}
		})
	}
}

func TestNextDefaults(t *testing.T) {
	// The zero Policy takes the defaults: 5 faults open for 30s.
	c := Circuit{State: Closed}
	for i := range DefaultFailureThreshold {
		if c.State != Closed {
			t.Fatalf("open after %d faults, want %d", i, DefaultFailureThreshold)
		}
		c = Next(c, Event{Result: Failure, Owner: "a"}, t0, Policy{})
	}
	if c.State != Open || c.Cooldown != DefaultBaseCooldown || !c.OpenUntil.Equal(t0.Add(DefaultBaseCooldown)) {
		t.Errorf("after %d faults: %+v, want open for %v", DefaultFailureThreshold, c, DefaultBaseCooldown)
	}
	// Doubling from 30s reaches the 1h cap after 7 failed probes.
	now := c.OpenUntil
	for range 8 {
		c = Next(c, Event{Claim: true, Owner: "a"}, now, Policy{})
		c = Next(c, Event{Result: Failure, Owner: "a"}, now, Policy{})
		now = c.OpenUntil
	}
	if c.Cooldown != DefaultMaxCooldown {
		t.Errorf("cooldown after 8 failed probes = %v, want %v", c.Cooldown, DefaultMaxCooldown)
	}
}

// TestNextOverTime plays event streams from several workers on a virtual
// clock under the default policy (5 faults, 10 s window, 5 % floor) and
// checks where the circuit ends up, and that it never opened on the way
// when it must not.
func TestNextOverTime(t *testing.T) {
	type timed struct {
		at time.Duration
		ev Event
	}
	// every returns n events ev, one per step from start.
	every := func(start, step time.Duration, n int, ev Event) []timed {
		out := make([]timed, n)
		for i := range out {
			out[i] = timed{start + time.Duration(i)*step, ev}
		}
		return out
	}
	merge := func(streams ...[]timed) []timed {
		var all []timed
		for _, s := range streams {
			all = append(all, s...)
		}
		slices.SortStableFunc(all, func(a, b timed) int { return cmp.Compare(a.at, b.at) })
		return all
	}
	fault := func(owner string) Event { return Event{Result: Failure, Class: "transient", Owner: owner} }
	refused := func(owner string) Event { return Event{Result: Failure, Class: "transient", Owner: owner} }
	throttle := func(owner string) Event { return Event{Result: Throttle, Class: "throttled", Owner: owner} }
	success := func(owner string) Event { return Event{Result: Success, Owner: owner} }
	batch := func(owner string, n int) Event { return Event{Result: Success, Owner: owner, Successes: n} }
	tests := []struct {
		name     string
		events   []timed
		wantOpen bool
	}{
		{"throttles alone never open", merge(
			every(0, time.Millisecond, 20000, throttle("a")),
			every(0, time.Millisecond, 20000, throttle("b"))), false},
		{"throttles between faults do not count as faults", merge(
			every(0, time.Millisecond, 5000, throttle("a")),
			every(0, time.Second, 4, fault("b"))), false},
		{"faults interleaved with another worker's successes do not open", merge(
			every(0, 10*time.Millisecond, 3000, success("b")),
			every(5*time.Millisecond, 50*time.Millisecond, 600, fault("a"))), false},
		{"faults interleaved with another worker's batches do not open", merge(
			// b flushes 100 successes a second; a's faults, 2 a second,
			// carry a's own few successes.
			every(500*time.Millisecond, time.Second, 30, batch("b", 100)),
			every(100*time.Millisecond, 500*time.Millisecond, 60, Event{Result: Failure, Class: "transient", Owner: "a", Successes: 3})), false},
		{"faults spread wider than the window do not open",
			every(0, 3*time.Second, 20, fault("a")), false},
		{"a relay refusing everything opens", merge(
			every(0, 20*time.Millisecond, 3, refused("a")),
			every(10*time.Millisecond, 20*time.Millisecond, 3, refused("b"))), true},
		{"a relay that goes down after a healthy run opens: earlier successes do not count", merge(
			every(0, time.Millisecond, 5000, success("a")),
			every(5*time.Second, 10*time.Millisecond, 5, fault("b"))), true},
		{"a relay down while it throttles the last few sends still opens", merge(
			every(0, time.Millisecond, 50, throttle("a")),
			every(20*time.Millisecond, 10*time.Millisecond, 5, fault("b"))), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Circuit{State: Closed, Cooldown: DefaultBaseCooldown}
			for i, e := range tt.events {
				c = Next(c, e.ev, at(e.at), Policy{})
				if c.State != Closed && !tt.wantOpen {
					t.Fatalf("event %d (%+v at %v) left the circuit %v: %+v", i, e.ev, e.at, c.State, c)
				}
			}
			if got := c.State == Open; got != tt.wantOpen {
				t.Errorf("after %d events: %+v, want open %v", len(tt.events), c, tt.wantOpen)
			}
		})
	}
}

func TestHealth(t *testing.T) {
	tests := []struct {
		c     Circuit
		owner string
		want  Health
	}{
		{Circuit{State: Closed}, "a", Healthy},
		{Circuit{State: Closed, Failures: 1}, "a", Degraded},
		{Circuit{State: Open, Failures: 5}, "a", Unavailable},
		{Circuit{State: HalfOpen, ProbeOwner: "a"}, "a", Degraded},
		{Circuit{State: HalfOpen, ProbeOwner: "a"}, "b", Unavailable},
		{Circuit{State: HalfOpen, ProbeOwner: "a"}, "", Unavailable},
	}
	for _, tt := range tests {
		if got := tt.c.Health(tt.owner); got != tt.want {
			t.Errorf("%+v.Health(%q) = %v, want %v", tt.c, tt.owner, got, tt.want)
		}
	}
}

func TestClaimable(t *testing.T) {
	tests := []struct {
		c    Circuit
		now  time.Time
		want bool
	}{
		{Circuit{State: Closed}, t0, false},
		{Circuit{State: Open, OpenUntil: at(time.Second)}, t0, false},
		{Circuit{State: Open, OpenUntil: at(time.Second)}, at(time.Second), true},
		{Circuit{State: HalfOpen, ProbeUntil: at(time.Second)}, t0, false},
		{Circuit{State: HalfOpen, ProbeUntil: at(time.Second)}, at(2 * time.Second), true},
	}
	for _, tt := range tests {
		if got := tt.c.Claimable(tt.now); got != tt.want {
			t.Errorf("%+v.Claimable(%v) = %v, want %v", tt.c, tt.now, got, tt.want)
		}
	}
}

func TestStateNames(t *testing.T) {
	for _, s := range states {
		got, err := parseState(s.String())
		if err != nil || got != s {
			t.Errorf("parseState(%q) = %v, %v", s.String(), got, err)
		}
	}
	if _, err := parseState("ajar"); err == nil {
		t.Error("parseState(ajar) succeeded")
	}
	if got := State(9).String(); got != "State(9)" {
		t.Errorf("State(9) = %q", got)
	}
}

func TestPolicy(t *testing.T) {
	tests := []struct {
		name    string
		p       Policy
		wantErr string
	}{
		{name: "defaults", p: Policy{}},
		{name: "threshold", p: Policy{FailureThreshold: -1}, wantErr: "FailureThreshold -1"},
		{name: "base", p: Policy{BaseCooldown: time.Microsecond}, wantErr: "BaseCooldown 1µs"},
		{name: "max below base", p: Policy{BaseCooldown: time.Minute, MaxCooldown: time.Second}, wantErr: "MaxCooldown 1s"},
		{name: "growth", p: Policy{Growth: -2}, wantErr: "Growth -2"},
		{name: "timeout growth", p: Policy{TimeoutGrowth: -1}, wantErr: "TimeoutGrowth -1"},
		{name: "probe timeout", p: Policy{ProbeTimeout: -time.Second}, wantErr: "ProbeTimeout -1s"},
		{name: "refresh", p: Policy{RefreshInterval: -time.Second}, wantErr: "RefreshInterval -1s"},
		{name: "window", p: Policy{Window: -time.Second}, wantErr: "Window -1s"},
		{name: "floor negative", p: Policy{SuccessFloor: -0.1}, wantErr: "SuccessFloor -0.1"},
		{name: "floor above 1", p: Policy{SuccessFloor: 1.5}, wantErr: "SuccessFloor 1.5"},
		{name: "flush", p: Policy{FlushInterval: -time.Second}, wantErr: "FlushInterval -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.p.WithDefaults()
			err := p.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
	d := Policy{}.WithDefaults()
	if d.FailureThreshold != 5 || d.BaseCooldown != 30*time.Second || d.MaxCooldown != time.Hour || d.Growth != 2 ||
		d.TimeoutGrowth != 4 || d.ProbeTimeout != 30*time.Second || d.RefreshInterval != time.Second || d.NowFunc == nil ||
		d.Window != 10*time.Second || d.SuccessFloor != 0.05 || d.FlushInterval != time.Second {
		t.Errorf("defaults = %+v", d)
	}
}
