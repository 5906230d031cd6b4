package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// scenarioSummary is one scenario's line in the summary table.
type scenarioSummary struct {
	name    string
	r       RealResult
	b       bound
	bounded bool
	targets []realTarget
}

// scenariosReport writes a section per scenario in results (its setup,
// bound, the adaptive run's figures and targets) and a summary table.
func scenariosReport(w io.Writer, p RealParams, results []RealResult) {
	fmt.Fprintf(w, "\n## Real scenarios: bounds and targets (adaptive strategy)\n\n")
	fmt.Fprintf(w, "Lower bound: %s.\n\n", boundFormula)
	fmt.Fprintf(w, "Wasted = attempts refused for the moment (the relay's throttle reply whatever its code, 421 at the greeting or at MAIL, "+
		"dropped 421 4.4.2, 451 4.3.0); injected transient faults = the relay's drops and 451 replies, which any client gets. "+
		"Targets: every deliverable job delivered; mean latency <= %.2fx the bound; makespan <= %.2fx the minimum makespan (both FAIL when a "+
		"deliverable job was not delivered); wasted beyond the injected faults <= %.0f %% of jobs; attempts <= %.2fx jobs; Postfix's: deferred "+
		"(4xx answers / attempts) <= %.0f %%; two-relays: each relay's share of acceptances >= %.1fx its share of capacity; fleet200: the relay "+
		"accepted >= %.0f %% of its rate from t=%s on, no circuit opening.\n",
		maxMeanOverBound, maxMakespanOverMin, 100*maxBeyondFaultsShare, maxAttemptsPerJob, 100*maxPostfixDeferred, minCapacityShare,
		100*minFleetRateShare, fleetWarmup)
	var summary []scenarioSummary
	for _, name := range allScenarios {
		sc, err := p.scenario(name)
		if err != nil {
			continue
		}
		rs := ofScenario(results, name)
		if len(rs) == 0 {
			continue
		}
		s := scenarioSummary{name: name}
		var c capacity
		c, s.bounded = sc.capacity()
		s.b = bound{Deliverable: sc.deliverable(), PerDelivery: 1 / (1 - sc.tokenShare())}
		if s.bounded {
			s.b = lowerBound(c, s.b.Deliverable, sc.tokenShare())
		}
		fmt.Fprintf(w, "\n### %s\n\n%s. %d jobs, %d deliverable; %s.\n\n", name, sc.About, sc.Jobs, s.b.Deliverable, workersText(sc))
		if s.bounded {
			fmt.Fprintf(w, "Bound: C(t) = %s; q = %.3f (%.3f tokens per delivery): mean latency >= %s, makespan >= %s.\n\n",
				c.String(), sc.tokenShare(), s.b.PerDelivery, secs(s.b.Mean), secs(s.b.Makespan))
		} else {
			fmt.Fprintf(w, "Bound: none from capacity (a relay without a rate limit; sessions taken as instant).\n\n")
		}
		fmt.Fprintf(w, "| strategy | delivered | failed / dead | makespan | mean latency | mean / bound | p99 latency | attempts | wasted (421 / throttle / transient) | attempts/job | peak delay depth | deferred | circuit openings |\n")
		fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rs {
			ratio := "-"
			if s.bounded {
				ratio = fmt.Sprintf("%.2fx", r.Mean().Seconds()/max(s.b.Mean.Seconds(), 1e-9))
			}
			fmt.Fprintf(w, "| %s | %d | %d / %d | %s | %s | %s | %s | %d | %d (%d / %d / %d) | %.3f | %d | %.1f %% | %d |\n",
				r.Strategy, r.Delivered, r.Failed, r.Dead, makespanText(r), secs(r.Mean()), ratio, secs(r.P99()), r.Attempts,
				r.Wasted, r.Refused, r.Slowed, r.Wasted-r.Refused-r.Slowed, float64(r.Attempts)/float64(max(r.Jobs, 1)), r.PeakDepth,
				100*r.Deferred(), r.Openings)
		}
		a, ok := find(rs, StratAdaptive)
		if !ok {
			fmt.Fprintf(w, "\nNo adaptive run: targets n/a.\n")
			summary = append(summary, s)
			continue
		}
		s.r = a
		fmt.Fprintf(w, "\nAdaptive: publishing took %s; %d worker process(es).\n\n", secs(a.Publish), a.Workers)
		relaysTable(w, a)
		extras(w, sc, a)
		s.targets = scenarioTargets(sc, a, s.b, s.bounded)
		fmt.Fprintf(w, "\n| target (%s, adaptive) | value | result |\n|---|---|---|\n", name)
		for _, t := range s.targets {
			fmt.Fprintf(w, "| %s | %s | %s |\n", t.name, t.value, t.result)
		}
		summary = append(summary, s)
	}
	summaryTable(w, summary)
}

func find(rs []RealResult, strategy string) (RealResult, bool) {
	for _, r := range rs {
		if r.Strategy == strategy {
			return r, true
		}
	}
	return RealResult{}, false
}

func makespanText(r RealResult) string {
	if r.TimedOut {
		return fmt.Sprintf("TIMEOUT (%d unfinished)", r.Unfinished)
	}
	return secs(r.Makespan)
}

func workersText(sc scenario) string {
	s := fmt.Sprintf("%d worker(s)", sc.Workers)
	for _, at := range sc.Late {
		s += fmt.Sprintf(", one more at t=%s", at)
	}
	if sc.DefaultTransport {
		return s + ", every setting default (POSTLINE_SENDERS, max_conns and POSTLINE_LAG_INTERVAL too)"
	}
	return s + ", the harness's transport (POSTLINE_SENDERS, max_conns, POSTLINE_LAG_INTERVAL as in the main scenario)"
}

// relaysTable writes each relay's counters.
func relaysTable(w io.Writer, r RealResult) {
	fmt.Fprintf(w, "| relay | accepted | throttled | refused at greeting | hung up | dropped (421 4.4.2) | 451 4.3.0 | rejected (550 5.1.1) | connections | peak open |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, st := range r.Relays {
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n", r.RelayNames[i], st.Accepted, st.Throttled, st.Refused,
			st.HungUp, st.TransientDrops, st.TransientReplies, st.PermanentRejects, st.Connections, st.PeakOpen)
	}
}

// extras writes the delay tiers used and what only some scenarios
// measure.
func extras(w io.Writer, sc scenario, r RealResult) {
	if len(r.Tiers) > 0 {
		parts := make([]string, len(r.Tiers))
		for i, t := range r.Tiers {
			parts[i] = fmt.Sprintf("%s %d", t.Tier, t.Records)
		}
		fmt.Fprintf(w, "\nRetries written to the delay tiers: %s.\n", strings.Join(parts, ", "))
	}
	if refusals := append(slices.Clone(r.Relay.ThrottledAt), r.Relay.RefusedAt...); len(refusals) > 0 {
		fmt.Fprintf(w, "\nThrottle replies and refusals at the greeting per 10 s since publishing: %s.\n", perTenSeconds(refusals, r.Start))
	}
	for _, ch := range r.Relay.RateChanges {
		fmt.Fprintf(w, "\nRelay rate set to %.0f/s, burst %d, at t=%s.", ch.Rate, ch.Burst, secs(ch.At.Sub(r.Start)))
	}
	if len(r.Relay.RateChanges) > 0 {
		fmt.Fprintln(w)
	}
	for k, at := range r.Joined {
		f := refusalsAround(r.Relay, r.Start, at, joinWindow)
		fmt.Fprintf(w, "\nWorker %d started at t=%s. In the %s before: %d throttle replies (450), %d connections refused at the greeting (421); "+
			"in the %s after: %d and %d.\n", sc.Workers+k+1, at, joinWindow, f.ThrottledBefore, f.RefusedBefore, joinWindow, f.ThrottledAfter, f.RefusedAfter)
	}
	if sc.Name == ScenarioFleet200 {
		a := acceptedRate(r.Relay, r.Start, fleetWarmup)
		fmt.Fprintf(w, "\nAccepted rate: every acceptance of the relay from t=%s (after publishing started) to its last acceptance at t=%s, "+
			"divided by that window: %d / %s = %.1f/s; per whole second of the window: min %d, median %d.\n",
			fleetWarmup, secs(fleetWarmup+a.Window), a.Count, secs(a.Window), a.Rate, a.Min, a.Median)
		fmt.Fprintf(w, "\nCircuit openings: %s.\n", openingsText(r))
	}
}

// summaryTable writes one line per scenario.
func summaryTable(w io.Writer, rows []scenarioSummary) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### Summary (adaptive strategy)\n\n")
	fmt.Fprintf(w, "| scenario | jobs | delivered / deliverable | makespan (minimum) | mean latency (bound) | attempts/job | wasted beyond faults | circuit openings | targets passed | failed targets |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, s := range rows {
		if s.targets == nil {
			fmt.Fprintf(w, "| %s | - | - | - | - | - | - | - | n/a | no adaptive run |\n", s.name)
			continue
		}
		r := s.r
		minMake, meanBound := "-", "-"
		if s.bounded {
			minMake, meanBound = secs(s.b.Makespan), secs(s.b.Mean)
		}
		pass, judged := 0, 0
		var failed []string
		for _, t := range s.targets {
			if t.result == "n/a" {
				continue
			}
			judged++
			if t.result == "PASS" {
				pass++
			} else {
				failed = append(failed, t.name+" ("+t.result+")")
			}
		}
		fmt.Fprintf(w, "| %s | %d | %d / %d | %s (%s) | %s (%s) | %.3f | %d | %d | %d of %d | %s |\n", s.name, r.Jobs, r.Delivered, s.b.Deliverable,
			makespanText(r), minMake, secs(r.Mean()), meanBound, float64(r.Attempts)/float64(max(r.Jobs, 1)), beyondFaults(r), r.Openings,
			pass, judged, strings.Join(failed, "; "))
	}
}

// String writes C(t) piecewise, e.g. "50 + 50 t for t < 20 s, ...".
func (c capacity) String() string {
	parts := make([]string, len(c.Steps))
	for i, s := range c.Steps {
		at := c.At(s.From)
		term := fmt.Sprintf("%.0f + %.0f (t - %s)", at, s.Rate, secs(s.From))
		if s.From == 0 {
			term = fmt.Sprintf("%.0f + %.0f t", at, s.Rate)
		}
		if i+1 < len(c.Steps) {
			term += fmt.Sprintf(" for t < %s", secs(c.Steps[i+1].From))
		} else if i > 0 {
			term += " after"
		}
		parts[i] = term
	}
	return strings.Join(parts, ", ")
}

// boundCurve is the most jobs any strategy could have delivered by t:
// min(D, C(t)/tokens per delivery), for the plots.
func boundCurve(c capacity, b bound, until time.Duration) [][2]float64 {
	var pts [][2]float64
	step := max(until/200, 100*time.Millisecond)
	for t := time.Duration(0); t <= until+step; t += step {
		pts = append(pts, [2]float64{t.Seconds(), min(float64(b.Deliverable), c.At(t)/b.PerDelivery)})
	}
	return pts
}

// perTenSeconds counts times per 10 s window since start: "12 3 0 1".
func perTenSeconds(times []time.Time, start time.Time) string {
	var counts []int
	for _, t := range times {
		i := max(0, int(t.Sub(start)/(10*time.Second)))
		for len(counts) <= i {
			counts = append(counts, 0)
		}
		counts[i]++
	}
	parts := make([]string, len(counts))
	for i, n := range counts {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, " ")
}
