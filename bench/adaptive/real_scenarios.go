package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/postline/postline/bench/internal/benchstats"
	"github.com/postline/postline/bench/relay"
)

// Scenario names of the harder real runs: the adaptive strategy only, each
// alone on the machine.
const (
	ScenarioDrop         = "drop"
	ScenarioTwoRelays    = "two-relays"
	ScenarioThreeWorkers = "three-workers"
	ScenarioFivexx       = "fivexx"
	ScenarioFleet200     = "fleet200"
)

// allScenarios are the real scenarios in the order they run and print.
var allScenarios = []string{ScenarioMain, ScenarioPostfix, ScenarioDrop, ScenarioTwoRelays, ScenarioThreeWorkers, ScenarioFivexx, ScenarioFleet200}

// defaultScenarioJobs are the bursts of the harder scenarios.
func defaultScenarioJobs() map[string]int {
	return map[string]int{
		// 5,000 at 50/s, 10/s from t=20s to t=140s: about a third is left
		// when the rate comes back.
		ScenarioDrop:         5000,
		ScenarioTwoRelays:    3000,
		ScenarioThreeWorkers: 3000,
		ScenarioFivexx:       2000,
		ScenarioFleet200:     20000,
	}
}

// Schedule of the drop scenario, from the start of publishing.
const (
	dropAt       = 20 * time.Second
	restoreAt    = 140 * time.Second
	dropRate     = 10.0
	thirdJoinsAt = 30 * time.Second // three-workers: the third worker starts
	fleetWarmup  = 10 * time.Second // fleet200: the rate target's window starts
	joinWindow   = 30 * time.Second // three-workers: refusals counted either side of the join
)

// rateStep is a change of a relay's bucket at a time after publishing
// started.
type rateStep struct {
	At    time.Duration
	Rate  float64
	Burst int
}

// relaySpec is one relay of a scenario: its name in the worker's relay
// URL, its config and its rate changes.
type relaySpec struct {
	Name     string
	Config   relay.Config
	Schedule []rateStep
}

// scenario is the setup of one real scenario.
type scenario struct {
	Name       string
	Jobs       int
	Strategies []string
	Relays     []relaySpec
	// Priority is set: every relay URL carries ?priority=0, so they are
	// equal in the worker's order.
	Priority bool
	Workers  int             // worker processes from the start
	Late     []time.Duration // a further worker starts at each time after publishing started
	// DefaultTransport leaves POSTLINE_SENDERS, the relay URL's max_conns
	// and POSTLINE_LAG_INTERVAL at the worker's defaults.
	DefaultTransport bool
	About            string // one line for the report
}

// scenario returns the setup of the named scenario under p.
func (p RealParams) scenario(name string) (scenario, error) {
	faults := relay.Config{TransientDrop: p.Transient, PermanentReject: p.Permanent, Seed: p.Seed}
	limited := func(rate float64, burst, conns int) relay.Config {
		c := faults
		c.Rate, c.Burst, c.MaxConns = rate, burst, conns
		return c
	}
	adaptiveOnly := []string{StratAdaptive}
	one := func(c relay.Config) []relaySpec { return []relaySpec{{Name: "relay", Config: c}} }
	sc := scenario{Name: name, Workers: 1, Strategies: adaptiveOnly, Jobs: p.ScenarioJobs[name]}
	switch name {
	case ScenarioMain:
		sc.Jobs, sc.Strategies = p.Jobs, p.Strategies
		sc.Relays = one(p.relayConfig(ScenarioMain))
		sc.About = fmt.Sprintf("one relay, token bucket %.0f/s burst %d, %d connections", p.Rate, p.Burst, p.Conns)
	case ScenarioPostfix:
		sc.Jobs, sc.Strategies = p.PostfixJobs, p.Strategies
		sc.Relays = one(p.relayConfig(ScenarioPostfix))
		sc.About = fmt.Sprintf("one relay without a rate limit that hangs up (421 4.7.0 at MAIL) on sessions beyond the oldest %d", p.HangUpAbove)
	case ScenarioDrop:
		c := limited(p.Rate, p.Burst, p.Conns)
		sc.Relays = []relaySpec{{Name: "relay", Config: c, Schedule: []rateStep{
			{At: dropAt, Rate: dropRate, Burst: int(math.Ceil(dropRate))},
			{At: restoreAt, Rate: p.Rate, Burst: p.Burst},
		}}}
		sc.About = fmt.Sprintf("one relay, %.0f/s burst %d, %d connections; at t=%s its rate drops to %.0f/s (burst %.0f), at t=%s back to %.0f/s (burst %d)",
			p.Rate, p.Burst, p.Conns, dropAt, dropRate, math.Ceil(dropRate), restoreAt, p.Rate, p.Burst)
	case ScenarioTwoRelays:
		sc.Relays = []relaySpec{
			{Name: "a", Config: limited(40, 40, 5)},
			{Name: "b", Config: limited(15, 15, 5)},
		}
		sc.Priority = true
		sc.About = "two relays at the same priority in POSTLINE_SMTP_RELAYS: a 40/s burst 40, b 15/s burst 15, 5 connections each"
	case ScenarioThreeWorkers:
		// No connection cap: the refusals measured are the rate's. Three
		// workers sharing a 5-connection cap is a test of their
		// concurrency limits, not of the rate they learn.
		sc.Relays = one(limited(p.Rate, p.Burst, 0))
		sc.Workers, sc.Late = 2, []time.Duration{thirdJoinsAt}
		sc.About = fmt.Sprintf("one relay, %.0f/s burst %d, no connection cap (so the refusals are the rate's), no POSTLINE_SMTP_RATE; two workers, a third starts at t=%s",
			p.Rate, p.Burst, thirdJoinsAt)
	case ScenarioFivexx:
		c := limited(p.Rate, p.Burst, p.Conns)
		c.ThrottleCode, c.ThrottleEnhanced = 550, "5.7.1"
		c.ThrottleText = "Message refused, try again in " + relay.SecondsPlaceholder + " seconds"
		sc.Relays = one(c)
		sc.About = fmt.Sprintf("one relay, %.0f/s burst %d, %d connections, whose over-rate reply is \"550 5.7.1 %s\"",
			p.Rate, p.Burst, p.Conns, c.ThrottleText)
	case ScenarioFleet200:
		c := relay.Config{Rate: 200, Burst: 40, TransientReply: 0.03, PermanentReject: 0.01, Seed: p.Seed}
		sc.Relays = one(c)
		sc.Workers, sc.DefaultTransport = 2, true
		sc.About = "one relay, 200/s burst 40, no connection cap, 451 4.3.0 at the end of DATA on 3 % of transactions (connection kept), " +
			"550 5.1.1 for 1 % of recipients; two workers with every setting at its default"
	default:
		return scenario{}, fmt.Errorf("-real-scenarios: unknown scenario %q (%s)", name, strings.Join(allScenarios, ", "))
	}
	return sc, nil
}

// relayURLs is the worker's POSTLINE_SMTP_RELAYS for relays listening at
// addrs: comma-separated smtp:// URLs without TLS, named, at priority 0
// when the scenario sets it, max_conns at the harness's senders unless the
// transport is the default.
func (sc scenario) relayURLs(addrs []string, senders int) string {
	urls := make([]string, len(sc.Relays))
	for i, r := range sc.Relays {
		q := "name=" + r.Name
		if sc.Priority {
			q += "&priority=0"
		}
		q += "&tls=none"
		if !sc.DefaultTransport {
			q += fmt.Sprintf("&max_conns=%d", senders)
		}
		urls[i] = fmt.Sprintf("smtp://%s?%s", addrs[i], q)
	}
	return strings.Join(urls, ",")
}

// deliverable counts the jobs of the burst the relays accept in the end:
// those whose recipient the relay does not reject (every relay of a
// scenario rejects the same recipients).
func (sc scenario) deliverable() int {
	n := 0
	for k := range sc.Jobs {
		if !sc.Relays[0].Config.Rejects(rcptAddr(k)) {
			n++
		}
	}
	return n
}

// tokenShare is the share of transactions past the bucket that the relay
// answers transiently (dropped or 451): each still took a token.
func (sc scenario) tokenShare() float64 {
	c := sc.Relays[0].Config
	return c.TransientDrop + c.TransientReply
}

// capacity is the relays' cumulative capacity C(t) since publishing
// started: their buckets at t=0 plus the integral of their rates.
type capacity struct {
	Burst float64
	Steps []rateSegment // ascending From; Steps[0].From == 0
}

// rateSegment is the summed rate from From on.
type rateSegment struct {
	From time.Duration
	Rate float64
}

// capacity returns the scenario's C(t), or false when a relay has no rate
// limit (no bound from capacity: sessions are taken as instant).
func (sc scenario) capacity() (capacity, bool) {
	times := []time.Duration{0}
	for _, r := range sc.Relays {
		if r.Config.Rate <= 0 {
			return capacity{}, false
		}
		for _, s := range r.Schedule {
			if s.Rate <= 0 {
				return capacity{}, false
			}
			times = append(times, s.At)
		}
	}
	slices.Sort(times)
	times = slices.Compact(times)
	var c capacity
	for _, r := range sc.Relays {
		c.Burst += float64(r.Config.WithDefaults().Burst)
	}
	for _, t := range times {
		var sum float64
		for _, r := range sc.Relays {
			rate := r.Config.Rate
			for _, s := range r.Schedule {
				if s.At <= t {
					rate = s.Rate
				}
			}
			sum += rate
		}
		c.Steps = append(c.Steps, rateSegment{From: t, Rate: sum})
	}
	return c, true
}

// At is C(t).
func (c capacity) At(t time.Duration) float64 {
	x := c.Burst
	for i, s := range c.Steps {
		end := t
		if i+1 < len(c.Steps) {
			end = min(t, c.Steps[i+1].From)
		}
		if end > s.From {
			x += s.Rate * (end - s.From).Seconds()
		}
	}
	return x
}

// Until is inf{t >= 0: C(t) >= x}.
func (c capacity) Until(x float64) time.Duration {
	have := c.Burst
	if x <= have {
		return 0
	}
	for i, s := range c.Steps {
		if i+1 < len(c.Steps) {
			seg := s.Rate * (c.Steps[i+1].From - s.From).Seconds()
			if have+seg < x {
				have += seg
				continue
			}
		}
		return s.From + time.Duration((x-have)/s.Rate*float64(time.Second))
	}
	return 0 // not reached: Steps is never empty
}

// bound is the lower bound on a scenario's latencies: no strategy can get
// the i-th deliverable job accepted before the relays have issued the
// tokens it and the transactions answered transiently before it took.
type bound struct {
	Deliverable int
	PerDelivery float64       // tokens a delivery takes on average: 1/(1-q)
	Mean        time.Duration // (1/D) * sum over i=1..D of Until(i/(1-q))
	Makespan    time.Duration // Until(D/(1-q))
}

// boundFormula says how bound is computed, for the report.
const boundFormula = "C(t) = sum of the relays' bursts + integral from 0 to t of their summed rate (the relays' schedule); " +
	"the i-th deliverable job cannot be accepted before T(i) = inf{t: C(t) >= i/(1-q)}, q = the share of transactions past the bucket " +
	"answered transiently (dropped 421 4.4.2 or 451 4.3.0), each of which took a token, so a delivery takes 1/(1-q) tokens on average; " +
	"D = jobs whose recipient the relay does not reject (550 5.1.1 at RCPT takes no token). Mean bound = (1/D) sum_{i=1..D} T(i); " +
	"minimum makespan = T(D). t = 0 is the start of publishing; sessions are taken as instant"

// lowerBound computes the bound of D deliverable jobs under c with a share
// q of transient answers.
func lowerBound(c capacity, d int, q float64) bound {
	b := bound{Deliverable: d, PerDelivery: 1 / (1 - q)}
	if d == 0 {
		return b
	}
	var sum float64
	for i := 1; i <= d; i++ {
		sum += c.Until(float64(i) * b.PerDelivery).Seconds()
	}
	b.Mean = time.Duration(sum / float64(d) * float64(time.Second))
	b.Makespan = c.Until(float64(d) * b.PerDelivery)
	return b
}

// scenarioTimeout is how long a run of sc may take: the harness's timeout,
// or for the harder scenarios at most twice the minimum makespan plus three
// minutes, so one that stalls does not hold the whole benchmark.
func (p RealParams) scenarioTimeout(sc scenario) time.Duration {
	if sc.Name == ScenarioMain || sc.Name == ScenarioPostfix {
		return p.Timeout
	}
	if p.HardTimeout > 0 {
		return p.HardTimeout
	}
	c, ok := sc.capacity()
	if !ok {
		return p.Timeout
	}
	b := lowerBound(c, sc.deliverable(), sc.tokenShare())
	return min(p.Timeout, 2*b.Makespan+3*time.Minute)
}

// parseScenarios parses -real-scenarios.
func parseScenarios(s string) ([]string, error) {
	var out []string
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(allScenarios, name) {
			return nil, fmt.Errorf("-real-scenarios: unknown scenario %q (%s)", name, strings.Join(allScenarios, ", "))
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// refusals counts the relay's refusals in the window before and the window
// after at (times since start): throttle replies (450 by default) and
// connections refused at the greeting (421).
type refusals struct {
	ThrottledBefore, ThrottledAfter int
	RefusedBefore, RefusedAfter     int
}

func refusalsAround(st relay.Stats, start time.Time, at, window time.Duration) refusals {
	count := func(ts []time.Time) (before, after int) {
		for _, t := range ts {
			switch d := t.Sub(start); {
			case d >= at-window && d < at:
				before++
			case d >= at && d < at+window:
				after++
			}
		}
		return before, after
	}
	var r refusals
	r.ThrottledBefore, r.ThrottledAfter = count(st.ThrottledAt)
	r.RefusedBefore, r.RefusedAfter = count(st.RefusedAt)
	return r
}

// acceptance is the relay's accepted rate over a window: every message it
// accepted (a duplicate delivery too) from From after the start of
// publishing to its last acceptance, divided by the window's length; Min
// and Median are over the whole seconds of the window.
type acceptance struct {
	From, Window time.Duration
	Count        int
	Rate         float64
	Min, Median  int
}

func acceptedRate(st relay.Stats, start time.Time, from time.Duration) acceptance {
	a := acceptance{From: from}
	if len(st.AcceptedAt) == 0 {
		return a
	}
	begin := start.Add(from)
	last := st.AcceptedAt[len(st.AcceptedAt)-1]
	if !last.After(begin) {
		return a
	}
	a.Window = last.Sub(begin)
	perSecond := make([]int, int(a.Window/time.Second))
	for _, t := range st.AcceptedAt {
		if t.Before(begin) {
			continue
		}
		a.Count++
		if s := int(t.Sub(begin) / time.Second); s < len(perSecond) {
			perSecond[s]++
		}
	}
	a.Rate = float64(a.Count) / a.Window.Seconds()
	if len(perSecond) > 0 {
		slices.Sort(perSecond)
		a.Min, a.Median = perSecond[0], perSecond[len(perSecond)/2]
	}
	return a
}

// beyondFaults is the wasted attempts not explained by the relay's
// injected transient faults: throttle replies, refused connections and
// hang-ups.
func beyondFaults(r RealResult) int {
	return r.Wasted - int(r.Relay.TransientDrops+r.Relay.TransientReplies)
}

// Thresholds of the per-scenario targets.
const (
	maxMeanOverBound     = 1.10
	maxMakespanOverMin   = 1.25
	maxBeyondFaultsShare = 0.02
	maxAttemptsPerJob    = 1.05
	maxPostfixDeferred   = 0.05
	minFleetRateShare    = 0.90
	minCapacityShare     = 0.80 // two-relays: each relay's share of acceptances over its share of capacity
)

// verdict is a target's result for run r. A run that timed out is
// TIMEOUT, unless the target is already missed by a figure that can only
// grow with time (attempts, waste, makespan): that is FAIL.
func verdict(r RealResult, ok bool) string { return judgeRun(r, ok, false) }

// verdictGrowing is verdict for a figure that only grows while a run goes
// on.
func verdictGrowing(r RealResult, ok bool) string { return judgeRun(r, ok, true) }

func judgeRun(r RealResult, ok, growing bool) string {
	if r.TimedOut && (ok || !growing) {
		return "TIMEOUT"
	}
	return benchstats.Verdict(ok)
}

// scenarioTargets judges the adaptive strategy's run r of sc against the
// per-scenario targets; b is the scenario's bound, hasBound false when it
// has none (a relay without a rate limit).
func scenarioTargets(sc scenario, r RealResult, b bound, hasBound bool) []realTarget {
	all := r.Delivered == b.Deliverable
	ratio := func(x, of time.Duration) float64 { return x.Seconds() / max(of.Seconds(), 1e-9) }
	notAll := ""
	if !all {
		notAll = fmt.Sprintf("; only %d of %d deliverable jobs delivered", r.Delivered, b.Deliverable)
	}
	out := []realTarget{{
		"every deliverable job delivered",
		fmt.Sprintf("%d of %d (%d failed, %d dead, %d unfinished)", r.Delivered, b.Deliverable, r.Failed, r.Dead, r.Unfinished),
		verdict(r, all),
	}}
	if hasBound {
		out = append(out,
			realTarget{fmt.Sprintf("mean latency <= %.2fx bound", maxMeanOverBound),
				fmt.Sprintf("%s = %.2fx %s%s", secs(r.Mean()), ratio(r.Mean(), b.Mean), secs(b.Mean), notAll),
				verdict(r, all && ratio(r.Mean(), b.Mean) <= maxMeanOverBound)},
			realTarget{fmt.Sprintf("makespan <= %.2fx minimum makespan", maxMakespanOverMin),
				fmt.Sprintf("%s = %.2fx %s%s", secs(r.Makespan), ratio(r.Makespan, b.Makespan), secs(b.Makespan), notAll),
				judgeRun(r, all && ratio(r.Makespan, b.Makespan) <= maxMakespanOverMin, ratio(r.Makespan, b.Makespan) > maxMakespanOverMin)})
	} else {
		out = append(out, realTarget{"mean latency and makespan against the bound", "no bound: a relay without a rate limit", "n/a"})
	}
	beyond := beyondFaults(r)
	share := float64(beyond) / float64(max(r.Jobs, 1))
	out = append(out,
		realTarget{fmt.Sprintf("wasted attempts beyond injected transient faults <= %.0f %% of jobs", 100*maxBeyondFaultsShare),
			fmt.Sprintf("%d = %.2f %% (%d wasted, %d injected)", beyond, 100*share, r.Wasted, r.Wasted-beyond),
			verdictGrowing(r, share <= maxBeyondFaultsShare)},
		realTarget{fmt.Sprintf("attempts <= %.2fx jobs", maxAttemptsPerJob),
			fmt.Sprintf("%.3fx (%d / %d)", float64(r.Attempts)/float64(max(r.Jobs, 1)), r.Attempts, r.Jobs),
			verdictGrowing(r, float64(r.Attempts) <= maxAttemptsPerJob*float64(r.Jobs))})
	switch sc.Name {
	case ScenarioPostfix:
		out = append(out, realTarget{fmt.Sprintf("deferred <= %.0f %%", 100*maxPostfixDeferred),
			fmt.Sprintf("%.1f %%", 100*r.Deferred()), verdict(r, r.Deferred() <= maxPostfixDeferred)})
	case ScenarioTwoRelays:
		out = append(out, shareTarget(sc, r))
	case ScenarioFleet200:
		a := acceptedRate(r.Relay, r.Start, fleetWarmup)
		want := minFleetRateShare * sc.Relays[0].Config.Rate
		out = append(out,
			realTarget{fmt.Sprintf("relay accepted >= %.0f %% of %.0f/s from t=%s to its last acceptance", 100*minFleetRateShare, sc.Relays[0].Config.Rate, fleetWarmup),
				fmt.Sprintf("%.1f/s (%d in %s; whole seconds: min %d, median %d)", a.Rate, a.Count, secs(a.Window), a.Min, a.Median),
				verdict(r, a.Rate >= want)},
			realTarget{"no circuit opening", openingsText(r), verdictGrowing(r, r.Openings == 0 && r.LoggedOpenings == 0 && r.MetricsErr == nil)})
	}
	return out
}

// shareTarget judges whether relays of equal priority carried load in
// proportion to their capacity.
func shareTarget(sc scenario, r RealResult) realTarget {
	var capSum float64
	for _, s := range sc.Relays {
		capSum += s.Config.Rate
	}
	worst := math.Inf(1)
	var parts []string
	for i, s := range sc.Relays {
		if i >= len(r.Relays) {
			return realTarget{"load shared by capacity", "-", "n/a"}
		}
		got := float64(r.Relays[i].Accepted) / float64(max(r.Relay.Accepted, 1))
		want := s.Config.Rate / capSum
		worst = min(worst, got/want)
		parts = append(parts, fmt.Sprintf("%s %.1f %% (capacity %.1f %%)", s.Name, 100*got, 100*want))
	}
	return realTarget{fmt.Sprintf("each relay's share of acceptances >= %.1fx its share of capacity", minCapacityShare),
		strings.Join(parts, ", "), verdict(r, worst >= minCapacityShare)}
}

// openingsText describes the circuit openings of a run.
func openingsText(r RealResult) string {
	s := fmt.Sprintf("%d (sum of %s{to=\"open\"} over %d workers); %d in their logs", r.Openings, openingsMetric, r.Workers, r.LoggedOpenings)
	if r.MetricsErr != nil {
		s += "; not all read: " + r.MetricsErr.Error()
	}
	return s
}
