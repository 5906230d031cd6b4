package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/postline/postline/bench/internal/benchstats"
)

// result is one measured run of one worker count.
type result struct {
	// Workers is how many worker processes shared the consumer group.
	Workers int
	// Mails is how many mails were sent.
	Mails int
	// Span is first enqueued_at to last sent_at.
	Span time.Duration
	// P50 and P99 are sent_at - enqueued_at per mail.
	P50, P99 time.Duration
	// WorkerCPU is the user plus system time of all worker processes,
	// start to exit.
	WorkerCPU time.Duration
	// MachineBusy is the share of the machine's CPU time (all cores) that
	// was not idle between the first publish and the last sent mail, from
	// /proc/stat: Kafka, PostgreSQL, the relay and the harness included.
	MachineBusy float64
	// MachineCPU is that busy CPU time.
	MachineCPU time.Duration
}

// Rate is mails per second over the span.
func (r result) Rate() float64 {
	if r.Span <= 0 {
		return 0
	}
	return float64(r.Mails) / r.Span.Seconds()
}

// perThousand is d per 1,000 mails, in seconds.
func (r result) perThousand(d time.Duration) float64 {
	if r.Mails == 0 {
		return 0
	}
	return d.Seconds() * 1000 / float64(r.Mails)
}

// targets are the least throughput ratios against one worker that a worker
// count is meant to reach; counts without one are reported without a
// verdict.
var targets = map[int]float64{2: 1.9, 4: 3.5}

// summarize returns one row per worker count, ascending, each metric the
// median over that count's runs. The span is derived from the median rate
// so that Rate() of the row is that median.
func summarize(all []result) []result {
	by := map[int][]result{}
	for _, r := range all {
		by[r.Workers] = append(by[r.Workers], r)
	}
	counts := make([]int, 0, len(by))
	for n := range by {
		counts = append(counts, n)
	}
	slices.Sort(counts)
	out := make([]result, 0, len(counts))
	for _, n := range counts {
		rs := by[n]
		pick := func(f func(result) float64) float64 { return benchstats.MedianOf(rs, f) }
		mails := int(pick(func(r result) float64 { return float64(r.Mails) }))
		rate := pick(result.Rate)
		row := result{
			Workers:     n,
			Mails:       mails,
			P50:         time.Duration(pick(func(r result) float64 { return float64(r.P50) })),
			P99:         time.Duration(pick(func(r result) float64 { return float64(r.P99) })),
			WorkerCPU:   time.Duration(pick(func(r result) float64 { return float64(r.WorkerCPU) })),
			MachineCPU:  time.Duration(pick(func(r result) float64 { return float64(r.MachineCPU) })),
			MachineBusy: pick(func(r result) float64 { return r.MachineBusy }),
		}
		if rate > 0 {
			row.Span = time.Duration(float64(mails) / rate * float64(time.Second))
		}
		out = append(out, row)
	}
	return out
}

// verdict is a row's ratio against the one-worker row and whether it meets
// its target.
type verdict struct {
	Ratio     float64 // NaN without a one-worker row
	Target    float64 // 0: no target for this count
	Pass      bool
	HasTarget bool
}

func judge(rows []result, r result) verdict {
	v := verdict{Ratio: math.NaN()}
	i := slices.IndexFunc(rows, func(b result) bool { return b.Workers == 1 })
	if i >= 0 && rows[i].Rate() > 0 {
		v.Ratio = r.Rate() / rows[i].Rate()
	}
	v.Target, v.HasTarget = targets[r.Workers]
	v.Pass = v.HasTarget && !math.IsNaN(v.Ratio) && v.Ratio >= v.Target
	return v
}

func (v verdict) targetCell() string {
	if !v.HasTarget {
		return "-"
	}
	return fmt.Sprintf("≥ %.2gx", v.Target)
}

func (v verdict) passCell() string {
	if !v.HasTarget {
		return "-"
	}
	return benchstats.Verdict(v.Pass)
}

func ratioCell(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", x)
}

// table writes the Markdown table of the summarized rows.
func table(w io.Writer, rows []result) {
	fmt.Fprintln(w, "| workers | mails | mails/s | vs 1 worker | target | verdict | p50 | p99 | worker CPU-s / 1,000 mails | machine CPU-s / 1,000 mails | machine busy |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|:---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		v := judge(rows, r)
		fmt.Fprintf(w, "| %d | %d | %.0f | %s | %s | %s | %s | %s | %.3f | %.3f | %.0f%% |\n",
			r.Workers, r.Mails, r.Rate(), ratioCell(v.Ratio), v.targetCell(), v.passCell(),
			fmtDur(r.P50), fmtDur(r.P99), r.perThousand(r.WorkerCPU), r.perThousand(r.MachineCPU), r.MachineBusy*100)
	}
}

// allPass reports whether every row with a target met it.
func allPass(rows []result) bool {
	for _, r := range rows {
		if v := judge(rows, r); v.HasTarget && !v.Pass {
			return false
		}
	}
	return true
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	default:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
}

// benchPkg is the pkg line of the benchstat file.
const benchPkg = "github.com/postline/postline/bench/scale"

// benchLine formats one run as a Go benchmark result line: one "op" is one
// mail, so ns/op is wall time per mail over the span.
func benchLine(r result) string {
	b := benchstats.MailsLine(fmt.Sprintf("BenchmarkScale/workers=%d", r.Workers), r.Mails, r.Span)
	fmt.Fprintf(b, " %.3f p50-ms %.3f p99-ms %.0f worker-cpu-ns/mail %.0f machine-cpu-ns/mail",
		float64(r.P50)/float64(time.Millisecond), float64(r.P99)/float64(time.Millisecond),
		perMailNs(r.WorkerCPU, r.Mails), perMailNs(r.MachineCPU, r.Mails))
	return b.String()
}

func perMailNs(d time.Duration, mails int) float64 {
	if mails == 0 {
		return 0
	}
	return float64(d) / float64(mails)
}

// cpuTimes is the "cpu" line of /proc/stat: busy and total jiffies over all
// cores.
type cpuTimes struct{ busy, total uint64 }

// parseProcStat reads the aggregate "cpu" line; idle and iowait count as
// not busy, nor does steal (time the hypervisor gave elsewhere).
func parseProcStat(s string) (cpuTimes, error) {
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) < 5 || f[0] != "cpu" {
			continue
		}
		var t cpuTimes
		for i, x := range f[1:] {
			var v uint64
			if _, err := fmt.Sscan(x, &v); err != nil {
				return cpuTimes{}, fmt.Errorf("/proc/stat: field %d %q: %w", i+1, x, err)
			}
			if i >= 8 { // guest and guest_nice are already in user and nice
				break
			}
			t.total += v
			if i != 3 && i != 4 && i != 7 { // idle, iowait, steal
				t.busy += v
			}
		}
		return t, nil
	}
	return cpuTimes{}, fmt.Errorf("/proc/stat: no aggregate cpu line")
}

// since returns the busy share and busy CPU time from a to b, with hz
// jiffies per second.
func (b cpuTimes) since(a cpuTimes, hz float64) (share float64, busy time.Duration) {
	if b.total <= a.total {
		return 0, 0
	}
	db := float64(b.busy - a.busy)
	return db / float64(b.total-a.total), time.Duration(db / hz * float64(time.Second))
}

// parseWorkers reads "1,2,4" into ascending distinct counts, each at least
// 1 and at most partitions.
func parseWorkers(s string, partitions int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || fmt.Sprint(n) != f {
			return nil, fmt.Errorf("-workers: %q is not a number", f)
		}
		if n < 1 || n > partitions {
			return nil, fmt.Errorf("-workers: %d must be between 1 and -partitions %d (a partition has one consumer in a group)", n, partitions)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// order is the sequence of worker counts of run r (from 1): ascending on odd
// runs, descending on even ones, so that drift of the machine over time
// does not favour one count.
func order(counts []int, r int) []int {
	o := slices.Clone(counts)
	if r%2 == 0 {
		slices.Reverse(o)
	}
	return o
}
