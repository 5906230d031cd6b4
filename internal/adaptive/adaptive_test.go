package adaptive

import (
	"math"
	"testing"
	"time"

	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/job"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fixed(v float64) func() float64 { return func() float64 { return v } }

func TestUniform(t *testing.T) {
	tests := []struct {
		name    string
		attempt int
		rnd     float64
		lo, hi  time.Duration
	}{
		{"attempt 1 low draw", 1, 0, 250 * time.Millisecond, 250 * time.Millisecond},
		{"attempt 1 high draw", 1, 0.999999, 749 * time.Millisecond, 751 * time.Millisecond},
		{"attempt 2 grows by 1.5", 2, 0.5, 750 * time.Millisecond, 751 * time.Millisecond},
		{"capped at 60s ±50%", 40, 0.5, 60 * time.Second, 60*time.Second + time.Millisecond},
		{"attempt 0 treated as 1", 0, 0, 250 * time.Millisecond, 250 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &Uniform{Float64Func: fixed(tt.rnd)}
			for _, class := range []failure.Class{failure.Transient, failure.Throttled, failure.Permanent} {
				d := u.Decide(Inputs{Class: class, Attempt: tt.attempt, Now: t0})
				if !d.Retry || d.Delay < tt.lo || d.Delay > tt.hi || !d.NotBefore.Equal(t0.Add(d.Delay)) {
					t.Errorf("class %s: got %+v, want retry in [%v, %v]", class, d, tt.lo, tt.hi)
				}
			}
		})
	}
}

func TestReference(t *testing.T) {
	tests := []struct {
		name  string
		in    Inputs
		rnd   float64
		retry bool
		want  time.Duration
	}{
		{"no lag full success: base*0.5", Inputs{Class: failure.Transient, SuccessRate: 1}, 0.999999999, true, 500 * time.Millisecond},
		{"jitter low half", Inputs{Class: failure.Transient, SuccessRate: 1}, 0, true, 250 * time.Millisecond},
		{"lag 1023: log2(1024)=10", Inputs{Class: failure.Throttled, Lag: 1023, SuccessRate: 1}, 0.999999999, true, 10 * time.Second},
		{"success 0.5 quadruples", Inputs{Class: failure.Transient, Lag: 1, SuccessRate: 0.5}, 0.999999999, true, 4 * time.Second},
		{"success floored at 0.1", Inputs{Class: failure.Transient, Lag: 1, SuccessRate: 0}, 0.999999999, true, 100 * time.Second},
		{"capped", Inputs{Class: failure.Transient, Lag: 1 << 20, SuccessRate: 0.1}, 0.999999999, true, 10 * time.Minute},
		{"permanent not retried", Inputs{Class: failure.Permanent}, 0, false, 0},
		{"auth retried (class-blind)", Inputs{Class: failure.Auth, SuccessRate: 1}, 0.999999999, true, 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Now = t0
			d := (&Reference{Float64Func: fixed(tt.rnd)}).Decide(tt.in)
			if d.Retry != tt.retry || (d.Delay-tt.want).Abs() > time.Millisecond {
				t.Errorf("got %+v, want retry=%v delay %v", d, tt.retry, tt.want)
			}
		})
	}
}

func TestAdaptive(t *testing.T) {
	a, err := NewAdaptive(AdaptiveConfig{Float64Func: fixed(0.5), ThrottleSpread: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		in     Inputs
		retry  bool
		reason string
		want   time.Duration
	}{
		{"permanent: no retry", Inputs{Class: failure.Permanent, Attempt: 1}, false, ReasonPermanent, 0},
		{"auth: failover", Inputs{Class: failure.Auth, Attempt: 1}, false, ReasonFailover, 0},
		{"throttled honours retry-after", Inputs{Class: failure.Throttled, Attempt: 1, RetryAfter: 30 * time.Second, SuccessRate: 1}, true, ReasonThrottled, 30*time.Second + 500*time.Millisecond},
		{"throttled waits for a later cool-down", Inputs{Class: failure.Throttled, Attempt: 1, RetryAfter: 10 * time.Second, RelayCooldownUntil: t0.Add(time.Minute), SuccessRate: 1}, true, ReasonThrottled, time.Minute + 500*time.Millisecond},
		{"throttled: hint beats an earlier cool-down", Inputs{Class: failure.Throttled, Attempt: 1, RetryAfter: 2 * time.Minute, RelayCooldownUntil: t0.Add(time.Minute), SuccessRate: 1}, true, ReasonThrottled, 2*time.Minute + 500*time.Millisecond},
		{"throttled: attempt does not grow the wait", Inputs{Class: failure.Throttled, Attempt: 9, RetryAfter: 30 * time.Second, SuccessRate: 1}, true, ReasonThrottled, 30*time.Second + 500*time.Millisecond},
		{"throttled without hint: default wait", Inputs{Class: failure.Throttled, Attempt: 3, SuccessRate: 1}, true, ReasonThrottled, 5*time.Second + 500*time.Millisecond},
		{"throttled without hint, low success: bounded x2", Inputs{Class: failure.Throttled, Attempt: 3, SuccessRate: 0.01}, true, ReasonThrottled, 10*time.Second + 500*time.Millisecond},
		{"transient attempt 1: full jitter of base", Inputs{Class: failure.Transient, Attempt: 1, SuccessRate: 1}, true, ReasonFailed, 500 * time.Millisecond},
		{"transient attempt 4: base*8", Inputs{Class: failure.Transient, Attempt: 4, SuccessRate: 1}, true, ReasonFailed, 4 * time.Second},
		{"throttles do not inflate growth", Inputs{Class: failure.Transient, Attempt: 4, Throttles: 3, SuccessRate: 1}, true, ReasonFailed, 500 * time.Millisecond},
		{"transient capped", Inputs{Class: failure.Transient, Attempt: 60, SuccessRate: 1}, true, ReasonFailed, 150 * time.Second},
		{"unknown treated as transient", Inputs{Class: failure.Unknown, Attempt: 2, SuccessRate: 1}, true, ReasonFailed, time.Second},
		{"lag multiplier bounded at 2", Inputs{Class: failure.Transient, Attempt: 1, Lag: 1 << 60, SuccessRate: 1}, true, ReasonFailed, time.Second},
		{"lag 1023 adds half", Inputs{Class: failure.Transient, Attempt: 1, Lag: 1023, SuccessRate: 1}, true, ReasonFailed, 750 * time.Millisecond},
		{"success multiplier 1/rate", Inputs{Class: failure.Transient, Attempt: 1, SuccessRate: 0.8}, true, ReasonFailed, 625 * time.Millisecond},
		{"success multiplier bounded at 2", Inputs{Class: failure.Transient, Attempt: 1, SuccessRate: 0}, true, ReasonFailed, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Now = t0
			d := a.Decide(tt.in)
			if d.Retry != tt.retry || d.Reason != tt.reason || (d.Delay-tt.want).Abs() > time.Millisecond || !d.NotBefore.Equal(t0.Add(d.Delay)) {
				t.Errorf("got %+v, want retry=%v reason %q delay %v", d, tt.retry, tt.reason, tt.want)
			}
		})
	}
}

// By default a throttled job waits exactly the relay's hint: the delay
// tier and the scheduler's jitter do the spreading.
func TestAdaptiveDefaultThrottleHasNoSpread(t *testing.T) {
	a, err := NewAdaptive(AdaptiveConfig{Float64Func: fixed(0.99)})
	if err != nil {
		t.Fatal(err)
	}
	d := a.Decide(Inputs{Class: failure.Throttled, Attempt: 1, RetryAfter: 2 * time.Second, SuccessRate: 1, Now: t0})
	if d.Delay != 2*time.Second {
		t.Errorf("delay %v, want exactly the 2s hint", d.Delay)
	}
}

func TestAdaptiveConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  AdaptiveConfig
	}{
		{"cap below base", AdaptiveConfig{TransientBase: time.Minute, TransientCap: time.Second}},
		{"negative spread", AdaptiveConfig{ThrottleSpread: -1}},
		{"lag factor below 1", AdaptiveConfig{MaxLagFactor: 0.5}},
		{"success factor below 1", AdaptiveConfig{MaxSuccessFactor: 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewAdaptive(tt.cfg); err == nil {
				t.Error("NewAdaptive accepted a bad config")
			}
		})
	}
}

func TestWindow(t *testing.T) {
	tests := []struct {
		name   string
		events []struct {
			at    time.Duration
			relay string
			ok    bool
		}
		at      time.Duration
		relay   string
		rate    float64
		samples int
	}{
		{"empty is optimistic", nil, 0, "a", 1, 0},
		{"few samples are optimistic", repeat(5, 0, "a", false), time.Second, "a", 1, 5},
		{"rate over window", append(repeat(15, 0, "a", true), repeat(5, 0, "a", false)...), time.Second, "a", 0.75, 20},
		{"other relay not counted", append(repeat(20, 0, "a", false), repeat(20, 0, "b", true)...), time.Second, "b", 1, 20},
		{"old buckets drop out", append(repeat(20, 0, "a", false), repeat(20, 20*time.Second, "a", true)...), 31 * time.Second, "a", 1, 20},
		{"both buckets inside window", append(repeat(20, 0, "a", false), repeat(20, 20*time.Second, "a", true)...), 25 * time.Second, "a", 0.5, 40},
		{"ring slot reused after wrap", append(repeat(20, 0, "a", false), repeat(20, 30*time.Second, "a", true)...), 30 * time.Second, "a", 1, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := NewWindow(WindowConfig{})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range tt.events {
				w.Observe(t0.Add(e.at), e.relay, e.ok)
			}
			r, n := w.Rate(t0.Add(tt.at), tt.relay)
			if r != tt.rate || n != tt.samples {
				t.Errorf("Rate = %v, %d; want %v, %d", r, n, tt.rate, tt.samples)
			}
		})
	}
	w, _ := NewWindow(WindowConfig{})
	for i := range 30 {
		w.Observe(t0, []string{"a", "b", "c"}[i%3], i%3 != 0)
	}
	if r, n := w.Overall(t0); n != 30 || r < 0.66 || r > 0.67 {
		t.Errorf("Overall = %v, %d; want 2/3, 30", r, n)
	}
}

func repeat(n int, at time.Duration, relay string, ok bool) []struct {
	at    time.Duration
	relay string
	ok    bool
} {
	out := make([]struct {
		at    time.Duration
		relay string
		ok    bool
	}, n)
	for i := range out {
		out[i].at, out[i].relay, out[i].ok = at, relay, ok
	}
	return out
}

func TestBudgets(t *testing.T) {
	b, err := NewBudgets(nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		priority job.Priority
		takes    int
		at       time.Duration
		ok       bool
		wait     time.Duration
	}{
		{"urgent burst 100", job.PriorityUrgent, 100, 0, true, 0},
		{"urgent 101st waits 1/5 s", job.PriorityUrgent, 1, 0, false, 200 * time.Millisecond},
		{"normal burst 30", job.PriorityNormal, 30, 0, true, 0},
		{"normal 31st waits 1s", job.PriorityNormal, 1, 0, false, time.Second},
		{"normal next waits 2s (reserved)", job.PriorityNormal, 1, 0, false, 2 * time.Second},
		{"empty priority is normal", "", 1, 0, false, 3 * time.Second},
		{"bulk burst 5", job.PriorityBulk, 5, 0, true, 0},
		{"bulk 6th waits 5s", job.PriorityBulk, 1, 0, false, 5 * time.Second},
		{"bulk refills at 0.2/s", job.PriorityBulk, 1, 15 * time.Second, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ok bool
			var until time.Time
			for range tt.takes {
				ok, until = b.Take(t0.Add(tt.at), tt.priority)
			}
			if ok != tt.ok || until.Sub(t0.Add(tt.at)) != tt.wait {
				t.Errorf("Take = %v, +%v; want %v, +%v", ok, until.Sub(t0.Add(tt.at)), tt.ok, tt.wait)
			}
		})
	}
	if _, err := NewBudgets(map[job.Priority]Bucket{job.PriorityNormal: {Burst: 1, PerSecond: 1}}, t0); err == nil {
		t.Error("NewBudgets accepted a config without urgent and bulk")
	}
}

func TestBudgetsEarnedByFirstAttempts(t *testing.T) {
	buckets := func(normal Bucket) map[job.Priority]Bucket {
		return map[job.Priority]Bucket{
			job.PriorityUrgent: {Burst: 1, PerSecond: 1}, job.PriorityNormal: normal, job.PriorityBulk: {Burst: 1, PerSecond: 1},
		}
	}
	tests := []struct {
		name   string
		bucket Bucket
		first  int // first attempts before the retries
		takes  int // retries at t0
		ok     bool
		wait   time.Duration // of the last take
		tokens float64       // after the takes
	}{
		{"no share: the 3rd retry waits for the refill", Bucket{Burst: 2, PerSecond: 1}, 100, 3, false, time.Second, -1},
		{"ten first attempts at 10 % earn one retry", Bucket{Burst: 2, PerSecond: 1, Share: 0.1}, 10, 3, true, 0, 0},
		{"nine earn none yet", Bucket{Burst: 2, PerSecond: 1, Share: 0.1}, 9, 3, false, time.Second, -1},
		{"earned tokens are kept up to the burst", Bucket{Burst: 2, PerSecond: 1, Share: 0.5}, 100, 4, true, 0, 0},
		{"beyond burst plus earned, retries wait", Bucket{Burst: 2, PerSecond: 1, Share: 0.5}, 100, 5, false, time.Second, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBudgets(buckets(tt.bucket), t0)
			if err != nil {
				t.Fatal(err)
			}
			for range tt.first {
				b.Earn(job.PriorityNormal)
			}
			var ok bool
			var until time.Time
			for range tt.takes {
				ok, until = b.Take(t0, job.PriorityNormal)
			}
			if ok != tt.ok || until.Sub(t0) != tt.wait {
				t.Errorf("last Take = %v, +%v; want %v, +%v", ok, until.Sub(t0), tt.ok, tt.wait)
			}
			if got := b.Tokens(t0, job.PriorityNormal); math.Abs(got-tt.tokens) > 1e-9 {
				t.Errorf("Tokens = %v, want %v", got, tt.tokens)
			}
		})
	}
	if _, err := NewBudgets(buckets(Bucket{Burst: 1, PerSecond: 1, Share: 1}), t0); err == nil {
		t.Error("NewBudgets accepted a share of 1")
	}
}

func TestAIMD(t *testing.T) {
	type step struct {
		op    string // "ok", "throttle"
		at    time.Duration
		n     int
		limit int
	}
	tests := []struct {
		name  string
		cfg   AIMDConfig
		steps []step
	}{
		{"starts at initial", AIMDConfig{}, []step{{"ok", 0, 0, 4}}},
		{"additive: +1 per limit successes", AIMDConfig{}, []step{{"ok", 0, 4, 5}, {"ok", 0, 5, 6}}},
		{"bounded by max", AIMDConfig{Max: 5, Initial: 4}, []step{{"ok", 0, 100, 5}}},
		{"multiplicative decrease", AIMDConfig{Initial: 8}, []step{{"throttle", 0, 1, 4}}},
		{"one decrease per interval", AIMDConfig{Initial: 16}, []step{{"throttle", 0, 10, 8}, {"throttle", 999 * time.Millisecond, 1, 8}, {"throttle", time.Second, 1, 4}}},
		{"bounded by min", AIMDConfig{Initial: 2, Min: 2}, []step{{"throttle", 0, 1, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAIMD(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tt.steps {
				for range s.n {
					if s.op == "ok" {
						a.Blocked(t0.Add(s.at))
						a.OnSuccess(t0.Add(s.at))
					} else {
						a.OnThrottle(t0.Add(s.at))
					}
				}
				if got := a.Limit(); got != s.limit {
					t.Errorf("step %d: Limit = %d, want %d", i, got, s.limit)
				}
			}
		})
	}
	if _, err := NewAIMD(AIMDConfig{Min: 5, Max: 2}); err == nil {
		t.Error("NewAIMD accepted Max < Min")
	}
}

func TestFleetShare(t *testing.T) {
	tests := []struct {
		total   float64
		members int
		want    float64
	}{{100, 4, 25}, {100, 1, 100}, {100, 0, 100}, {0, 3, 0}, {-1, 3, 0}}
	for _, tt := range tests {
		if got := FleetShare(tt.total, tt.members); got != tt.want {
			t.Errorf("FleetShare(%v, %d) = %v, want %v", tt.total, tt.members, got, tt.want)
		}
	}
}

func TestRateLimiter(t *testing.T) {
	r := NewRateLimiter(t0, 10, 2)
	steps := []struct {
		name string
		do   func() time.Time
		want time.Time
	}{
		{"burst 1", func() time.Time { return r.Reserve(t0) }, t0},
		{"burst 2", func() time.Time { return r.Reserve(t0) }, t0},
		{"third waits 100ms", func() time.Time { return r.Reserve(t0) }, t0.Add(100 * time.Millisecond)},
		{"after re-set to 1/s the debt of one token is repaid at the new rate", func() time.Time { r.SetRate(t0, 1); return r.Reserve(t0) }, t0.Add(2 * time.Second)},
		{"unlimited", func() time.Time { r.SetRate(t0, 0); return r.Reserve(t0) }, t0},
	}
	for _, s := range steps {
		if got := s.do(); !got.Equal(s.want) {
			t.Errorf("%s: got +%v, want +%v", s.name, got.Sub(t0), s.want.Sub(t0))
		}
	}
	if !r.Allow(t0) {
		t.Error("unlimited limiter refused")
	}
}

func TestPressureGuard(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		readings [][2]time.Duration
		want     float64
	}{
		{"calm stays 1", [][2]time.Duration{{ms, ms}}, 1},
		{"a busy machine's queueing is not pressure", [][2]time.Duration{{5 * ms, 20 * ms}}, 1},
		{"gc pause halves", [][2]time.Duration{{50 * ms, 0}}, 0.5},
		{"sched latency halves", [][2]time.Duration{{0, 50 * ms}}, 0.5},
		{"floor", [][2]time.Duration{{time.Second, 0}, {time.Second, 0}, {time.Second, 0}, {time.Second, 0}, {time.Second, 0}}, 0.1},
		{"hysteresis: in-between holds", [][2]time.Duration{{50 * ms, 0}, {30 * ms, ms}}, 0.5},
		{"calm recovers by step", [][2]time.Duration{{50 * ms, 0}, {ms, ms}, {ms, ms}}, 0.7},
		{"recovers to exactly 1", [][2]time.Duration{{50 * ms, 0}, {ms, ms}, {ms, ms}, {ms, ms}, {ms, ms}, {ms, ms}, {ms, ms}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := NewPressureGuard(PressureConfig{})
			if err != nil {
				t.Fatal(err)
			}
			var f float64
			for _, r := range tt.readings {
				f = g.Observe(r[0], r[1])
			}
			if f < tt.want-1e-9 || f > tt.want+1e-9 || g.Factor() != f {
				t.Errorf("factor = %v, want %v", f, tt.want)
			}
		})
	}
	g, _ := NewPressureGuard(PressureConfig{})
	g.Observe(time.Second, 0)
	if got := g.Apply(20); got != 10 {
		t.Errorf("Apply(20) at 0.5 = %d, want 10", got)
	}
}

func TestAIMDPlateauAndCause(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		run  func(a *AIMD) int
		want int
	}{
		{"no growth unless blocked", func(a *AIMD) int {
			for range 100 {
				a.OnSuccess(t0)
			}
			return a.Limit()
		}, 4},
		{"growth stops a second after the last block", func(a *AIMD) int {
			a.Blocked(t0)
			for range 100 {
				a.OnSuccess(t0.Add(2 * time.Second))
			}
			return a.Limit()
		}, 4},
		{"fast back to one below the ceiling", func(a *AIMD) int {
			a.Blocked(t0)
			for range 4 + 5 {
				a.OnSuccess(t0) // 4 -> 6
			}
			a.OnThrottleSent(t0, t0) // ceiling 6, limit 3
			for range 3 + 4 {
				a.OnSuccess(t0) // 3 -> 5 at the normal pace
			}
			return a.Limit()
		}, 5},
		{"slow near the ceiling: Probe/limit per success", func(a *AIMD) int {
			a.Blocked(t0)
			for range 9 {
				a.OnSuccess(t0)
			}
			a.OnThrottleSent(t0, t0)
			for range 7 + 5 + 30 {
				a.OnSuccess(t0) // 3 -> 5, then 35 x 0.1/5: about 5.7
			}
			return a.Limit()
		}, 5},
		{"refusals of sends started before the decrease count once", func(a *AIMD) int {
			a.OnThrottleSent(t0.Add(10*ms), t0) // 4 -> 2
			a.OnThrottleSent(t0.Add(11*ms), t0.Add(5*ms))
			return a.Limit()
		}, 2},
		{"a refusal of a send started after the decrease decreases again", func(a *AIMD) int {
			a.OnThrottleSent(t0.Add(10*ms), t0) // 4 -> 2
			a.OnThrottleSent(t0.Add(20*ms), t0.Add(15*ms))
			return a.Limit()
		}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAIMD(AIMDConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.run(a); got != tt.want {
				t.Errorf("Limit = %d, want %d", got, tt.want)
			}
		})
	}
	if _, err := NewAIMD(AIMDConfig{Probe: 2}); err == nil {
		t.Error("NewAIMD accepted Probe 2")
	}
}

func TestPacer(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		cfg      PacerConfig
		run      func(p *Pacer) any
		want     any
		wantRate float64
	}{
		{"first send free", PacerConfig{}, func(p *Pacer) any { return p.Next(t0).Sub(t0) }, time.Duration(0), 10},
		{"second waits 1/rate", PacerConfig{}, func(p *Pacer) any { p.Take(t0); return p.Next(t0).Sub(t0) }, 100 * ms, 10},
		{"take refused without a token", PacerConfig{}, func(p *Pacer) any { p.Take(t0); return p.Take(t0.Add(50 * ms)) }, false, 10},
		{"token back after 1/rate", PacerConfig{}, func(p *Pacer) any { p.Take(t0); return p.Take(t0.Add(100 * ms)) }, true, 10},
		{"no growth while not limiting", PacerConfig{}, func(p *Pacer) any { p.OnSuccess(t0); return nil }, nil, 10},
		{"slow start: +1 per success while limiting", PacerConfig{}, func(p *Pacer) any {
			p.Take(t0)
			p.Next(t0)
			for range 5 {
				p.OnSuccess(t0)
			}
			return nil
		}, nil, 15},
		{"decrease by factor", PacerConfig{Initial: 40}, func(p *Pacer) any { return p.OnThrottleSent(t0, t0) }, true, 28},
		{"below the plateau under the ceiling: back by half the distance per second", PacerConfig{Initial: 40}, func(p *Pacer) any {
			p.OnThrottleSent(t0, t0) // 28, ceiling 40, plateau from 38
			p.Next(t0)
			p.Take(t0)
			p.Next(t0)
			p.OnSuccess(t0) // + (38-28)/2 / 28
			return nil
		}, nil, 28 + 5.0/28},
		{"on the plateau under the ceiling: probe by Probe of the rate per second", PacerConfig{Initial: 100}, func(p *Pacer) any {
			p.OnThrottle(t0) // 70, ceiling 100, plateau from 95
			p.rate = 97
			p.Take(t0)
			p.Next(t0)
			p.OnSuccess(t0) // + 0.01*97/97
			return nil
		}, nil, 97 + 0.97/97},
		{"a slow relay probes by at least Increase", PacerConfig{Initial: 5}, func(p *Pacer) any {
			p.OnThrottle(t0) // 3.5, ceiling 5
			p.rate = 5
			p.Take(t0)
			p.Next(t0)
			p.OnSuccess(t0) // + 0.5/5, not 0.04*5/5
			return nil
		}, nil, 5 + 0.5/5},
		{"a refusal while the relay accepts less than the rate cuts from what it accepts", PacerConfig{Initial: 50}, func(p *Pacer) any {
			return p.OnThrottleAccepted(t0, t0, 10) // the relay fell to 10/s
		}, true, 7},
		{"after a first cut, an accepted rate above the pacer's is the usual cut", PacerConfig{Initial: 50}, func(p *Pacer) any {
			p.OnThrottle(t0.Add(-2 * time.Second)) // 35
			return p.OnThrottleAccepted(t0, t0, 80)
		}, true, 24.5},
		{"in slow start, a refusal while the relay accepts more is someone else's burst", PacerConfig{Initial: 50}, func(p *Pacer) any {
			return p.OnThrottleAccepted(t0, t0, 80)
		}, false, 50},
		{"in slow start, an accepted rate not known yet holds the rate", PacerConfig{Initial: 50}, func(p *Pacer) any {
			return p.OnThrottleAccepted(t0, t0, math.Inf(1))
		}, false, 50},
		{"in slow start, an accepted rate the caller does not know cuts", PacerConfig{Initial: 50}, func(p *Pacer) any {
			return p.OnThrottleAccepted(t0, t0, 0)
		}, true, 35},
		{"a slow start that held for someone else's burst grows again a second later", PacerConfig{Initial: 10}, func(p *Pacer) any {
			p.OnThrottleAccepted(t0, t0, math.Inf(1))
			for _, at := range []time.Duration{500 * ms, 1500 * ms} { // +0 while holding, then +1
				p.Take(t0.Add(at))
				p.Next(t0.Add(at))
				p.OnSuccess(t0.Add(at))
			}
			return nil
		}, nil, 11},
		{"above the ceiling: the gain is the distance, doubling it per second", PacerConfig{Initial: 40}, func(p *Pacer) any {
			p.OnThrottle(t0) // 28, ceiling 40
			p.rate = 42
			p.Take(t0)
			p.Next(t0)
			p.OnSuccess(t0) // + 2/42
			return nil
		}, nil, 42 + 2.0/42},
		{"far above the ceiling: at most a tenth of the rate per second", PacerConfig{Initial: 40}, func(p *Pacer) any {
			p.OnThrottle(t0) // 28, ceiling 40
			p.rate = 60
			p.Take(t0)
			p.Next(t0)
			p.OnSuccess(t0) // + min(20, 6)/60
			return nil
		}, nil, 60 + 6.0/60},
		{"in one second of successes the rate recovers about half of a cut", PacerConfig{Initial: 100}, func(p *Pacer) any {
			p.OnThrottle(t0) // 70, ceiling 100
			at := t0
			for at.Before(t0.Add(time.Second)) {
				p.Take(at)
				p.Next(at)
				p.OnSuccess(at)
				at = at.Add(time.Duration(float64(time.Second) / p.Rate()))
			}
			r := p.Rate() // 70 + (95-70)/2 with the distance shrinking as it goes
			return r > 78 && r < 85
		}, true, -1}, // -1: the rate is checked by run
		{"scale moves rate and ceiling", PacerConfig{Initial: 40}, func(p *Pacer) any {
			p.OnThrottle(t0) // 28, ceiling 40
			p.Scale(t0, 0.5) // 14, ceiling 20, plateau from 19
			p.Next(t0)
			p.Take(t0)
			p.Next(t0)
			p.OnSuccess(t0) // + (19-14)/2 / 14
			return nil
		}, nil, 14 + 2.5/14},
		{"stale refusal ignored", PacerConfig{Initial: 40}, func(p *Pacer) any {
			p.OnThrottleSent(t0.Add(20*ms), t0.Add(10*ms))
			return p.OnThrottleSent(t0.Add(2*time.Second), t0)
		}, false, 28},
		{"fresh refusal within interval ignored", PacerConfig{Initial: 40}, func(p *Pacer) any {
			p.OnThrottleSent(t0, t0)
			return p.OnThrottleSent(t0.Add(500*ms), t0.Add(100*ms))
		}, false, 28},
		{"fresh refusal after interval decreases", PacerConfig{Initial: 40}, func(p *Pacer) any {
			p.OnThrottleSent(t0, t0)
			return p.OnThrottleSent(t0.Add(1500*ms), t0.Add(1200*ms))
		}, true, 19.6},
		{"timer rule: one decrease per interval", PacerConfig{Initial: 40}, func(p *Pacer) any {
			p.OnThrottle(t0)
			return p.OnThrottle(t0.Add(999 * ms))
		}, false, 28},
		{"bounded by min", PacerConfig{Initial: 1}, func(p *Pacer) any { return p.OnThrottle(t0) }, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPacer(tt.cfg, t0)
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.run(p); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if r := p.Rate(); tt.wantRate >= 0 && (r < tt.wantRate-1e-9 || r > tt.wantRate+1e-9) {
				t.Errorf("Rate = %v, want %v", r, tt.wantRate)
			}
		})
	}
	for _, cfg := range []PacerConfig{{Factor: 1}, {Initial: 5000}, {Min: -1}, {Burst: -1}, {Probe: 1}, {Probe: -0.1}} {
		if _, err := NewPacer(cfg, t0); err == nil {
			t.Errorf("NewPacer accepted %+v", cfg)
		}
	}
}
