package main

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/postline/postline/bench/internal/benchstats"
)

// webhookStats are what the outcomes row measures of its outcome loop.
type webhookStats struct {
	// Measured is false for every other row.
	Measured bool
	// Events is the records on the events topic at the end (its end
	// offsets): one accepted event per mail when nothing is retried.
	Events int64
	// Received is the distinct events the endpoint took with a valid
	// signature; Requests is every POST it got, copies included; Bad is
	// those whose signature did not verify.
	Received, Requests, Bad int64
	// Samples is how many lag samples were taken (every lagSampleEvery
	// from the publish to the last webhook, and when the last mail was
	// sent).
	Samples int
	// MaxLag is the largest webhook lag sampled: events on the topic the
	// endpoint had not received. EndLag is the lag when the last mail was
	// sent.
	MaxLag, EndLag int64
	// Drained says the endpoint had every event within webhookDrainLimit
	// of the last mail. Drain is the time from the last mail's sent_at to
	// the last new event at the endpoint (zero when that came first), or
	// to giving up when not drained.
	Drained bool
	Drain   time.Duration
	// DispatcherCPU and DispatcherRSS are the dispatcher's user+system
	// time and peak RSS, start to SIGTERM (`/usr/bin/time -v`).
	DispatcherCPU time.Duration
	DispatcherRSS int64
}

// The outcomes row's targets (issue 29).
const (
	// outcomesMinRatio is the least share of the plain row's rate, in the
	// same run, that the row with the outcome loop on must reach.
	outcomesMinRatio = 0.8
	// webhookMaxLagSeconds bounds the largest webhook lag, in seconds of
	// the row's events (its events over its delivery span): a dispatcher
	// that keeps up holds at most about a second's events at any sample,
	// one that does not falls further behind for as long as mail flows.
	webhookMaxLagSeconds = 1.0
	// webhookMaxDrain bounds the time from the last mail sent to the last
	// webhook received.
	webhookMaxDrain = 5 * time.Second
)

// EventRate is the row's events per second over its delivery span (first
// enqueued_at to last sent_at); 0 when unknown.
func (r result) EventRate() float64 {
	if !r.Hooks.Measured || r.Span <= 0 {
		return 0
	}
	return float64(r.Hooks.Events) / r.Span.Seconds()
}

// lagSeconds is a webhook lag in seconds of the row's events; NaN when
// the rate is unknown.
func (r result) lagSeconds(lag int64) float64 {
	rate := r.EventRate()
	if rate <= 0 {
		return math.NaN()
	}
	return float64(lag) / rate
}

// summarizeHooks is the median of each figure over the runs of one
// variant; the row has drained when every run did, and the bad requests
// are summed, so that one bad signature in any run shows.
func summarizeHooks(rs []result) webhookStats {
	pick := func(f func(webhookStats) float64) float64 {
		return benchstats.MedianOf(rs, func(r result) float64 { return f(r.Hooks) })
	}
	h := webhookStats{Measured: true, Drained: true}
	h.Events = int64(pick(func(h webhookStats) float64 { return float64(h.Events) }))
	h.Received = int64(pick(func(h webhookStats) float64 { return float64(h.Received) }))
	h.Requests = int64(pick(func(h webhookStats) float64 { return float64(h.Requests) }))
	h.Samples = int(pick(func(h webhookStats) float64 { return float64(h.Samples) }))
	h.MaxLag = int64(pick(func(h webhookStats) float64 { return float64(h.MaxLag) }))
	h.EndLag = int64(pick(func(h webhookStats) float64 { return float64(h.EndLag) }))
	h.Drain = time.Duration(pick(func(h webhookStats) float64 { return float64(h.Drain) }))
	h.DispatcherCPU = time.Duration(pick(func(h webhookStats) float64 { return float64(h.DispatcherCPU) }))
	h.DispatcherRSS = int64(pick(func(h webhookStats) float64 { return float64(h.DispatcherRSS) }))
	for _, r := range rs {
		h.Drained = h.Drained && r.Hooks.Drained
		h.Bad += r.Hooks.Bad
	}
	return h
}

// outcomeTargets judges the row with the outcome loop on: its rate against
// the plain row of the same run, and whether the dispatcher kept up. A
// missing row, or a row without webhook figures, leaves them not measured.
func outcomeTargets(rows []result, outcomes, plain string) []target {
	o, haveO := findRow(rows, outcomes)
	haveO = haveO && o.Hooks.Measured

	t := target{Name: fmt.Sprintf("%s vs %s in the same run, mails/s", outcomes, plain), Measured: "n/a",
		Goal: fmt.Sprintf("≥ %.1fx", outcomesMinRatio)}
	if p, ok := findRow(rows, plain); ok && haveO {
		if x := ratio(o.Rate(), p.Rate()); finite(x) {
			t.Known, t.Pass = true, x >= outcomesMinRatio
			t.Measured = fmt.Sprintf("%s (%.0f vs %.0f mails/s", formatRatio(x), o.Rate(), p.Rate())
			// Where the rate went: the worker's own CPU per mail, and the
			// whole stack's, which holds the dispatcher and the endpoint
			// on the same cores.
			if c := ratio(float64(o.CPUPerMail()), float64(p.CPUPerMail())); finite(c) {
				t.Measured += fmt.Sprintf("; CPU per mail: worker %s", formatRatio(c))
				if c := ratio(float64(o.StackPerMail()), float64(p.StackPerMail())); o.Stack.Measured && p.Stack.Measured && finite(c) {
					t.Measured += fmt.Sprintf(", whole stack %s", formatRatio(c))
				}
			}
			t.Measured += ")"
		}
	}
	ts := []target{t}

	t = target{Name: fmt.Sprintf("%s webhook lag flat: max lag ≤ %.0f s of events, last webhook ≤ %.0f s after the last mail", outcomes, webhookMaxLagSeconds, webhookMaxDrain.Seconds()),
		Measured: "n/a", Goal: fmt.Sprintf("≤ %.0f s; ≤ %.0f s", webhookMaxLagSeconds, webhookMaxDrain.Seconds())}
	if haveO {
		h := o.Hooks
		if maxS := o.lagSeconds(h.MaxLag); !math.IsNaN(maxS) {
			t.Known = true
			t.Pass = maxS <= webhookMaxLagSeconds && h.Drained && h.Drain <= webhookMaxDrain && h.Bad == 0
			t.Measured = fmt.Sprintf("max %d events (%.2f s), %d at the last mail (%.2f s); ", h.MaxLag, maxS, h.EndLag, o.lagSeconds(h.EndLag))
			if h.Drained {
				t.Measured += fmt.Sprintf("last webhook %.2f s after the last mail", h.Drain.Seconds())
			} else {
				t.Measured += fmt.Sprintf("%d of %d events at the endpoint %.0f s after the last mail", h.Received, h.Events, h.Drain.Seconds())
			}
			if h.Bad > 0 {
				t.Measured += fmt.Sprintf("; %d requests did not verify", h.Bad)
			}
		}
	}
	return append(ts, t)
}

// outcomeTable writes the webhook figures of the rows that have them, or
// nothing when none has.
func outcomeTable(w io.Writer, rows []result) {
	header := false
	for _, r := range rows {
		if !r.Hooks.Measured {
			continue
		}
		if !header {
			fmt.Fprintf(w, "Outcome loop: events on the topic against webhooks the endpoint received (the webhook lag, sampled every %s):\n", lagSampleEvery)
			fmt.Fprintln(w)
			fmt.Fprintln(w, "| variant | events | received | requests | bad signatures | lag samples | max webhook lag | lag at the last mail | last webhook after the last mail | dispatcher CPU-s / 1,000 mails | dispatcher peak RSS MiB |")
			fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
			header = true
		}
		h := r.Hooks
		drain := fmt.Sprintf("%.2f s", h.Drain.Seconds())
		if !h.Drained {
			drain = fmt.Sprintf("not drained in %.0f s", h.Drain.Seconds())
		}
		cpu := "n/a"
		if r.Mails > 0 {
			cpu = fmt.Sprintf("%.3f", h.DispatcherCPU.Seconds()*1000/float64(r.Mails))
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %s | %s | %s | %s | %.1f |\n", r.Variant, h.Events, h.Received, h.Requests, h.Bad, h.Samples,
			formatLag(h.MaxLag, r.lagSeconds(h.MaxLag)), formatLag(h.EndLag, r.lagSeconds(h.EndLag)), drain, cpu,
			float64(h.DispatcherRSS)/(1<<20))
	}
	if header {
		fmt.Fprintln(w)
	}
}

// formatLag prints a lag in events and in seconds of events.
func formatLag(events int64, seconds float64) string {
	if math.IsNaN(seconds) {
		return fmt.Sprintf("%d", events)
	}
	return fmt.Sprintf("%d (%.2f s)", events, seconds)
}

// hookBenchFields are the webhook figures appended to a row's benchstat
// line.
func hookBenchFields(h webhookStats, mails int) string {
	return fmt.Sprintf(" %d webhook-max-lag-events %d webhook-end-lag-events %.0f webhook-drain-ms %.0f dispatcher-cpu-ns/mail",
		h.MaxLag, h.EndLag, float64(h.Drain)/float64(time.Millisecond), float64(h.DispatcherCPU)/float64(max(mails, 1)))
}
