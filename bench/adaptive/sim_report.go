package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/failure"
)

// report prints the main scenario's parameters, its table and Postfix's,
// and the targets of issue 4.
func report(w io.Writer, p Params, tiers string, main, postfix []Result) {
	pc := p.Pacer.WithDefaults()
	bound := p.MeanBound()
	fmt.Fprintf(w, "## Adaptive retry policy: simulator\n\n")
	fmt.Fprintf(w, "| parameter | value |\n|---|---|\n")
	rows := [][2]string{
		{"jobs (burst at t=0, FIFO mail.jobs)", fmt.Sprint(p.Jobs)},
		{"relay rate R (token bucket)", fmt.Sprintf("%.0f mails/s, burst %d", p.Rate, p.Burst)},
		{"relay connections C", fmt.Sprintf("%d (421 4.7.0 at the greeting above it, %v, no connection held)", p.Conns, p.ConnectTime)},
		{"rate refusal", fmt.Sprintf("450 4.7.1 at RCPT, %v, holds a connection", p.RejectTime)},
		{"retry hint in 421/450", fmt.Sprint(p.Hint)},
		{"accepted session", fmt.Sprint(p.SendTime)},
		{"transient drops (421 4.4.2) / permanent rejections (550 5.1.1)", fmt.Sprintf("%.1f %% of sessions / %.1f %% of recipients", 100*p.Transient, 100*p.Permanent)},
		{"relay capacity min(R, C/session)", fmt.Sprintf("%.1f mails/s", p.Capacity())},
		{"client senders (all strategies)", fmt.Sprint(p.Senders)},
		{"delay tiers (all strategies, as the worker)", tiers + " + scheduler jitter min(1s, tier/10)"},
		{"adaptive only: retry budgets", onOff(p.Budgets) + " (the worker's adaptive.Budgets defaults, normal priority)"},
		{"adaptive only: send control (the worker's adaptive.SendControl)", onOff(p.Control) + fmt.Sprintf(": AIMD concurrency (initial %d, max %d); "+
			"a learned rate, unpaced until a rate refusal while the relay still accepts mail, then %.2fx the last second's accepted rate, cut x%.2f per refusal at most once per %v "+
			"(from the accepted rate when that is lower), growing back by half the distance to the last cut per second, by %.0f %% of itself per second near it (at least %.1f/s), doubling its gain each second above it; "+
			"a short throttle waited out in the worker without a retry token, retry budgets earned by first attempts",
			min(adaptive.DefaultAIMDInitial, p.Senders), p.Senders, pc.Factor, pc.Factor, pc.Interval, 100*pc.Probe, pc.Increase)},
		{"seed", fmt.Sprint(p.Seed)},
	}
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s |\n", r[0], r[1])
	}
	fmt.Fprintf(w, "\n%s\n\n", defaultsWhy)
	fmt.Fprintf(w, "Uniform (cenkalti/backoff v5 defaults, class-blind) and reference (the design brief's formula) run as themselves: "+
		"no budgets, no send control. Wasted = attempts answered throttled or transient. Every reply is classified by failure.ClassifyReply, as the worker does.\n\n")
	fmt.Fprintf(w, "Lower bound on mean latency (any strategy): %s = (D-burst)^2/(2*capacity*D) + session, D = %d deliverable jobs (about N/(2R) + session; "+
		"the scenarios below give the tighter bound that counts drops and connections).\n\n",
		secs(bound), int(float64(p.Jobs)*(1-p.Permanent)))
	fmt.Fprintf(w, "| strategy | delivered | makespan | mean latency | mean / bound | p99 latency | attempts | wasted (421 / 450 / transient) | attempts/job | peak delay depth | Postfix scenario: deferred |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, r := range main {
		row(w, r, p, bound, fmt.Sprintf("%.1f %%", 100*postfix[i].Deferred()))
	}
	pp := PostfixParams(p)
	pb := pp.MeanBound()
	fmt.Fprintf(w, "\nPostfix scenario: the same model with no rate limit, %d connections (capacity %.0f/s), %d senders; deferred = 4xx answers / attempts. "+
		"Lower bound on mean latency: %s.\n\n", pp.Conns, pp.Capacity(), pp.Senders, secs(pb))
	fmt.Fprintf(w, "| strategy | delivered | makespan | mean latency | mean / bound | p99 latency | attempts | wasted (421 / 450 / transient) | attempts/job | peak delay depth | deferred |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range postfix {
		row(w, r, pp, pb, fmt.Sprintf("%.1f %%", 100*r.Deferred()))
	}
	u, ref, a, pa := main[0], main[1], main[2], postfix[2]
	fmt.Fprintf(w, "\nAdaptive at the end: pacer %s after %d decreases, AIMD limit %d (Postfix scenario: %s, %d decreases, limit %d).\n\n",
		rateText(a.FinalRate), a.RateDecreases, a.FinalLimit, rateText(pa.FinalRate), pa.RateDecreases, pa.FinalLimit)
	fmt.Fprintf(w, "| target | value | reachable? | result |\n|---|---|---|---|\n")
	target := func(name, value string, reachable bool, why string, ok bool) {
		t := Target{Name: name, Value: value, Reachable: reachable, Why: why, OK: ok}
		fmt.Fprintf(w, "| %s | %s | %s: %s | %s |\n", t.Name, t.Value, yesNo(t.Reachable), t.Why, t.Verdict())
	}
	// The least waste any strategy can have: the transient drops of one
	// session per job.
	minWasted := float64(p.Jobs) * p.Transient / (1 - p.Transient)
	latRed := 1 - a.Mean().Seconds()/u.Mean().Seconds()
	best := 1 - bound.Seconds()/u.Mean().Seconds()
	target("mean latency >= 70 % below uniform", fmt.Sprintf("%.1f %% lower", 100*latRed),
		best >= 0.70, fmt.Sprintf("at the bound it would be %.1f %% lower (needs uniform >= %.1f s = 3.33x bound)", 100*best, bound.Seconds()/0.3), latRed >= 0.70)
	wasteRed := 1 - float64(a.Wasted)/float64(max(u.Wasted, 1))
	bestW := 1 - minWasted/float64(max(u.Wasted, 1))
	target("wasted attempts >= 95 % below uniform", fmt.Sprintf("%.1f %% lower", 100*wasteRed),
		bestW >= 0.95, fmt.Sprintf("transient drops alone (%.0f) are %.1f %% lower", minWasted, 100*bestW), wasteRed >= 0.95)
	apj := float64(a.Attempts) / float64(p.Jobs)
	target("attempts <= 1.1x offered jobs", fmt.Sprintf("%.3fx", apj),
		1/(1-p.Transient) <= 1.1, fmt.Sprintf("floor %.3fx", 1/(1-p.Transient)), apj <= 1.1)
	target("fewer wasted attempts than reference", fmt.Sprintf("%d vs %d", a.Wasted, ref.Wasted),
		minWasted < float64(ref.Wasted), fmt.Sprintf("floor %.0f", minWasted), a.Wasted < ref.Wasted)
	target("mean latency no worse than reference", fmt.Sprintf("%s vs %s", secs(a.Mean()), secs(ref.Mean())),
		bound <= ref.Mean(), "bound "+secs(bound), a.Mean() <= ref.Mean())
	target("<= 16.5 % deferred in Postfix's scenario", fmt.Sprintf("%.1f %%", 100*pa.Deferred()),
		p.Transient <= 0.165, fmt.Sprintf("floor %.1f %% (transient drops)", 100*p.Transient), pa.Deferred() <= 0.165)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// ScenarioRun is one scenario's bounds and runs, one per strategy.
type ScenarioRun struct {
	Scenario Scenario
	Bounds   Bounds
	Results  []Result // in Scenario.Strategies' order
}

// Adaptive is the adaptive strategy's run.
func (r ScenarioRun) Adaptive() Result {
	for _, x := range r.Results {
		if x.Strategy == StratAdaptive {
			return x
		}
	}
	return Result{}
}

// Targets are the adaptive run's targets.
func (r ScenarioRun) Targets() []Target { return r.Scenario.Targets(r.Bounds, r.Adaptive()) }

// RunScenarios runs every strategy of every scenario.
func RunScenarios(scs []Scenario) []ScenarioRun {
	out := make([]ScenarioRun, 0, len(scs))
	for _, sc := range scs {
		r := ScenarioRun{Scenario: sc, Bounds: sc.Bounds()}
		for _, s := range sc.Strategies {
			r.Results = append(r.Results, RunScenario(sc, s))
		}
		out = append(out, r)
	}
	return out
}

// replyTable prints every reply the modelled relays give and the worker's
// verdict on it.
func replyTable(w io.Writer) {
	fmt.Fprintf(w, "Every relay reply goes through failure.ClassifyReply, the worker's classifier; what it makes of the modelled relays' replies:\n\n")
	fmt.Fprintf(w, "| relay does | reply | class | limit | retry after | rule |\n|---|---|---|---|---|---|\n")
	for _, x := range []struct {
		what  string
		reply Reply
	}{
		{"too many connections, at the greeting", tooManyConnections(1)},
		{"over its rate, at RCPT", rateExceeded(1)},
		{"over its rate, dressed as permanent (fivexx)", refused5xx(1)},
		{"transient drop", replyDrop},
		{"transient server error (fleet200)", replyTempFailure},
		{"bad recipient", replyBadRecipient},
	} {
		v := failure.ClassifyReply(x.reply.Code, x.reply.Enhanced, x.reply.Text)
		fmt.Fprintf(w, "| %s | `%s` | %s | %s | %v | %s |\n", x.what, x.reply, v.Class, cmpOr(string(v.Limit), "-"), v.RetryAfter, v.Rule)
	}
	fmt.Fprintln(w)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// scenarioReport prints each scenario's relays, bounds, runs and targets,
// then a summary across them.
func scenarioReport(w io.Writer, runs []ScenarioRun) {
	fmt.Fprintf(w, "\n## Scenarios: lower bounds and targets\n\n")
	fmt.Fprintf(w, "Each scenario shares the transport above (senders per worker, session times, delay tiers, seed) and the adaptive defaults. "+
		"Workers of one consumer group take jobs from one FIFO mail.jobs; retries return at its tail, except relay throttles shorter than the first tier, "+
		"which wait in the worker and go before its new jobs (at most three in a row, as the worker does). "+
		"Relays of one priority form a group: a send goes to the relay whose send control admits it now, the one with the most headroom (limit - in flight) first. "+
		"The simulator has no circuit breaker. Targets are the adaptive strategy's.\n\n")
	replyTable(w)
	for _, r := range runs {
		scenarioSection(w, r)
	}
	fmt.Fprintf(w, "### Summary\n\n")
	fmt.Fprintf(w, "| scenario | jobs | bound mean | mean | x | bound makespan | makespan | x | wasted beyond drops | attempts/job | result |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range runs {
		a, b := r.Adaptive(), r.Bounds
		var failed []string
		for _, t := range r.Targets() {
			if t.Verdict() != "PASS" {
				failed = append(failed, t.Verdict()+": "+t.Name)
			}
		}
		result := "PASS"
		if len(failed) > 0 {
			result = strings.Join(failed, "; ")
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %.2fx | %s | %s | %.2fx | %.2f %% | %.3f | %s |\n", r.Scenario.Name, b.Jobs,
			secs(b.Mean), secs(a.Mean()), a.Mean().Seconds()/b.Mean.Seconds(), secs(b.Makespan), secs(a.Makespan),
			a.Makespan.Seconds()/b.Makespan.Seconds(), 100*float64(a.Wasted-a.Drops)/float64(b.Jobs),
			float64(a.Attempts)/float64(b.Jobs), result)
	}
	fmt.Fprintln(w)
}

func scenarioSection(w io.Writer, r ScenarioRun) {
	sc, b := r.Scenario, r.Bounds
	p := sc.Params
	fmt.Fprintf(w, "### Scenario %s: %s\n\n", sc.Name, sc.What)
	workers := fmt.Sprintf("%d worker(s) of %d senders", max(sc.Workers, 1), p.Senders)
	for _, at := range sc.JoinAt {
		workers += fmt.Sprintf(", one more from t=%v (SetMembers on every member; the joiner seeded with the others' learned rates where SendControl has Seed)", at)
	}
	fmt.Fprintf(w, "%d jobs at t=0, %.1f %% bad recipients (550 5.1.1); %s.\n\n", p.Jobs, 100*p.Permanent, workers)
	fmt.Fprintf(w, "| relay | rate | burst | connections | drops | over-rate reply | hint |\n|---|---|---:|---:|---|---|---|\n")
	for _, s := range sc.Relays {
		rt := "unlimited"
		if s.Rate > 0 {
			rt = fmt.Sprintf("%g/s", s.Rate)
		}
		for _, ph := range s.Phases {
			rt += fmt.Sprintf(", %g/s from %v", ph.Rate, ph.At)
		}
		over := "450 4.7.1"
		if s.Refuse5xx {
			over = "550 5.7.1"
		}
		drop := s.Drop
		if drop.Code == 0 {
			drop = replyDrop
		}
		hint := "bucket refill time (>= 1 s)"
		if s.Hint > 0 {
			hint = s.Hint.String()
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %.1f %% (%d %s) | %s | %s |\n", s.Name, rt, s.Burst, s.Conns, 100*s.Transient, drop.Code, drop.Enhanced, over, hint)
	}
	fmt.Fprintf(w, "\nLower bounds (any strategy): C(t) = sum over relays of min(burst + integral of the rate, connections*(floor(t/%v)+1)); "+
		"D = %d deliverable of %d jobs; each job takes 1 + w*q/(1-q) = %.4f slots (q = %.1f %% drops, w = %g slot per drop: %s); "+
		"mean >= mean over i <= D of inf{t: C(t) >= i*%.4f} + %v = **%s**; makespan >= inf{t: C(t) >= %d*%.4f} + %v = **%s**. "+
		"Drops are counted at their expected share.\n\n",
		p.SendTime, b.Deliverable, b.Jobs, b.slotsPerJob(), 100*b.DropShare, b.DropSlots, dropSlotWhy(b.DropSlots),
		b.slotsPerJob(), p.SendTime, secs(b.Mean), b.Jobs, b.slotsPerJob(), p.SendTime, secs(b.Makespan))
	fmt.Fprintf(w, "| strategy | delivered | lost | makespan | / bound | mean latency | / bound | p99 latency | attempts | wasted (421 / rate / drops) | beyond drops | attempts/job | peak delay depth | short throttles held in the worker | delivered per relay |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, x := range r.Results {
		per := make([]string, len(x.PerRelay))
		for i, n := range x.PerRelay {
			per[i] = fmt.Sprintf("%s %d", sc.Relays[i].Name, n)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %s | %.2fx | %s | %.2fx | %s | %d | %d (%d / %d / %d) | %d | %.3f | %d | %d | %s |\n",
			x.Strategy, x.Delivered, x.Lost, secs(x.Makespan), x.Makespan.Seconds()/b.Makespan.Seconds(), secs(x.Mean()),
			x.Mean().Seconds()/b.Mean.Seconds(), secs(x.P99()), x.Attempts, x.Wasted, x.Refused, x.Slowed, x.Drops,
			x.Wasted-x.Drops, float64(x.Attempts)/float64(p.Jobs), x.PeakDepth, x.Held, strings.Join(per, ", "))
	}
	a := r.Adaptive()
	fmt.Fprintf(w, "\nAdaptive at the end (first worker, first relay): pacer %s, AIMD limit %d; %d rate cuts over all workers and relays.",
		rateText(a.FinalRate), a.FinalLimit, a.RateDecreases)
	if len(sc.JoinAt) > 0 {
		fmt.Fprintf(w, " Joining worker seeded: %s.", yesNo(a.Seeded))
	}
	if sc.RateFrom > 0 {
		fmt.Fprintf(w, " Relay rate used from %v to the makespan: %.1f %% (sessions that took a token / the rate's integral).", sc.RateFrom, 100*sc.RateUse(a))
	}
	fmt.Fprintf(w, "\n\n| target (adaptive) | value | reachable? | result |\n|---|---|---|---|\n")
	for _, t := range r.Targets() {
		fmt.Fprintf(w, "| %s | %s | %s: %s | %s |\n", t.Name, t.Value, yesNo(t.Reachable), t.Why, t.Verdict())
	}
	fmt.Fprintf(w, "| p99 latency (no target) | %s | - | - |\n\n", secs(a.P99()))
}

func dropSlotWhy(w float64) string {
	if w >= 1 {
		return "every relay is bound by its rate, and a drop takes a token"
	}
	return "a relay is bound by its connections, and a drop holds one for half a session"
}
