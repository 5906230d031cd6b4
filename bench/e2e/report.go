package main

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"
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
	// P50 and P99 are publish-to-accept latencies (sent_at - enqueued_at).
	P50, P99 time.Duration
	// CPU is the process's user plus system time.
	CPU time.Duration
	// PeakRSSBytes is the process's maximum resident set size.
	PeakRSSBytes int64
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

// median returns the median of xs (the mean of the middle two for an even
// count), and NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	mid := len(s) / 2
	if len(s)%2 == 1 {
		return s[mid]
	}
	return (s[mid-1] + s[mid]) / 2
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
		pick := func(f func(result) float64) float64 {
			xs := make([]float64, len(rs))
			for i, r := range rs {
				xs[i] = f(r)
			}
			return median(xs)
		}
		m := result{Variant: name, HasLatency: rs[0].HasLatency}
		m.Mails = int(pick(func(r result) float64 { return float64(r.Mails) }))
		if rate := pick(result.Rate); rate > 0 {
			m.Span = time.Duration(float64(m.Mails) / rate * float64(time.Second))
		}
		m.P50 = time.Duration(pick(func(r result) float64 { return float64(r.P50) }))
		m.P99 = time.Duration(pick(func(r result) float64 { return float64(r.P99) }))
		m.CPU = time.Duration(pick(func(r result) float64 { return float64(r.CPUPerMail()) }) * float64(m.Mails))
		m.PeakRSSBytes = int64(pick(func(r result) float64 { return float64(r.PeakRSSBytes) }))
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

// table writes the Markdown table of rows. baseline names the row that the
// "vs naive" columns divide by, raw the row of the "share of raw sink"
// column; a missing row gives n/a.
func table(w io.Writer, rows []result, baseline, raw string) {
	find := func(name string) (result, bool) {
		i := slices.IndexFunc(rows, func(r result) bool { return r.Variant == name })
		if i < 0 {
			return result{}, false
		}
		return rows[i], true
	}
	base, haveBase := find(baseline)
	sink, haveSink := find(raw)
	fmt.Fprintf(w, "| variant | mails | mails/s | p50 | p99 | CPU-s / 1,000 mails | peak RSS MiB | throughput vs %s | CPU per mail vs %s | share of %s rate |\n",
		baseline, baseline, raw)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		thr, cpu, share := math.NaN(), math.NaN(), math.NaN()
		if haveBase {
			thr = ratio(r.Rate(), base.Rate())
			cpu = ratio(float64(r.CPUPerMail()), float64(base.CPUPerMail()))
		}
		if haveSink {
			share = ratio(r.Rate(), sink.Rate())
		}
		fmt.Fprintf(w, "| %s | %d | %.0f | %s | %s | %.3f | %.1f | %s | %s | %s |\n",
			r.Variant, r.Mails, r.Rate(),
			formatLatency(r.P50, r.HasLatency), formatLatency(r.P99, r.HasLatency),
			r.CPUPerMail().Seconds()*1000, float64(r.PeakRSSBytes)/(1<<20),
			formatRatio(thr), formatRatio(cpu), formatShare(share))
	}
}

// benchHeader writes the lines benchstat reads as configuration.
func benchHeader(w io.Writer, cpu string) {
	fmt.Fprintf(w, "goos: %s\ngoarch: %s\npkg: github.com/postline/postline/bench/e2e\n", runtime.GOOS, runtime.GOARCH)
	if cpu != "" {
		fmt.Fprintf(w, "cpu: %s\n", cpu)
	}
}

// benchLine formats r as a Go benchmark result line: one "op" is one mail,
// so ns/op is wall time per mail over the span.
func benchLine(r result) string {
	var b strings.Builder
	nsPerMail := 0.0
	if r.Mails > 0 {
		nsPerMail = float64(r.Span) / float64(r.Mails)
	}
	fmt.Fprintf(&b, "BenchmarkE2E/%s %d %.0f ns/op %.1f mails/s", r.Variant, r.Mails, nsPerMail, r.Rate())
	if r.HasLatency {
		fmt.Fprintf(&b, " %.3f p50-ms %.3f p99-ms",
			float64(r.P50)/float64(time.Millisecond), float64(r.P99)/float64(time.Millisecond))
	}
	fmt.Fprintf(&b, " %.0f cpu-ns/mail %d peak-rss-B", float64(r.CPUPerMail()), r.PeakRSSBytes)
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
