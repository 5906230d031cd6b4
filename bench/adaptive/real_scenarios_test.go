package main

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/bench/relay"
	"github.com/postline/postline/internal/sender"
)

func TestRealCapacity(t *testing.T) {
	sc, err := defaultRealParams().withRelay().scenario(ScenarioDrop)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := sc.capacity()
	if !ok {
		t.Fatal("the drop scenario has no capacity")
	}
	// 50 at once, 50/s to t=20s, 10/s to t=140s, 50/s after.
	at := []struct {
		t    time.Duration
		want float64
	}{{0, 50}, {10 * time.Second, 550}, {20 * time.Second, 1050}, {80 * time.Second, 1650}, {140 * time.Second, 2250}, {150 * time.Second, 2750}}
	for _, tt := range at {
		if got := c.At(tt.t); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("C(%s) = %v, want %v", tt.t, got, tt.want)
		}
		if tt.t > 0 {
			if got := c.Until(tt.want); got != tt.t {
				t.Errorf("Until(%v) = %s, want %s", tt.want, got, tt.t)
			}
		}
	}
	if got := c.Until(30); got != 0 {
		t.Errorf("Until(30) = %s, want 0: the bucket holds 50", got)
	}
	if got := c.Until(1060); got != 21*time.Second {
		t.Errorf("Until(1060) = %s, want 21s (10/s after t=20s)", got)
	}
	if s := c.String(); !strings.Contains(s, "1050 + 10 (t - 20.0 s) for t < 140.0 s") {
		t.Errorf("String = %q", s)
	}

	two, _ := defaultRealParams().withRelay().scenario(ScenarioTwoRelays)
	if c, _ := two.capacity(); c.Burst != 55 || len(c.Steps) != 1 || c.Steps[0].Rate != 55 {
		t.Errorf("two relays: %+v, want burst 55 and 55/s", c)
	}
	postfix, _ := defaultRealParams().withRelay().scenario(ScenarioPostfix)
	if _, ok := postfix.capacity(); ok {
		t.Error("Postfix's relay has no rate limit, but got a capacity")
	}
}

func TestRealLowerBound(t *testing.T) {
	flat := func(burst, rate float64) capacity {
		return capacity{Burst: burst, Steps: []rateSegment{{Rate: rate}}}
	}
	tests := []struct {
		name           string
		c              capacity
		d              int
		q              float64
		mean, makespan time.Duration
	}{
		// T(i) = i/10: mean of 0.1..1.0 s.
		{"no burst", flat(0, 10), 10, 0, 550 * time.Millisecond, time.Second},
		// T(i) = (i-5)/10 for i > 5: (0.1+...+0.5)/10.
		{"burst", flat(5, 10), 10, 0, 150 * time.Millisecond, 500 * time.Millisecond},
		// Half the transactions are answered transiently: 2 tokens a
		// delivery, T(i) = (2i-5)/10 for i >= 3.
		{"transient share", flat(5, 10), 10, 0.5, 640 * time.Millisecond, 1500 * time.Millisecond},
		{"nothing deliverable", flat(5, 10), 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := lowerBound(tt.c, tt.d, tt.q)
			if (b.Mean-tt.mean).Abs() > time.Microsecond || (b.Makespan-tt.makespan).Abs() > time.Microsecond {
				t.Errorf("mean %s makespan %s, want %s %s", b.Mean, b.Makespan, tt.mean, tt.makespan)
			}
		})
	}
	// The main scenario: close to the continuous form (K-burst)^2/(2 R K),
	// K = D/(1-q) tokens, the simulator's without its session time.
	p := defaultRealParams().withRelay()
	sc, _ := p.scenario(ScenarioMain)
	c, _ := sc.capacity()
	b := lowerBound(c, sc.deliverable(), sc.tokenShare())
	d := float64(b.Deliverable)
	tokens := d * b.PerDelivery
	closed := (tokens - 50) * (tokens - 50) / (2 * 50 * tokens)
	if got := b.Mean.Seconds(); math.Abs(got-closed)/closed > 0.02 {
		t.Errorf("main scenario mean bound %.2f s, closed form %.2f s", got, closed)
	}
	if b.Deliverable >= sc.Jobs || b.Deliverable < sc.Jobs*99/100 {
		t.Errorf("%d of %d jobs deliverable at 0.5 %% rejects", b.Deliverable, sc.Jobs)
	}
}

// withRelay sets the main relay the simulator's flags give the real run.
func (p RealParams) withRelay() RealParams {
	p.Rate, p.Burst, p.Conns, p.Transient, p.Permanent, p.Senders = 50, 50, 5, 0.01, 0.005, 20
	p.Brokers = []string{"127.0.0.1:9092"}
	return p
}

func TestRealScenarioSetups(t *testing.T) {
	p := defaultRealParams().withRelay()
	e := runEnv{jobs: "j", dlq: "d", prefix: "r", workerGroup: "g", databaseURL: "postgres://db", relayAddrs: []string{"127.0.0.1:2001", "127.0.0.1:2002"}}
	tests := []struct {
		name       string
		jobs       int
		strategies int
		relays     []string // names
		workers    int
		late       int
		urls       string
	}{
		{ScenarioMain, 2000, 3, []string{"relay"}, 1, 0, "smtp://127.0.0.1:2001?name=relay&tls=none&max_conns=20"},
		{ScenarioPostfix, 1000, 3, []string{"relay"}, 1, 0, "smtp://127.0.0.1:2001?name=relay&tls=none&max_conns=20"},
		{ScenarioDrop, 5000, 1, []string{"relay"}, 1, 0, "smtp://127.0.0.1:2001?name=relay&tls=none&max_conns=20"},
		{ScenarioTwoRelays, 3000, 1, []string{"a", "b"}, 1, 0,
			"smtp://127.0.0.1:2001?name=a&priority=0&tls=none&max_conns=20,smtp://127.0.0.1:2002?name=b&priority=0&tls=none&max_conns=20"},
		{ScenarioThreeWorkers, 3000, 1, []string{"relay"}, 2, 1, "smtp://127.0.0.1:2001?name=relay&tls=none&max_conns=20"},
		{ScenarioFivexx, 2000, 1, []string{"relay"}, 1, 0, "smtp://127.0.0.1:2001?name=relay&tls=none&max_conns=20"},
		{ScenarioFleet200, 20000, 1, []string{"relay"}, 2, 0, "smtp://127.0.0.1:2001?name=relay&tls=none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, err := p.scenario(tt.name)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, r := range sc.Relays {
				names = append(names, r.Name)
				if err := r.Config.WithDefaults().Validate(); err != nil {
					t.Errorf("relay %s: %v", r.Name, err)
				}
			}
			if sc.Jobs != tt.jobs || len(sc.Strategies) != tt.strategies || !slices.Equal(names, tt.relays) || sc.Workers != tt.workers || len(sc.Late) != tt.late {
				t.Errorf("jobs %d strategies %v relays %v workers %d late %v", sc.Jobs, sc.Strategies, names, sc.Workers, sc.Late)
			}
			urls := sc.relayURLs(e.relayAddrs[:len(sc.Relays)], p.Senders)
			if urls != tt.urls {
				t.Errorf("relay URLs\n%s, want\n%s", urls, tt.urls)
			}
			cfgs, err := sender.ParseRelayURLs(urls)
			if err != nil {
				t.Fatalf("the worker would not parse %q: %v", urls, err)
			}
			for i, c := range cfgs {
				if c.Name != tt.relays[i] || c.Priority != 0 {
					t.Errorf("relay %d parsed as %q priority %d", i, c.Name, c.Priority)
				}
			}
			env := p.workerEnv(sc, e, StratAdaptive, "127.0.0.1:9000")
			joined := strings.Join(env, "\n")
			if !slices.Contains(env, "POSTLINE_SMTP_RELAYS="+urls) || !slices.Contains(env, "POSTLINE_RETRY_POLICY=adaptive") ||
				!slices.Contains(env, "POSTLINE_HTTP_ADDR=127.0.0.1:9000") || strings.Contains(joined, "POSTLINE_CIRCUIT_") ||
				strings.Contains(joined, "POSTLINE_SMTP_RATE") {
				t.Errorf("worker env:\n%s", joined)
			}
			if defaults := tt.name == ScenarioFleet200; strings.Contains(joined, "POSTLINE_SENDERS=") == defaults ||
				strings.Contains(joined, "POSTLINE_LAG_INTERVAL=") == defaults {
				t.Errorf("default transport %v, env:\n%s", defaults, joined)
			}
		})
	}

	drop, _ := p.scenario(ScenarioDrop)
	if s := drop.Relays[0].Schedule; len(s) != 2 || s[0] != (rateStep{20 * time.Second, 10, 10}) || s[1] != (rateStep{140 * time.Second, 50, 50}) {
		t.Errorf("drop schedule %+v", s)
	}
	five, _ := p.scenario(ScenarioFivexx)
	if c := five.Relays[0].Config; c.ThrottleCode != 550 || c.ThrottleEnhanced != "5.7.1" || !strings.Contains(c.ThrottleText, relay.SecondsPlaceholder) {
		t.Errorf("fivexx relay %+v", c)
	}
	fleet, _ := p.scenario(ScenarioFleet200)
	if c := fleet.Relays[0].Config; c.Rate != 200 || c.Burst != 40 || c.TransientReply != 0.03 || c.TransientDrop != 0 || c.PermanentReject != 0.01 {
		t.Errorf("fleet200 relay %+v", c)
	}
	if got := fleet.tokenShare(); got != 0.03 {
		t.Errorf("fleet200 token share %v, want 0.03", got)
	}
	if to := p.scenarioTimeout(drop); to <= 2*restoreAt || to > p.Timeout {
		t.Errorf("drop timeout %s", to)
	}
}

func TestRunsOrder(t *testing.T) {
	p := defaultRealParams().withRelay()
	p.Scenarios = []string{ScenarioFleet200, ScenarioMain, ScenarioDrop}
	p.Strategies = []string{StratUniform, StratAdaptive}
	runs, err := p.runs()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range runs {
		got = append(got, r.sc.Name+"/"+r.strategy)
	}
	if want := []string{"main/uniform", "main/adaptive", "drop/adaptive", "fleet200/adaptive"}; !slices.Equal(got, want) {
		t.Errorf("runs %v, want %v", got, want)
	}
}

func TestParseScenarios(t *testing.T) {
	if got, err := parseScenarios("drop, fleet200,drop"); err != nil || !slices.Equal(got, []string{"drop", "fleet200"}) {
		t.Errorf("parseScenarios = %v, %v", got, err)
	}
	if _, err := parseScenarios("drop,flood"); err == nil {
		t.Error("an unknown scenario was accepted")
	}
}

func TestRefusalsAndRate(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(secs ...float64) []time.Time {
		var out []time.Time
		for _, s := range secs {
			out = append(out, t0.Add(time.Duration(s*float64(time.Second))))
		}
		return out
	}
	st := relay.Stats{ThrottledAt: at(1, 5, 29.9, 30, 31, 59.9, 60), RefusedAt: at(10, 45)}
	got := refusalsAround(st, t0, 30*time.Second, 30*time.Second)
	if want := (refusals{ThrottledBefore: 3, ThrottledAfter: 3, RefusedBefore: 1, RefusedAfter: 1}); got != want {
		t.Errorf("refusals %+v, want %+v", got, want)
	}

	// 10 accepted before t=10s (not counted), then 3 in [10s, 11s), 1 in
	// [11s, 12s) and the last at 12.5s.
	st = relay.Stats{AcceptedAt: append(at(1, 2, 3, 4, 5, 6, 7, 8, 9, 9.5), at(10, 10.2, 10.4, 11.5, 12.5)...)}
	a := acceptedRate(st, t0, 10*time.Second)
	if a.Count != 5 || a.Window != 2500*time.Millisecond || math.Abs(a.Rate-2) > 1e-9 || a.Min != 1 || a.Median != 3 {
		t.Errorf("acceptance %+v, want 5 in 2.5s = 2/s, min 1, median 3", a)
	}
	if a := acceptedRate(relay.Stats{AcceptedAt: at(1, 2)}, t0, 10*time.Second); a.Count != 0 || a.Rate != 0 {
		t.Errorf("nothing after the warm-up: %+v", a)
	}
}

func TestCountOpenings(t *testing.T) {
	const exposition = `# HELP postline_circuit_transitions_total Circuit state changes.
# TYPE postline_circuit_transitions_total counter
postline_circuit_transitions_total{provider="a",to="closed"} 4
postline_circuit_transitions_total{provider="a",to="half_open"} 3
postline_circuit_transitions_total{provider="a",to="open"} 3
postline_circuit_transitions_total{provider="b",to="open"} 1
postline_circuit_transitions_totally{provider="a",to="open"} 9
postline_circuit_state{provider="a",state="open"} 1
`
	got, err := countOpenings(strings.NewReader(exposition))
	if err != nil || got != 4 {
		t.Errorf("countOpenings = %d, %v; want 4", got, err)
	}
}

func TestMergeStats(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := relay.Stats{Since: t0, Accepted: 2, Throttled: 1, AcceptedAt: []time.Time{t0.Add(1), t0.Add(4)}, AcceptedIDs: []string{"a1", "a2"},
		ThrottledAt: []time.Time{t0.Add(3)}}
	b := relay.Stats{Since: t0.Add(-1), Accepted: 1, TransientReplies: 2, AcceptedAt: []time.Time{t0.Add(2)}, AcceptedIDs: []string{"b1"}}
	m := mergeStats([]relay.Stats{a, b})
	if m.Accepted != 3 || m.Deferred() != 3 || !m.Since.Equal(t0.Add(-1)) || !slices.Equal(m.AcceptedIDs, []string{"a1", "b1", "a2"}) ||
		!slices.IsSortedFunc(m.AcceptedAt, time.Time.Compare) || len(m.ThrottledAt) != 1 {
		t.Errorf("merged %+v", m)
	}
}

func TestRealScenarioTargets(t *testing.T) {
	p := defaultRealParams().withRelay()
	b := bound{Deliverable: 990, PerDelivery: 1.01, Mean: 10 * time.Second, Makespan: 20 * time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	good := func() RealResult {
		return RealResult{Result: Result{Strategy: StratAdaptive, Delivered: 990, Attempts: 1020, Wasted: 20, Makespan: 22 * time.Second,
			Latencies: []time.Duration{10500 * time.Millisecond}}, Jobs: 1000, Failed: 10, Workers: 2, Start: t0,
			Relay: relay.Stats{Accepted: 990, TransientDrops: 10, Throttled: 10, PermanentRejects: 10}}
	}
	results := func(ts []realTarget) map[string]string {
		out := map[string]string{}
		for _, t := range ts {
			out[strings.Fields(t.name)[0]+" "+strings.Fields(t.name)[1]] = t.result
		}
		return out
	}
	t.Run("main met", func(t *testing.T) {
		sc, _ := p.scenario(ScenarioMain)
		for _, tg := range scenarioTargets(sc, good(), b, true) {
			if tg.result != "PASS" {
				t.Errorf("%s: %s (%s)", tg.name, tg.result, tg.value)
			}
		}
	})
	t.Run("each target missed", func(t *testing.T) {
		sc, _ := p.scenario(ScenarioMain)
		r := good()
		r.Latencies = []time.Duration{12 * time.Second} // 1.2x
		r.Makespan = 26 * time.Second                   // 1.3x
		r.Wasted, r.Attempts = 40, 1060                 // 30 beyond the 10 drops = 3 %; 1.06x
		got := results(scenarioTargets(sc, r, b, true))
		for _, name := range []string{"mean latency", "makespan <=", "wasted attempts", "attempts <="} {
			if got[name] != "FAIL" {
				t.Errorf("%s: %s, want FAIL (%v)", name, got[name], got)
			}
		}
		if got["every deliverable"] != "PASS" {
			t.Errorf("delivery: %s", got["every deliverable"])
		}
	})
	t.Run("undelivered fails latency and makespan", func(t *testing.T) {
		sc, _ := p.scenario(ScenarioFivexx)
		r := good()
		r.Delivered, r.Failed, r.Makespan = 300, 700, 5*time.Second
		got := results(scenarioTargets(sc, r, b, true))
		if got["every deliverable"] != "FAIL" || got["mean latency"] != "FAIL" || got["makespan <="] != "FAIL" {
			t.Errorf("%v", got)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		sc, _ := p.scenario(ScenarioDrop)
		r := good()
		r.TimedOut, r.Delivered, r.Unfinished = true, 900, 90
		got := results(scenarioTargets(sc, r, b, true))
		for _, name := range []string{"every deliverable", "mean latency", "makespan <=", "wasted attempts", "attempts <="} {
			if got[name] != "TIMEOUT" {
				t.Errorf("%s: %s, want TIMEOUT", name, got[name])
			}
		}
		// Already missed: more time cannot bring these back.
		r.Makespan, r.Attempts, r.Wasted = 60*time.Second, 1100, 60
		got = results(scenarioTargets(sc, r, b, true))
		for _, name := range []string{"makespan <=", "wasted attempts", "attempts <="} {
			if got[name] != "FAIL" {
				t.Errorf("%s: %s, want FAIL", name, got[name])
			}
		}
		if got["every deliverable"] != "TIMEOUT" || got["mean latency"] != "TIMEOUT" {
			t.Errorf("%v", got)
		}
	})
	t.Run("postfix", func(t *testing.T) {
		sc, _ := p.scenario(ScenarioPostfix)
		r := good() // 20 of 1020 attempts deferred: 2 %
		got := results(scenarioTargets(sc, r, b, false))
		if got["deferred <="] != "PASS" || got["mean latency"] != "n/a" {
			t.Errorf("%v", got)
		}
		r.Wasted, r.Attempts = 60, 1060 // 5.7 %
		if got := results(scenarioTargets(sc, r, b, false)); got["deferred <="] != "FAIL" {
			t.Errorf("%v", got)
		}
	})
	t.Run("two relays", func(t *testing.T) {
		sc, _ := p.scenario(ScenarioTwoRelays)
		r := good()
		r.Relays = []relay.Stats{{Accepted: 990}, {Accepted: 0}} // failover: a takes everything
		if got := shareTarget(sc, r); got.result != "FAIL" || !strings.Contains(got.value, "b 0.0 %") {
			t.Errorf("%+v", got)
		}
		r.Relays = []relay.Stats{{Accepted: 700}, {Accepted: 290}} // 29 % vs 27 %
		if got := shareTarget(sc, r); got.result != "PASS" {
			t.Errorf("%+v", got)
		}
	})
	t.Run("fleet200", func(t *testing.T) {
		sc, _ := p.scenario(ScenarioFleet200)
		r := good()
		// 190/s from t=10s for 10 s.
		for i := range 1900 {
			r.Relay.AcceptedAt = append(r.Relay.AcceptedAt, t0.Add(10*time.Second+time.Duration(i+1)*10*time.Second/1900))
		}
		got := results(scenarioTargets(sc, r, b, true))
		if got["relay accepted"] != "PASS" || got["no circuit"] != "PASS" {
			t.Errorf("%v", got)
		}
		r.Openings = 1
		// A tail: 1,700 by t=19s, the last at t=30s: 1,701 in 20 s.
		r.Relay.AcceptedAt = append(r.Relay.AcceptedAt[:1700], t0.Add(30*time.Second))
		got = results(scenarioTargets(sc, r, b, true))
		if got["relay accepted"] != "FAIL" || got["no circuit"] != "FAIL" {
			t.Errorf("%v", got)
		}
	})
}
