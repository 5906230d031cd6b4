package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/postline/postline/bench/internal/benchstats"
)

// result is one variant's measurement in one run.
type result struct {
	// Variant names the row: postline, naive, smtp-source, smtp-source-d.
	// It is a benchstat sub-benchmark name, so it has no spaces.
	Variant string
	// Mails is how many mails the variant delivered.
	Mails int
	// Span is first enqueued_at to last sent_at (wall time for smtp-source).
	Span time.Duration
	// HasLatency is false for smtp-source, which has no publish step.
	HasLatency bool
	// P50 and P99 are publish-to-accept latencies (sent_at - enqueued_at),
	// Max the largest (0: not read).
	P50, P99, Max time.Duration
	// CPU is the process's user plus system time.
	CPU time.Duration
	// PeakRSSBytes is the process's maximum resident set size (0: not
	// measured, as for the postfix row's many processes).
	PeakRSSBytes int64
	// Stack is the CPU of every process the row's mails pass through,
	// over its delivery window (stack.go).
	Stack stackCPU
	// HasAllocs says AllocBytes and Allocs were read: the Go runtime's
	// allocation counters of the worker over the delivery window, from its
	// /metrics (go_memstats_alloc_bytes_total, go_memstats_mallocs_total).
	HasAllocs          bool
	AllocBytes, Allocs float64
	// Hooks are the outcome loop's figures (the outcomes row only).
	Hooks webhookStats
}

// stackCPU is the CPU time of a row's whole stack, by process: every
// process its mails pass through, not only the worker's pipeline.
type stackCPU struct {
	// Measured is false when the row was not sampled.
	Measured bool
	// Own is the binary under test over the window: the worker, the
	// Postfix processes (master and every child it ran), smtp-source.
	Own time.Duration
	// Injector is what put the mails in: the harness publishing to Kafka
	// for the worker rows, smtp-source for the postfix row.
	Injector time.Duration
	// Kafka, Postgres and Sink are the shared services over the window.
	Kafka, Postgres, Sink time.Duration
}

// Total is the CPU of the whole stack.
func (p stackCPU) Total() time.Duration {
	return p.Own + p.Injector + p.Kafka + p.Postgres + p.Sink
}

// StackPerMail is the whole stack's CPU divided by the mails.
func (r result) StackPerMail() time.Duration {
	if r.Mails == 0 || !r.Stack.Measured {
		return 0
	}
	return r.Stack.Total() / time.Duration(r.Mails)
}

// AllocBytesPerMail and AllocsPerMail are the worker's allocations per
// mail; NaN when not measured.
func (r result) AllocBytesPerMail() float64 {
	if !r.HasAllocs || r.Mails == 0 {
		return math.NaN()
	}
	return r.AllocBytes / float64(r.Mails)
}

func (r result) AllocsPerMail() float64 {
	if !r.HasAllocs || r.Mails == 0 {
		return math.NaN()
	}
	return r.Allocs / float64(r.Mails)
}

// Rate is mails per second over the span.
func (r result) Rate() float64 {
	if r.Span <= 0 {
		return 0
	}
	return float64(r.Mails) / r.Span.Seconds()
}

// CPUPerMail is the process's CPU time divided by the mails it delivered.
func (r result) CPUPerMail() time.Duration {
	if r.Mails == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Mails)
}

// summarize returns one result per variant, in order of first appearance,
// each metric being the median over that variant's runs. The span is chosen
// so that the median rate is kept.
func summarize(all []result) []result {
	var order []string
	byName := map[string][]result{}
	for _, r := range all {
		if _, ok := byName[r.Variant]; !ok {
			order = append(order, r.Variant)
		}
		byName[r.Variant] = append(byName[r.Variant], r)
	}
	out := make([]result, 0, len(order))
	for _, name := range order {
		rs := byName[name]
		if len(rs) == 1 {
			out = append(out, rs[0])
			continue
		}
		pick := func(f func(result) float64) float64 { return benchstats.MedianOf(rs, f) }
		m := result{Variant: name, HasLatency: rs[0].HasLatency}
		m.Mails = int(pick(func(r result) float64 { return float64(r.Mails) }))
		if rate := pick(result.Rate); rate > 0 {
			m.Span = time.Duration(float64(m.Mails) / rate * float64(time.Second))
		}
		m.P50 = time.Duration(pick(func(r result) float64 { return float64(r.P50) }))
		m.P99 = time.Duration(pick(func(r result) float64 { return float64(r.P99) }))
		m.Max = time.Duration(pick(func(r result) float64 { return float64(r.Max) }))
		m.CPU = time.Duration(pick(func(r result) float64 { return float64(r.CPUPerMail()) }) * float64(m.Mails))
		m.PeakRSSBytes = int64(pick(func(r result) float64 { return float64(r.PeakRSSBytes) }))
		// Per-mail medians of each part, scaled back to the median mail count.
		perMail := func(f func(result) time.Duration) time.Duration {
			return time.Duration(pick(func(r result) float64 { return float64(f(r)) / float64(max(r.Mails, 1)) }) * float64(m.Mails))
		}
		if m.Stack.Measured = rs[0].Stack.Measured; m.Stack.Measured {
			m.Stack.Own = perMail(func(r result) time.Duration { return r.Stack.Own })
			m.Stack.Injector = perMail(func(r result) time.Duration { return r.Stack.Injector })
			m.Stack.Kafka = perMail(func(r result) time.Duration { return r.Stack.Kafka })
			m.Stack.Postgres = perMail(func(r result) time.Duration { return r.Stack.Postgres })
			m.Stack.Sink = perMail(func(r result) time.Duration { return r.Stack.Sink })
		}
		if m.HasAllocs = rs[0].HasAllocs; m.HasAllocs {
			m.AllocBytes = pick(result.AllocBytesPerMail) * float64(m.Mails)
			m.Allocs = pick(result.AllocsPerMail) * float64(m.Mails)
		}
		if rs[0].Hooks.Measured {
			m.Hooks = summarizeHooks(rs)
		}
		out = append(out, m)
	}
	return out
}

// formatRatio prints a ratio with two or three significant digits, or n/a
// when it is undefined.
func formatRatio(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0) || x <= 0:
		return "n/a"
	case x >= 100:
		return fmt.Sprintf("%.0fx", x)
	case x >= 10:
		return fmt.Sprintf("%.1fx", x)
	default:
		return fmt.Sprintf("%.2fx", x)
	}
}

// formatShare prints a fraction as a percentage.
func formatShare(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0) || x <= 0:
		return "n/a"
	case x < 0.1:
		return fmt.Sprintf("%.1f%%", 100*x)
	default:
		return fmt.Sprintf("%.0f%%", 100*x)
	}
}

// formatLatency prints milliseconds below a second and seconds above.
func formatLatency(d time.Duration, ok bool) string {
	switch {
	case !ok:
		return "n/a"
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

// ratio is a/b, NaN when b is zero.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// findRow returns the row of variant name.
func findRow(rows []result, name string) (result, bool) {
	i := slices.IndexFunc(rows, func(r result) bool { return r.Variant == name })
	if i < 0 {
		return result{}, false
	}
	return rows[i], true
}

// perThousand formats d per mail as CPU seconds per 1,000 mails.
func perThousand(d time.Duration, ok bool) string {
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", d.Seconds()*1000)
}

// formatCount prints a per-mail figure, n/a for NaN.
func formatCount(x float64, div float64, format string) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf(format, x/div)
}

// table writes the Markdown table of rows. baseline names the row that the
// "vs naive" column divides by, relay the row of the "vs postfix" columns,
// raw the row of the "share of raw sink" column; a missing row gives n/a.
func table(w io.Writer, rows []result, baseline, relay, raw string) {
	base, haveBase := findRow(rows, baseline)
	rel, haveRelay := findRow(rows, relay)
	sink, haveSink := findRow(rows, raw)
	fmt.Fprintf(w, "| variant | mails | mails/s | p50 | p99 | own CPU-s / 1,000 mails | whole-stack CPU-s / 1,000 mails | alloc KB / mail | allocs / mail | peak RSS MiB | throughput vs %s | throughput vs %s | whole-stack CPU per mail vs %s | share of %s rate |\n",
		baseline, relay, relay, raw)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		thr, thrRelay, cpuRelay, share := math.NaN(), math.NaN(), math.NaN(), math.NaN()
		if haveBase {
			thr = ratio(r.Rate(), base.Rate())
		}
		if haveRelay {
			thrRelay = ratio(r.Rate(), rel.Rate())
			if r.Stack.Measured && rel.Stack.Measured {
				cpuRelay = ratio(float64(r.StackPerMail()), float64(rel.StackPerMail()))
			}
		}
		if haveSink {
			share = ratio(r.Rate(), sink.Rate())
		}
		rss := "n/a"
		if r.PeakRSSBytes > 0 {
			rss = fmt.Sprintf("%.1f", float64(r.PeakRSSBytes)/(1<<20))
		}
		fmt.Fprintf(w, "| %s | %d | %.0f | %s | %s | %.3f | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.Variant, r.Mails, r.Rate(),
			formatLatency(r.P50, r.HasLatency), formatLatency(r.P99, r.HasLatency),
			r.CPUPerMail().Seconds()*1000, perThousand(r.StackPerMail(), r.Stack.Measured),
			formatCount(r.AllocBytesPerMail(), 1000, "%.1f"), formatCount(r.AllocsPerMail(), 1, "%.0f"), rss,
			formatRatio(thr), formatRatio(thrRelay), formatRatio(cpuRelay), formatShare(share))
	}
}

// stackTable writes where each row's whole-stack CPU went, per 1,000
// mails; rows without a whole-stack sample are left out.
func stackTable(w io.Writer, rows []result) {
	fmt.Fprintln(w, "| variant | own | injector | Kafka | PostgreSQL | smtp-sink | whole stack |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		if !r.Stack.Measured || r.Mails == 0 {
			continue
		}
		per := func(d time.Duration) string { return perThousand(d/time.Duration(r.Mails), true) }
		p := r.Stack
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", r.Variant,
			per(p.Own), per(p.Injector), per(p.Kafka), per(p.Postgres), per(p.Sink), per(p.Total()))
	}
}

// benchPkg is the pkg line of the benchstat file.
const benchPkg = "github.com/postline/postline/bench/e2e"

// benchLine formats r as a Go benchmark result line: one "op" is one mail,
// so ns/op is wall time per mail over the span.
func benchLine(r result) string {
	b := benchstats.MailsLine("BenchmarkE2E/"+r.Variant, r.Mails, r.Span)
	if r.HasLatency {
		fmt.Fprintf(b, " %.3f p50-ms %.3f p99-ms",
			float64(r.P50)/float64(time.Millisecond), float64(r.P99)/float64(time.Millisecond))
	}
	fmt.Fprintf(b, " %.0f cpu-ns/mail", float64(r.CPUPerMail()))
	if r.Stack.Measured {
		fmt.Fprintf(b, " %.0f stack-cpu-ns/mail", float64(r.StackPerMail()))
		// The shared services apart: their cost moves between rows of one
		// run, and a median table hides which row paid it.
		perMail := func(d time.Duration) float64 { return float64(d) / float64(max(r.Mails, 1)) }
		fmt.Fprintf(b, " %.0f kafka-cpu-ns/mail %.0f postgres-cpu-ns/mail %.0f sink-cpu-ns/mail",
			perMail(r.Stack.Kafka), perMail(r.Stack.Postgres), perMail(r.Stack.Sink))
	}
	if r.HasAllocs {
		fmt.Fprintf(b, " %.0f alloc-B/mail %.1f allocs/mail", r.AllocBytesPerMail(), r.AllocsPerMail())
	}
	if r.Hooks.Measured {
		b.WriteString(hookBenchFields(r.Hooks, r.Mails))
	}
	fmt.Fprintf(b, " %d peak-rss-B", r.PeakRSSBytes)
	return b.String()
}

// templateMinRatio is the least share of the plain jobs' rate that the
// template jobs are meant to reach.
const templateMinRatio = 0.8

// templateLine writes the line comparing the rate of the tmpl row with the
// plain row of the same run, or nothing when either row is missing.
func templateLine(w io.Writer, rows []result, tmpl, plain string) {
	ti := slices.IndexFunc(rows, func(r result) bool { return r.Variant == tmpl })
	pi := slices.IndexFunc(rows, func(r result) bool { return r.Variant == plain })
	if ti < 0 || pi < 0 {
		return
	}
	t, p := rows[ti].Rate(), rows[pi].Rate()
	r := "n/a"
	if x := ratio(t, p); !math.IsNaN(x) && !math.IsInf(x, 0) && x > 0 {
		r = fmt.Sprintf("%.2f×", x)
	}
	fmt.Fprintf(w, "template jobs: %.0f mails/s = %s plain jobs in the same run (target ≥ %.1f×)\n\n", t, r, templateMinRatio)
}

// The targets of the durable headline table, each a ratio or figure of one
// run (issue 13).
const (
	// relayMinRatio: durable Postline's rate against a Postfix relay in
	// front of the same sink.
	relayMinRatio = 10.0
	// rawMinShare: durable Postline's rate as a share of smtp-source -d
	// straight into the sink.
	rawMinShare = 0.40
	// baselineMaxCPU: the worker's CPU per mail against the baseline
	// build's, in the same run.
	baselineMaxCPU = 0.6
	// maxAllocBytes: bytes the worker allocates per mail (KB = 1,000 bytes).
	maxAllocBytes = 15_000
)

// target is one line of the verdict table.
type target struct {
	Name     string
	Measured string // "n/a" when a row it needs did not run
	Goal     string
	// Known is false when the figure could not be computed; Pass is then
	// false too and the verdict cell says so.
	Known, Pass bool
}

func (t target) verdict() string {
	if !t.Known {
		return "not measured"
	}
	return benchstats.Verdict(t.Pass)
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) && x > 0 }

// targets judges the summarized rows: the worker row against the relay,
// the raw sink and the baseline rows, and its allocations. baselineRev
// names the baseline build in the table.
func targets(rows []result, worker, relay, raw, baseline, baselineRev string) []target {
	w, haveW := findRow(rows, worker)
	var ts []target

	t := target{Name: fmt.Sprintf("%s vs %s relay, mails/s", worker, relay), Measured: "n/a", Goal: fmt.Sprintf("≥ %.0fx", relayMinRatio)}
	if r, ok := findRow(rows, relay); ok && haveW {
		if x := ratio(w.Rate(), r.Rate()); finite(x) {
			t.Known, t.Pass = true, x >= relayMinRatio
			t.Measured = fmt.Sprintf("%s (%.0f vs %.0f mails/s", formatRatio(x), w.Rate(), r.Rate())
			if c := ratio(float64(r.StackPerMail()), float64(w.StackPerMail())); w.Stack.Measured && r.Stack.Measured && finite(c) {
				t.Measured += fmt.Sprintf("; the relay's whole stack uses %s the CPU per mail", formatRatio(c))
			}
			t.Measured += ")"
		}
	}
	ts = append(ts, t)

	t = target{Name: fmt.Sprintf("%s share of %s, mails/s", worker, raw), Measured: "n/a", Goal: fmt.Sprintf("≥ %.0f%%", 100*rawMinShare)}
	if r, ok := findRow(rows, raw); ok && haveW {
		if x := ratio(w.Rate(), r.Rate()); finite(x) {
			t.Known, t.Pass = true, x >= rawMinShare
			t.Measured = fmt.Sprintf("%s (%.0f vs %.0f mails/s)", formatShare(x), w.Rate(), r.Rate())
		}
	}
	ts = append(ts, t)

	name := fmt.Sprintf("%s worker CPU per mail vs %s", worker, baseline)
	if baselineRev != "" {
		name += " (" + baselineRev + ")"
	}
	t = target{Name: name, Measured: "n/a", Goal: fmt.Sprintf("≤ %.1fx", baselineMaxCPU)}
	if b, ok := findRow(rows, baseline); ok && haveW {
		if x := ratio(float64(w.CPUPerMail()), float64(b.CPUPerMail())); finite(x) {
			t.Known, t.Pass = true, x <= baselineMaxCPU
			t.Measured = fmt.Sprintf("%s (%.3f vs %.3f ms)", formatRatio(x),
				float64(w.CPUPerMail())/float64(time.Millisecond), float64(b.CPUPerMail())/float64(time.Millisecond))
		}
	}
	ts = append(ts, t)

	t = target{Name: fmt.Sprintf("%s worker allocation per mail", worker), Measured: "n/a", Goal: fmt.Sprintf("≤ %.0f KB", maxAllocBytes/1000.0)}
	if haveW {
		if x := w.AllocBytesPerMail(); !math.IsNaN(x) {
			t.Known, t.Pass = true, x <= maxAllocBytes
			t.Measured = fmt.Sprintf("%.1f KB (%.0f allocs)", x/1000, w.AllocsPerMail())
		}
	}
	return append(ts, t)
}

// targetTable writes the verdict table.
func targetTable(w io.Writer, ts []target) {
	fmt.Fprintln(w, "| target | measured | goal | verdict |")
	fmt.Fprintln(w, "|---|---|---:|:---:|")
	for _, t := range ts {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.Name, t.Measured, t.Goal, t.verdict())
	}
}
