package circuit

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestNext(t *testing.T) {
	p := Policy{FailureThreshold: 3, BaseCooldown: 30 * time.Second, MaxCooldown: time.Hour,
		Growth: 2, TimeoutGrowth: 4, ProbeTimeout: 10 * time.Second}
	closed := Circuit{State: Closed, Cooldown: 30 * time.Second}
	openAt := func(failures int, cooldown time.Duration, since time.Time, class string) Circuit {
		return Circuit{State: Open, Failures: failures, Cooldown: cooldown, OpenedAt: since,
			OpenUntil: since.Add(cooldown), LastClass: class}
	}
	halfOpen := func(c Circuit, owner string, until time.Time) Circuit {
		c.State, c.ProbeOwner, c.ProbeUntil = HalfOpen, owner, until
		return c
	}
	withFailures := func(c Circuit, n int, class string) Circuit {
		c.Failures, c.LastClass = n, class
		return c
	}
	fail := func(owner string) Event { return Event{Outcome: Failure, Class: "throttled", Owner: owner} }
	ok := func(owner string) Event { return Event{Outcome: Success, Owner: owner} }
	claim := func(owner string) Event { return Event{Claim: true, Owner: owner} }
	open1 := openAt(3, 30*time.Second, t0, "throttled")

	tests := []struct {
		name string
		c    Circuit
		ev   Event
		now  time.Time
		want Circuit
	}{
		// closed
		{"closed: success without failures changes nothing", closed, ok("a"), t0, closed},
		{"closed: a fault counts", closed, fail("a"), t0, withFailures(closed, 1, "throttled")},
		{"closed: success resets the count", withFailures(closed, 2, "transient"), ok("b"), t0,
			Circuit{State: Closed, Cooldown: 30 * time.Second, LastClass: "transient"}},
		{"closed: the threshold-th fault opens with the base cooldown", withFailures(closed, 2, "transient"), fail("b"), t0,
			openAt(3, 30*time.Second, t0, "throttled")},
		{"closed: timeouts count like faults", withFailures(closed, 2, "transient"),
			Event{Outcome: TimeoutFailure, Class: "transient", Owner: "a"}, t0, openAt(3, 30*time.Second, t0, "transient")},
		{"closed: first opening uses the base even after a long cooldown", Circuit{State: Closed, Failures: 2, Cooldown: time.Hour},
			fail("a"), t0, openAt(3, 30*time.Second, t0, "throttled")},
		{"closed: auth opens at once", closed, Event{Outcome: AuthFailure, Class: "auth", Owner: "a"}, t0,
			openAt(1, 30*time.Second, t0, "auth")},
		{"closed: a claim changes nothing", closed, claim("a"), t0, closed},
		{"closed: an invalid outcome changes nothing", closed, Event{Outcome: 0, Owner: "a"}, t0, closed},
		// open
		{"open: failures are ignored", open1, fail("a"), at(time.Second), open1},
		{"open: timeouts are ignored", open1, Event{Outcome: TimeoutFailure, Owner: "a"}, at(time.Second), open1},
		{"open: auth failures are ignored", open1, Event{Outcome: AuthFailure, Owner: "a"}, at(time.Second), open1},
		{"open: successes are ignored", open1, ok("a"), at(time.Second), open1},
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
			Circuit{State: Closed, Cooldown: 30 * time.Second, LastClass: "throttled"}},
		{"half-open: success after a longer cooldown resets it to base", halfOpen(openAt(9, 8*time.Minute, t0, "transient"), "a", at(9*time.Minute)),
			ok("a"), at(8*time.Minute + time.Second), Circuit{State: Closed, Cooldown: 30 * time.Second, LastClass: "transient"}},
		{"half-open: probe failure doubles the cooldown", halfOpen(open1, "a", at(40*time.Second)), fail("a"), at(35 * time.Second),
			openAt(4, time.Minute, at(35*time.Second), "throttled")},
		{"half-open: probe timeout multiplies by TimeoutGrowth", halfOpen(open1, "a", at(40*time.Second)),
			Event{Outcome: TimeoutFailure, Class: "transient", Owner: "a"}, at(35 * time.Second),
			openAt(4, 2*time.Minute, at(35*time.Second), "transient")},
		{"half-open: probe auth failure grows like a failure", halfOpen(open1, "a", at(40*time.Second)),
			Event{Outcome: AuthFailure, Class: "auth", Owner: "a"}, at(35 * time.Second),
			openAt(4, time.Minute, at(35*time.Second), "auth")},
		{"half-open: growth stops at MaxCooldown", halfOpen(openAt(9, 40*time.Minute, t0, "throttled"), "a", at(41*time.Minute)),
			fail("a"), at(40*time.Minute + time.Second), openAt(10, time.Hour, at(40*time.Minute+time.Second), "throttled")},
		{"half-open: a timeout at MaxCooldown stays there", halfOpen(openAt(9, time.Hour, t0, "throttled"), "a", at(61*time.Minute)),
			Event{Outcome: TimeoutFailure, Class: "transient", Owner: "a"}, at(60*time.Minute + time.Second),
			openAt(10, time.Hour, at(60*time.Minute+time.Second), "transient")},
		{"half-open: another worker's failure is a straggler", halfOpen(open1, "a", at(40*time.Second)), fail("b"), at(35 * time.Second),
			halfOpen(open1, "a", at(40*time.Second))},
		{"half-open: another worker's success does not close", halfOpen(open1, "a", at(40*time.Second)), ok("b"), at(35 * time.Second),
			halfOpen(open1, "a", at(40*time.Second))},
		{"half-open: the previous owner's late report after a takeover is ignored", halfOpen(open1, "b", at(50*time.Second)), fail("a"),
			at(45 * time.Second), halfOpen(open1, "b", at(50*time.Second))},
		{"half-open: the owner may still report after the deadline", halfOpen(open1, "a", at(40*time.Second)), ok("a"), at(45 * time.Second),
			Circuit{State: Closed, Cooldown: 30 * time.Second, LastClass: "throttled"}},
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
		c = Next(c, Event{Outcome: Failure, Owner: "a"}, t0, Policy{})
	}
	if c.State != Open || c.Cooldown != DefaultBaseCooldown || !c.OpenUntil.Equal(t0.Add(DefaultBaseCooldown)) {
		t.Errorf("after %d faults: %+v, want open for %v", DefaultFailureThreshold, c, DefaultBaseCooldown)
	}
	// Doubling from 30s reaches the 1h cap after 7 failed probes.
	now := c.OpenUntil
	for range 8 {
		c = Next(c, Event{Claim: true, Owner: "a"}, now, Policy{})
		c = Next(c, Event{Outcome: Failure, Owner: "a"}, now, Policy{})
		now = c.OpenUntil
	}
	if c.Cooldown != DefaultMaxCooldown {
		t.Errorf("cooldown after 8 failed probes = %v, want %v", c.Cooldown, DefaultMaxCooldown)
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
		d.TimeoutGrowth != 4 || d.ProbeTimeout != 30*time.Second || d.RefreshInterval != time.Second || d.NowFunc == nil {
		t.Errorf("defaults = %+v", d)
	}
}
