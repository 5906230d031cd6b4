package adaptive

import (
	"math"
	"testing"
	"time"

	"github.com/postline/postline/internal/failure"
)

func TestSendControl(t *testing.T) {
	ms := time.Millisecond
	type step struct {
		at       time.Duration
		op       string // "admit", "ok", "conns", "rate", "other", "members", "seed"
		inFlight int    // admit: sends in flight; members: live workers; seed: the others' rate (one worker)
		sent     time.Duration
	}
	type want struct {
		admitted  bool
		retryAt   time.Duration // -1: zero time (wait for a send to finish)
		limit     int
		rate      float64 // math.Inf(1): unpaced
		fleet     float64
		decreases map[string]int
	}
	tests := []struct {
		name  string
		cfg   SendControlConfig
		steps []step
		want  want
	}{
		{
			name:  "admits below the limit, unpaced",
			cfg:   SendControlConfig{AIMD: AIMDConfig{Max: 8, Initial: 4}},
			steps: []step{{0, "admit", 3, 0}},
			want:  want{admitted: true, limit: 4, rate: math.Inf(1), fleet: math.Inf(1)},
		},
		{
			name:  "holds at the concurrency limit until a send finishes",
			cfg:   SendControlConfig{AIMD: AIMDConfig{Max: 8, Initial: 4}},
			steps: []step{{0, "admit", 4, 0}},
			want:  want{retryAt: -1, limit: 4, rate: math.Inf(1), fleet: math.Inf(1)},
		},
		{
			name:  "a connection refusal cuts concurrency, not rate",
			cfg:   SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}},
			steps: []step{{0, "conns", 0, 0}},
			want:  want{retryAt: 0, admitted: false, limit: 4, rate: math.Inf(1), fleet: math.Inf(1), decreases: map[string]int{ControllerConcurrency: 1}},
		},
		{
			name: "a rate refusal starts the pacer at the accepted rate cut by factor",
			cfg:  SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}},
			steps: append(append([]step{{0, "ok", 0, 0}}, repeatN(step{1500 * ms, "ok", 0, 0}, 40)...), // 40 accepted in the last second
				step{1600 * ms, "rate", 0, 1500 * ms}),
			want: want{limit: 8, rate: 28, fleet: math.Inf(1), decreases: map[string]int{ControllerRate: 1}},
		},
		{
			name: "refused within its first second of traffic, the pacer starts at the count in slow start",
			cfg:  SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}},
			steps: append(append([]step{{0, "ok", 0, 0}}, repeatN(step{400 * ms, "ok", 0, 0}, 39)...), // 40 in 0.5 s
				step{500 * ms, "rate", 0, 400 * ms}, // pacing at 40/s, not cut
				step{600 * ms, "rate", 0, 450 * ms}, // sent before pacing began: no cut
				step{600 * ms, "admit", 0, 0},
				step{600 * ms, "admit", 0, 0}, // held back: the rate limits
				step{600 * ms, "ok", 0, 0}),   // slow start: +1
			want: want{retryAt: 625 * ms, limit: 8, rate: 41, fleet: math.Inf(1), decreases: map[string]int{ControllerRate: 1}},
		},
		{
			name: "rate refusals while the relay accepts nothing do not start the pacer",
			cfg:  SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}},
			steps: append(repeatN(step{500 * ms, "rate", 0, 0}, 20),
				step{600 * ms, "rate", 0, 500 * ms}),
			want: want{limit: 8, rate: math.Inf(1), fleet: math.Inf(1)},
		},
		{
			name:  "a rate refusal among a trickle of sends does not start the pacer",
			cfg:   SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}},
			steps: append(repeatN(step{500 * ms, "ok", 0, 0}, 8), step{600 * ms, "rate", 0, 500 * ms}),
			want:  want{limit: 8, rate: math.Inf(1), fleet: math.Inf(1)},
		},
		{
			name: "a started pacer makes the next send wait",
			cfg:  SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}, Pacer: PacerConfig{Initial: 10}},
			steps: []step{
				{0, "admit", 0, 0},
				{0, "admit", 1, 0},
			},
			want: want{retryAt: 100 * ms, limit: 8, rate: 10, fleet: math.Inf(1)},
		},
		{
			name:  "a refusal that is neither is not a cut",
			cfg:   SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}},
			steps: []step{{0, "other", 0, 0}},
			want:  want{limit: 8, rate: math.Inf(1), fleet: math.Inf(1)},
		},
		{
			name: "the fleet rate is shared by the live members",
			cfg:  SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}, FleetRate: 100},
			steps: []step{
				{0, "members", 4, 0},
				{0, "admit", 0, 0},
				{0, "admit", 1, 0},
			},
			want: want{retryAt: 40 * ms, limit: 8, rate: math.Inf(1), fleet: 25},
		},
		{
			name:  "an unknown member count (zero) changes nothing",
			cfg:   SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}, FleetRate: 100},
			steps: []step{{0, "members", 2, 0}, {0, "members", 0, 0}},
			want:  want{limit: 8, rate: math.Inf(1), fleet: 50},
		},
		{
			name: "a worker joining shrinks a learned rate to the new share",
			cfg:  SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}, Pacer: PacerConfig{Initial: 30}},
			steps: []step{
				{0, "members", 2, 0}, // 30/s learned as one of two
				{0, "members", 3, 0}, // 20 each
			},
			want: want{limit: 8, rate: 20, fleet: math.Inf(1)},
		},
		{
			name: "a worker leaving grows a learned rate to the new share",
			cfg:  SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}, Pacer: PacerConfig{Initial: 30}},
			steps: []step{
				{0, "members", 3, 0}, // 30/s learned as one of three
				{0, "members", 2, 0}, // 45 each
			},
			want: want{limit: 8, rate: 45, fleet: math.Inf(1)},
		},
		{
			name: "a rate refusal while the relay accepts less than the pacer cuts from what it accepts",
			cfg:  SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}, Pacer: PacerConfig{Initial: 50}},
			steps: append(append([]step{{0, "ok", 0, 0}}, repeatN(step{1500 * ms, "ok", 0, 0}, 10)...), // 10 accepted in the last second
				step{1600 * ms, "rate", 0, 1500 * ms}),
			want: want{limit: 8, rate: 7, fleet: math.Inf(1), decreases: map[string]int{ControllerRate: 1}},
		},
		{
			name:  "the first group size does not rescale the rate learned in that group",
			cfg:   SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}, Pacer: PacerConfig{Initial: 30}},
			steps: []step{{0, "members", 0, 0}, {0, "members", 2, 0}},
			want:  want{limit: 8, rate: 30, fleet: math.Inf(1)},
		},
		{
			name:  "a joining worker is seeded with its share of the fleet's learned rate",
			cfg:   SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}},
			steps: []step{{0, "members", 3, 0}, {0, "seed", 100, 0}},
			want:  want{limit: 8, rate: 100.0 / 3, fleet: math.Inf(1)},
		},
		{
			name: "seeding before the group is described assumes two workers, then rescales",
			cfg:  SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}},
			steps: []step{
				{0, "seed", 60, 0},   // one other worker learned 60/s: 30 each
				{0, "members", 3, 0}, // the group turns out to be three
			},
			want: want{limit: 8, rate: 20, fleet: math.Inf(1)},
		},
		{
			name: "a seeded pacer probes from its share instead of slow start",
			cfg:  SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}},
			steps: []step{
				{0, "seed", 40, 0}, // 20/s
				{0, "admit", 0, 0},
				{0, "admit", 0, 0}, // held back: the rate limits
				{0, "ok", 0, 0},    // + max(0.5, 0.01*20)/20, not +1
			},
			want: want{retryAt: 50 * ms, limit: 8, rate: 20 + 0.5/20, fleet: math.Inf(1)},
		},
		{
			name:  "seeding a control that paces already changes nothing",
			cfg:   SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}, Pacer: PacerConfig{Initial: 10}},
			steps: []step{{0, "seed", 100, 0}},
			want:  want{limit: 8, rate: 10, fleet: math.Inf(1)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewSendControl(tt.cfg, nil, t0)
			if err != nil {
				t.Fatal(err)
			}
			var admitted bool
			var retryAt time.Time
			for _, s := range tt.steps {
				now := t0.Add(s.at)
				switch s.op {
				case "admit":
					admitted, retryAt = c.Admit(now, s.inFlight)
				case "ok":
					c.Done(now, t0.Add(s.sent), true, "")
				case "conns":
					c.Done(now, t0.Add(s.sent), false, failure.LimitConnections)
				case "rate":
					c.Done(now, t0.Add(s.sent), false, failure.LimitRate)
				case "other":
					c.Done(now, t0.Add(s.sent), false, "")
				case "members":
					c.SetMembers(now, s.inFlight)
				case "seed":
					c.Seed(now, LearnedRates{Sum: float64(s.inFlight), Workers: 1})
				}
			}
			if admitted != tt.want.admitted {
				t.Errorf("admitted = %v, want %v", admitted, tt.want.admitted)
			}
			switch {
			case tt.want.retryAt < 0 && !retryAt.IsZero():
				t.Errorf("retryAt = %v, want zero (wait for a send to finish)", retryAt)
			case tt.want.retryAt > 0 && !retryAt.Equal(t0.Add(tt.want.retryAt)):
				t.Errorf("retryAt = %v after t0, want %v", retryAt.Sub(t0), tt.want.retryAt)
			}
			if got := c.Limit(); got != tt.want.limit {
				t.Errorf("Limit = %d, want %d", got, tt.want.limit)
			}
			if got := c.Rate(); math.Abs(got-tt.want.rate) > 1e-9 && !(math.IsInf(got, 1) && math.IsInf(tt.want.rate, 1)) {
				t.Errorf("Rate = %v, want %v", got, tt.want.rate)
			}
			if got := c.FleetShare(); got != tt.want.fleet {
				t.Errorf("FleetShare = %v, want %v", got, tt.want.fleet)
			}
			for _, ctl := range []string{ControllerConcurrency, ControllerRate} {
				if got := c.Decreases(ctl); got != tt.want.decreases[ctl] {
					t.Errorf("Decreases(%s) = %d, want %d", ctl, got, tt.want.decreases[ctl])
				}
			}
		})
	}
}

// TestSendControlSharesALeaversRate: when the members sharing a relay
// shrink, a pacing control takes its own rate plus its part of the mean
// rate the others learned, per worker gone, never less than old/new times
// its own rate; a member joining, or others not heard lately, rescale by
// old/new only.
func TestSendControlSharesALeaversRate(t *testing.T) {
	tests := []struct {
		name     string
		own      float64 // the learned rate before
		from, to int     // members
		others   LearnedRates
		heardAgo time.Duration // before the change; 0: never heard
		want     float64
	}{
		{"a lone worker takes the rate the other sent at", 30, 2, 1, LearnedRates{62, 1}, time.Second, 92},
		{"without the others' rates it doubles its own", 30, 2, 1, LearnedRates{}, 0, 60},
		{"others heard too long ago do not count", 30, 2, 1, LearnedRates{62, 1}, 11 * time.Second, 60},
		{"never less than old/new of its own", 50, 2, 1, LearnedRates{10, 1}, time.Second, 100},
		{"a stale leaver's rate counts as the mean, not the sum", 50, 2, 1, LearnedRates{80, 2}, time.Second, 100},
		{"two of three leaving free two mean shares", 20, 3, 1, LearnedRates{100, 2}, time.Second, 120},
		{"two left of three split one mean share", 20, 3, 2, LearnedRates{100, 2}, time.Second, 45},
		{"a worker joining halves the rate, whatever the others", 60, 1, 2, LearnedRates{100, 1}, time.Second, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewSendControl(SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}, Pacer: PacerConfig{Initial: tt.own}}, nil, t0)
			if err != nil {
				t.Fatal(err)
			}
			c.SetMembers(t0, tt.from) // the group the rate was learned in
			at := t0.Add(20 * time.Second)
			if tt.heardAgo > 0 {
				c.Seed(at.Add(-tt.heardAgo), tt.others)
			}
			c.SetMembers(at, tt.to)
			if got := c.Rate(); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("rate %v at %d members, going to %d, others %+v: got %v, want %v",
					tt.own, tt.from, tt.to, tt.others, got, tt.want)
			}
		})
	}
}

// TestSendControlCatchesUpToItsShare: a pacing control cut far below its
// fair share of the fleet's learned total (the others' rates and its own,
// split over the workers that pace) climbs back toward that share, half
// the distance per second, instead of toward the rate it was cut from; one
// within half of its share, or sending alone, keeps its own course.
func TestSendControlCatchesUpToItsShare(t *testing.T) {
	const cutTo = 7.0 // 10 accepted in the last second, cut by 0.7
	ms := time.Millisecond
	tests := []struct {
		name    string
		members int
		others  LearnedRates
		// want is the rate after one success while the rate holds sends
		// back: 7 + gain/7, the gain being half the distance to the
		// plateau 5 % under the ceiling.
		want float64
	}{
		{"far below its share it aims at the share", 2, LearnedRates{93, 1}, cutTo + (0.95*50-cutTo)/2/cutTo},
		{"within half of its share it climbs to its own last cut", 2, LearnedRates{20, 1}, cutTo + (0.95*10-cutTo)/2/cutTo},
		{"sending alone it climbs to its own last cut", 1, LearnedRates{93, 1}, cutTo + (0.95*10-cutTo)/2/cutTo},
		{"with no other worker pacing it climbs to its own last cut", 2, LearnedRates{}, cutTo + (0.95*10-cutTo)/2/cutTo},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewSendControl(SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}, Pacer: PacerConfig{Initial: 50}}, nil, t0)
			if err != nil {
				t.Fatal(err)
			}
			c.SetMembers(t0, tt.members)
			c.Done(t0, t0, true, "")
			for range 10 {
				c.Done(t0.Add(1500*ms), t0.Add(1500*ms), true, "")
			}
			c.Done(t0.Add(1600*ms), t0.Add(1500*ms), false, failure.LimitRate)
			if got := c.Rate(); math.Abs(got-cutTo) > 1e-9 {
				t.Fatalf("after the cut: rate %v, want %v", got, cutTo)
			}
			at := t0.Add(2 * time.Second)
			c.Seed(at, tt.others)
			c.Admit(at, 0)
			if ok, _ := c.Admit(at, 0); ok {
				t.Fatal("the second send at once was admitted: the rate does not hold sends back")
			}
			c.Done(at, at, true, "")
			if got := c.Rate(); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("after one success: rate %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSendControlPressure(t *testing.T) {
	g, err := NewPressureGuard(PressureConfig{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewSendControl(SendControlConfig{AIMD: AIMDConfig{Max: 20, Initial: 8}}, g, t0)
	if err != nil {
		t.Fatal(err)
	}
	g.Observe(time.Second, 0) // a GC pause far past the high mark halves the factor
	if got := c.Limit(); got != 4 {
		t.Errorf("Limit under pressure = %d, want 4", got)
	}
	if ok, _ := c.Admit(t0, 4); ok {
		t.Error("Admit let a fifth send through a limit of 4")
	}
}

func TestSendControlConfigValidate(t *testing.T) {
	for _, cfg := range []SendControlConfig{
		{AIMD: AIMDConfig{Min: 3, Max: 2}},
		{Pacer: PacerConfig{Factor: 2}},
		{Pacer: PacerConfig{Initial: 1e9}},
	} {
		if _, err := NewSendControl(cfg, nil, t0); err == nil {
			t.Errorf("NewSendControl accepted %+v", cfg)
		}
	}
}

func TestRateLimiterNext(t *testing.T) {
	r := NewRateLimiter(t0, 10, 1)
	if got := r.Next(t0); !got.Equal(t0) {
		t.Errorf("Next with a token = %v, want now", got)
	}
	if got := r.Next(t0); !got.Equal(t0) {
		t.Error("Next took a token")
	}
	r.Allow(t0)
	if got := r.Next(t0); !got.Equal(t0.Add(100 * time.Millisecond)) {
		t.Errorf("Next without a token = +%v, want +100ms", got.Sub(t0))
	}
	r.SetRate(t0, 0)
	if got := r.Next(t0); !got.Equal(t0) {
		t.Errorf("Next unlimited = +%v, want now", got.Sub(t0))
	}
}

func repeatN[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}
