package delivery

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/failure"
)

func TestRelaysOfOnePriorityShareTheLoad(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel() // acquireAny with a cancelled context returns false exactly when it would wait
	paced := func(rate float64) *adaptive.SendControlConfig {
		return &adaptive.SendControlConfig{AIMD: adaptive.AIMDConfig{Initial: 8, Max: 8}, Pacer: adaptive.PacerConfig{Initial: rate}}
	}
	tests := []struct {
		name       string
		sizes      [2]int
		controls   [2]*adaptive.SendControlConfig
		want       [2]int // sends started on each before every relay would wait
		wantFirstB bool   // the first send goes to b (more headroom)
	}{
		{name: "connections: each relay's own, all used", sizes: [2]int{4, 2}, want: [2]int{4, 2}},
		{name: "the relay with more headroom goes first", sizes: [2]int{2, 6}, want: [2]int{2, 6}, wantFirstB: true},
		{name: "a relay that paces takes what its rate allows, the other the rest",
			sizes: [2]int{8, 8}, controls: [2]*adaptive.SendControlConfig{paced(1), nil}, want: [2]int{1, 8}},
		{name: "both paced: one token each",
			sizes: [2]int{8, 8}, controls: [2]*adaptive.SendControlConfig{paced(40), paced(15)}, want: [2]int{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			var pools []*relayPool
			for i, name := range []string{"a", "b"} {
				var sc *adaptive.SendControl
				if c := tt.controls[i]; c != nil {
					var err error
					if sc, err = adaptive.NewSendControl(*c, nil, now); err != nil {
						t.Fatal(err)
					}
				}
				pools = append(pools, newRelayPool(Relay{Name: name, MaxConns: tt.sizes[i],
					NewSession: func() Session { return closeCounter{new(int)} }}, 16, sc, func() time.Time { return now }))
			}
			got := map[string]int{}
			var first string
			for {
				_, rp, ok := acquireAny(cancelled, pools)
				if !ok {
					break
				}
				if first == "" {
					first = rp.Name
				}
				got[rp.Name]++
			}
			if got["a"] != tt.want[0] || got["b"] != tt.want[1] {
				t.Errorf("sends a=%d b=%d, want a=%d b=%d", got["a"], got["b"], tt.want[0], tt.want[1])
			}
			if (first == "b") != tt.wantFirstB {
				t.Errorf("first send went to %s", first)
			}
		})
	}
}

func TestAcquireAnyWakesWhenAnyRelayFrees(t *testing.T) {
	now := time.Now()
	var pools []*relayPool
	for _, name := range []string{"a", "b"} {
		pools = append(pools, newRelayPool(Relay{Name: name, MaxConns: 1,
			NewSession: func() Session { return closeCounter{new(int)} }}, 16, nil, time.Now))
	}
	held := map[string]Session{}
	for range 2 {
		s, rp, ok := acquireAny(t.Context(), pools)
		if !ok {
			t.Fatal("acquireAny failed with free relays")
		}
		held[rp.Name] = s
	}
	got := make(chan string, 1)
	go func() {
		_, rp, ok := acquireAny(t.Context(), pools)
		if ok {
			got <- rp.Name
		}
	}()
	time.Sleep(20 * time.Millisecond)
	pools[1].putBack(held["b"]) // the second relay frees first
	select {
	case name := <-got:
		if name != "b" {
			t.Errorf("woke on %s, want b", name)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("acquireAny still waiting %v after b freed a session", time.Since(now))
	}
}

func TestRelayStatesAndSeeding(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h, _ := adaptiveHarness(t, nil, &recordingPolicy{}, nil)
	p := h.pipeline
	states := p.RelayStates()
	if len(states) != 1 {
		t.Fatalf("RelayStates = %+v, want one relay", states)
	}
	st := states[0]
	if st.Relay != "p1" || !math.IsInf(st.Rate, 1) || st.Limit < 1 || !st.LastCut.At.IsZero() {
		t.Errorf("fresh state = %+v, want p1 unpaced, never cut", st)
	}

	p.SeedRates(t0, map[string]adaptive.LearnedRates{"p1": {Sum: 60, Workers: 1}, "unknown": {Sum: 10, Workers: 1}})
	st = p.RelayStates()[0]
	if st.Rate != 30 || st.Members != 2 {
		t.Errorf("after seeding with 60/s: rate %v, members %d; want 30 (60 over two workers), 2", st.Rate, st.Members)
	}
	p.SeedRates(t0, map[string]adaptive.LearnedRates{"p1": {Sum: 600, Workers: 3}})
	if r := p.RelayStates()[0].Rate; r != 30 {
		t.Errorf("a second seed changed the rate to %v", r)
	}

	// A rate refusal records the cut and its reason, without the text.
	relay := p.relays[0]
	v := failure.ClassifyReply(450, "4.7.1", "rate limit exceeded for <someone@example.com>, try again in 1 seconds")
	at := t0.Add(2 * time.Second)
	for range 5 { // the relay is accepting mail: a rate refusal now is rationing
		p.learn(relay, at, at, failure.Verdict{}, true)
	}
	p.learn(relay, at, at, v, false)
	st = p.RelayStates()[0]
	if st.LastCut.Controller != adaptive.ControllerRate || st.LastCut.Reason != "throttle-text 450 4.7.1" || st.RateCuts == 0 {
		t.Errorf("after rate refusals: last cut %+v, rate cuts %d; want rate / throttle-text 450 4.7.1", st.LastCut, st.RateCuts)
	}
}
