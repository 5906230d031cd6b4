package main

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/postline/postline/bench/internal/benchstats"
)

// Targets of the soak (issue 13).
const (
	// TargetRateRatio is the least rate of the last window against the
	// first: no decay as the table grows.
	TargetRateRatio = 0.9
	// TargetRSS is the most any worker may hold resident at any time.
	TargetRSS = 100 << 20
	// TargetBloat is the most the bytes per live row may grow from the end
	// of the first window to the end: the tables grow with their rows, not
	// with dead tuples vacuum failed to reclaim.
	TargetBloat = 1.5
	// TargetSpaceReuse is the most the tables may grow on disk per mail
	// over the last window, against the first window's growth, once the
	// purge runs: the purged rows' space is reused for the rows sent after
	// them, so a bounded table stops growing.
	TargetSpaceReuse = 0.25
	// boundSlack is how many rows beyond the retention window the table may
	// hold and still count as bounded: jobs claimed and not yet counted as
	// sent, and the statistics collector's estimate being late.
	boundSlack = 5000
)

// point is one progress poll: mails sent by then.
type point struct {
	T         time.Duration
	Delivered int64
}

// timeAt is when the delivered count reached x, interpolated linearly
// between the polls around it; false when it never did.
func timeAt(points []point, x int64) (time.Duration, bool) {
	i, found := slices.BinarySearchFunc(points, x, func(p point, x int64) int {
		switch {
		case p.Delivered < x:
			return -1
		case p.Delivered > x:
			return 1
		}
		return 0
	})
	switch {
	case i == len(points):
		return 0, false
	case found: // the first poll that saw x
		return points[i].T, true
	case i == 0:
		return points[0].T, true
	}
	a, b := points[i-1], points[i]
	f := float64(x-a.Delivered) / float64(b.Delivered-a.Delivered)
	return a.T + time.Duration(f*float64(b.T-a.T)), true
}

// deliveredAt is the delivered count at t, interpolated between polls.
func deliveredAt(points []point, t time.Duration) int64 {
	i, _ := slices.BinarySearchFunc(points, t, func(p point, t time.Duration) int {
		return cmp.Compare(p.T, t)
	})
	switch {
	case len(points) == 0:
		return 0
	case i == 0:
		return points[0].Delivered
	case i == len(points):
		return points[len(points)-1].Delivered
	}
	a, b := points[i-1], points[i]
	f := float64(t-a.T) / float64(b.T-a.T)
	return a.Delivered + int64(f*float64(b.Delivered-a.Delivered))
}

// windowRates are the rates of the first and the last window mails of the
// measured jobs: the first after the lead's mails (from the first mail sent
// with no lead: the workers' start-up before it does not count), the last
// up to jobs.
func windowRates(points []point, lead, jobs, window int64) (first, last float64, err error) {
	if window < 1 || lead < 0 || jobs < lead+2*window {
		return 0, 0, fmt.Errorf("a lead of %d and two windows of %d mails need at least %d in all, not %d", lead, window, lead+2*window, jobs)
	}
	from := max(1, lead)
	t1, ok1 := timeAt(points, from)
	tw, ok2 := timeAt(points, lead+window)
	tl, ok3 := timeAt(points, jobs-window)
	tn, ok4 := timeAt(points, jobs)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return 0, 0, fmt.Errorf("the progress polls never reached %d mails", jobs)
	}
	if tw <= t1 || tn <= tl {
		return 0, 0, fmt.Errorf("a window took no time (polls too coarse for %d mails)", window)
	}
	return float64(lead+window-from) / (tw - t1).Seconds(), float64(window) / (tn - tl).Seconds(), nil
}

// params are the settings a report states and judges by.
type params struct {
	// Jobs are the measured jobs. Lead more are sent before the first
	// window and after the last (the publisher's head start, and the jobs
	// it publishes while the last window is sent), so that it publishes one
	// job per mail sent throughout both windows.
	Jobs, Window, Lead int64
	Workers            int
	Retention          time.Duration
	ReaperInterval     time.Duration // the workers' recovery passes
	PurgeInterval      time.Duration // the workers' purge passes (reaper.DefaultPurgeInterval)
	SampleEvery        time.Duration
	Command            string
	Machine            string
	ProducerSummary    string
	Took               time.Duration // wall time of the whole soak, start-up and clean-up included
	AgingMode          string        // -aging
	Aged               *aging        // nil with -aging off
}

// summary is what the soak found, judged against the targets.
type summary struct {
	params
	Delivered, Failed, Purged int64
	Takeovers, Duplicates     int64
	Span                      time.Duration // first mail to last
	MeanRate                  float64
	FirstRate, LastRate       float64
	Ratio                     float64
	MaxRSS, MaxPeak           []int64 // per worker: the most VmRSS sampled, the last VmHWM seen
	MaxRows, FinalRows        int64
	MaxBytes, FinalBytes      int64 // every table of the schema
	FinalMessagesBytes        int64 // postline_messages, its indexes included
	FinalIndexBytes           int64 // postline_messages indexes
	BytesPerRowEarly          float64
	BytesPerRowEnd            float64
	MeanLoad                  float64
	// RetentionReached is whether the run lasted long enough for any sent
	// row to be older than the retention, so that the purge had work.
	RetentionReached bool
	// WorstBound is the sample whose rows came closest to (or passed) the
	// bound of the retention window; only with RetentionReached.
	WorstRows, WorstBound int64
	// PurgeTook is from the end of the aging to the first sample that saw
	// every aged row purged; 0 when the purge never finished.
	PurgeTook time.Duration
	PurgeRate float64 // aged rows / PurgeTook
	// FirstGrowth and LastGrowth are the bytes every table of the schema
	// grew by per mail over the first and the last window.
	FirstGrowth, LastGrowth float64
	// FirstWAL and LastWAL are the WAL bytes the server wrote per mail over
	// the first and the last window; FirstFullPages and LastFullPages the
	// full-page images per mail, FirstCheckpoints and LastCheckpoints the
	// checkpoints begun within each.
	FirstWAL, LastWAL                 float64
	FirstFullPages, LastFullPages     float64
	FirstCheckpoints, LastCheckpoints int64
	// FirstCPU and LastCPU are the CPU time per mail of each process of
	// cpuParts over the first and the last window, in microseconds; a part
	// that was not measured (no pid file) is NaN.
	FirstCPU, LastCPU []float64
	// PurgeStatements and PurgeSeconds are the workers' purge statements
	// over the run and the time they took.
	PurgeStatements int64
	PurgeSeconds    float64
	steadyPurge
}

// steadyPurge is what the steady aging found: the steady part runs from
// the first sample that saw rows purged to the last mail.
type steadyPurge struct {
	SteadyFrom, SteadyTo time.Duration
	// SteadyPurgeRate and SteadyDeliveryRate are the least-squares slopes
	// of the rows purged and the mails sent over the steady part: the
	// purge runs in passes, so the difference of two samples would depend
	// on where they fall between passes.
	SteadyPurgeRate, SteadyDeliveryRate float64
	// LastWindowFrom is when the last window began; it is inside the steady
	// part when after SteadyFrom.
	LastWindowFrom time.Duration
	// EndRows are the live rows at the last mail; PredictedRows what a
	// steady state holds: the rows sent before the aging began (never
	// aged) and the rows of lag + one purge interval at the steady rate.
	EndRows, PredictedRows int64
	// SteadyWorstRows and SteadyWorstBound are the sample of the steady
	// part whose rows came closest to (or passed) their bound: the rows
	// sent before the aging, the mails sent within steadyBoundWindow
	// before the sample, and boundSlack.
	SteadyWorstRows, SteadyWorstBound int64
}

// steadyBoundWindow is how long after it was sent a row may still be there
// with the steady aging: the lag and two purge intervals (the next pass
// may start up to one after the row became purgeable, and a pass with a
// backlog may take up to one more).
func steadyBoundWindow(a *aging, purgeInterval time.Duration) time.Duration {
	return a.Lag + 2*purgeInterval
}

func summarize(p params, points []point, samples []sample) (summary, error) {
	s := summary{params: p}
	if len(samples) == 0 || len(points) == 0 {
		return s, fmt.Errorf("no samples")
	}
	lastSample := samples[len(samples)-1]
	s.Delivered, s.Failed, s.Purged = lastSample.Delivered, lastSample.Failed, lastSample.Purged
	s.Takeovers, s.Duplicates = lastSample.Takeovers, lastSample.Duplicates
	var err error
	if s.FirstRate, s.LastRate, err = windowRates(points, p.Lead, p.Jobs, p.Window); err != nil {
		return s, err
	}
	s.Ratio = s.LastRate / s.FirstRate
	t1, _ := timeAt(points, 1)
	tn, ok := timeAt(points, p.total())
	if !ok {
		return s, fmt.Errorf("the progress polls never reached %d mails", p.total())
	}
	s.Span = tn - t1
	s.MeanRate = float64(p.total()-1) / s.Span.Seconds()

	s.MaxRSS, s.MaxPeak = make([]int64, p.Workers), make([]int64, p.Workers)
	var load float64
	early := false
	for _, x := range samples {
		for i := range min(len(x.RSS), p.Workers) {
			s.MaxRSS[i] = max(s.MaxRSS[i], x.RSS[i])
			s.MaxPeak[i] = max(s.MaxPeak[i], x.Peak[i])
		}
		bytes := x.Tables.AllBytes
		s.MaxRows, s.MaxBytes = max(s.MaxRows, x.Tables.MessagesRows), max(s.MaxBytes, bytes)
		if !early && x.Delivered >= p.Lead+p.Window && x.Tables.MessagesRows > 0 {
			s.BytesPerRowEarly, early = float64(bytes)/float64(x.Tables.MessagesRows), true
		}
		load += x.Load1
	}
	s.MeanLoad = load / float64(len(samples))
	// With the aging, the purge leaves dead rows until vacuum reclaims
	// them: the bytes per live row are read just before it instead.
	bloatAt := lastSample
	if a := p.Aged; a != nil {
		for _, x := range samples {
			if x.T <= a.At {
				bloatAt = x
			}
		}
	}
	if bloatAt.Tables.MessagesRows > 0 {
		s.BytesPerRowEnd = float64(bloatAt.Tables.AllBytes) / float64(bloatAt.Tables.MessagesRows)
	}
	s.FinalRows = lastSample.Tables.MessagesRows
	s.FinalBytes = lastSample.Tables.AllBytes
	s.FinalMessagesBytes = lastSample.Tables.MessagesBytes
	s.FinalIndexBytes = lastSample.Tables.MessagesIndexBytes

	// A row sent at t is purged by the first purge pass after
	// t + retention: up to one interval later, and a pass that has a
	// backlog may take one more. Rows sent before then may still be there.
	lag := p.Retention + 2*p.PurgeInterval
	s.RetentionReached = lastSample.T-t1 > lag
	if s.RetentionReached {
		s.WorstBound = -1
		for _, x := range samples {
			if x.T-t1 <= lag {
				continue
			}
			bound := x.Delivered - deliveredAt(points, x.T-lag) + boundSlack
			if s.WorstBound < 0 || x.Tables.MessagesRows-bound > s.WorstRows-s.WorstBound {
				s.WorstRows, s.WorstBound = x.Tables.MessagesRows, bound
			}
		}
	}
	s.FirstGrowth = growthPerMail(samples, p.Lead, p.Lead+p.Window)
	s.LastGrowth = growthPerMail(samples, p.Jobs-p.Window, p.Jobs)
	walBytes := func(x sample) int64 { return x.WAL.Bytes }
	fullPages := func(x sample) int64 { return x.WAL.FullPages }
	checkpoints := func(x sample) int64 { return x.WAL.Checkpoints }
	s.FirstWAL, _ = perMail(samples, p.Lead, p.Lead+p.Window, walBytes)
	s.LastWAL, _ = perMail(samples, p.Jobs-p.Window, p.Jobs, walBytes)
	s.FirstFullPages, _ = perMail(samples, p.Lead, p.Lead+p.Window, fullPages)
	s.LastFullPages, _ = perMail(samples, p.Jobs-p.Window, p.Jobs, fullPages)
	_, s.FirstCheckpoints = perMail(samples, p.Lead, p.Lead+p.Window, checkpoints)
	_, s.LastCheckpoints = perMail(samples, p.Jobs-p.Window, p.Jobs, checkpoints)
	for _, part := range cpuParts {
		first, last := math.NaN(), math.NaN()
		if part.of(lastSample.CPU) > 0 {
			measure := func(x sample) int64 { return int64(part.of(x.CPU)) }
			ns, _ := perMail(samples, p.Lead, p.Lead+p.Window, measure)
			first = ns / 1e3
			ns, _ = perMail(samples, p.Jobs-p.Window, p.Jobs, measure)
			last = ns / 1e3
		}
		s.FirstCPU, s.LastCPU = append(s.FirstCPU, first), append(s.LastCPU, last)
	}
	s.PurgeStatements, s.PurgeSeconds = lastSample.PurgeStatements, lastSample.PurgeSeconds
	if a := p.Aged; a != nil && a.Mode == agingSteady {
		s.steadyPurge = summarizeSteady(p, a, points, samples)
	}
	if a := p.Aged; a != nil && a.Mode == agingBurst {
		for _, x := range samples {
			if x.T > a.At && x.Purged >= a.Rows {
				s.PurgeTook = x.T - (a.At + a.Took)
				s.PurgeRate = float64(a.Rows) / s.PurgeTook.Seconds()
				break
			}
		}
	}
	return s, nil
}

func summarizeSteady(p params, a *aging, points []point, samples []sample) steadyPurge {
	var st steadyPurge
	st.LastWindowFrom, _ = timeAt(points, p.Jobs-p.Window)
	st.SteadyTo, _ = timeAt(points, p.total())
	var steady []sample
	for _, x := range samples {
		if x.Purged > 0 && x.T <= st.SteadyTo {
			steady = append(steady, x)
		}
	}
	if len(steady) == 0 {
		return st // the purge never started
	}
	st.SteadyFrom = steady[0].T
	ts := make([]float64, len(steady))
	purged, delivered := make([]float64, len(steady)), make([]float64, len(steady))
	for i, x := range steady {
		ts[i], purged[i], delivered[i] = x.T.Seconds(), float64(x.Purged), float64(x.Delivered)
	}
	st.SteadyPurgeRate, st.SteadyDeliveryRate = slope(ts, purged), slope(ts, delivered)
	end := steady[len(steady)-1]
	st.EndRows = end.Tables.MessagesRows
	st.PredictedRows = a.Sent + int64(st.SteadyDeliveryRate*(a.Lag+p.PurgeInterval).Seconds())
	window := steadyBoundWindow(a, p.PurgeInterval)
	st.SteadyWorstBound = -1
	for _, x := range steady {
		// Rows sent before the aging began are never aged.
		bound := a.Sent + x.Delivered - max(a.Sent, deliveredAt(points, x.T-window)) + boundSlack
		if st.SteadyWorstBound < 0 || x.Tables.MessagesRows-bound > st.SteadyWorstRows-st.SteadyWorstBound {
			st.SteadyWorstRows, st.SteadyWorstBound = x.Tables.MessagesRows, bound
		}
	}
	return st
}

// slope is the least-squares slope of ys over xs; 0 with fewer than two
// distinct xs.
func slope(xs, ys []float64) float64 {
	var mx, my float64
	for i := range xs {
		mx, my = mx+xs[i], my+ys[i]
	}
	n := float64(len(xs))
	mx, my = mx/n, my/n
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return 0
	}
	return sxy / sxx
}

// growthPerMail is how many bytes every table of the schema grew by per
// mail from the first sample at or past from mails sent to the first at
// or past to; from 0 counts from nothing (an empty schema, whose size is
// small).
func growthPerMail(samples []sample, from, to int64) float64 {
	perMail, _ := perMail(samples, from, to, func(x sample) int64 { return x.Tables.AllBytes })
	return perMail
}

// perMail is how much of measure accrued per mail, and in all, from the
// first sample at or past from mails sent to the first at or past to;
// from 0 counts from a zero sample. Both are 0 when the samples do not
// span the mails.
// cpuParts are the processes whose CPU the report gives per mail, in its
// order.
var cpuParts = []struct {
	name string
	of   func(cpuTimes) time.Duration
}{
	{"workers", func(c cpuTimes) time.Duration { return c.Workers }},
	{"PostgreSQL", func(c cpuTimes) time.Duration { return c.Postgres }},
	{"Kafka", func(c cpuTimes) time.Duration { return c.Kafka }},
	{"smtp-sink", func(c cpuTimes) time.Duration { return c.Sink }},
	{"harness", func(c cpuTimes) time.Duration { return c.Harness }},
}

func perMail(samples []sample, from, to int64, measure func(sample) int64) (float64, int64) {
	var a, b *sample
	if from == 0 {
		a = &sample{}
	}
	for i := range samples {
		x := &samples[i]
		if a == nil && x.Delivered >= from {
			a = x
		}
		if b == nil && x.Delivered >= to {
			b = x
		}
	}
	if a == nil || b == nil || b.Delivered <= a.Delivered {
		return 0, 0
	}
	d := measure(*b) - measure(*a)
	return float64(d) / float64(b.Delivered-a.Delivered), d
}

// cpuMarkdown lists the measured processes' CPU per mail in the first and
// the last window: "workers 78 / 79, PostgreSQL 54 / 77, ...".
func (s summary) cpuMarkdown() string {
	var parts []string
	for i, part := range cpuParts {
		if i < len(s.FirstCPU) && !math.IsNaN(s.FirstCPU[i]) {
			parts = append(parts, fmt.Sprintf("%s %.0f / %.0f", part.name, s.FirstCPU[i], s.LastCPU[i]))
		}
	}
	return strings.Join(parts, ", ")
}

// verdicts of the summary, in the order of the report.
func (s summary) rateOK() bool { return s.Ratio >= TargetRateRatio }

// othersOK are the verdicts besides the rate's that a run of any length
// can reach (the bound of a retention that really passed is not one).
func (s summary) othersOK() bool {
	return s.rssOK() && s.bloatOK() && s.deliveredOK() && s.agingOK()
}

func (s summary) rssOK() bool {
	return slices.Max(s.MaxPeak) <= TargetRSS && slices.Max(s.MaxRSS) <= TargetRSS
}

func (s summary) bloatOK() bool {
	return s.BytesPerRowEarly > 0 && s.BytesPerRowEnd <= TargetBloat*s.BytesPerRowEarly
}

func (s summary) boundOK() bool { return s.RetentionReached && s.WorstRows <= s.WorstBound }

// purgeOK: with the burst, every aged row was purged, faster than mail was
// sent, and what is left is the rows sent since.
func (s summary) purgeOK() bool {
	return s.Aged != nil && s.PurgeTook > 0 && s.PurgeRate >= s.MeanRate && s.FinalRows <= s.total()-s.Aged.Rows+boundSlack
}

// TargetSteadyPurge is the least rate the steady purge may delete at,
// against the delivery rate: below it the rows pile up.
const TargetSteadyPurge = 0.9

// steadyPurgeOK: with the steady aging, the purge kept pace with delivery
// over a steady part that holds the last window.
func (s summary) steadyPurgeOK() bool {
	return s.Aged != nil && s.SteadyFrom > 0 && s.SteadyFrom <= s.LastWindowFrom &&
		s.SteadyPurgeRate >= TargetSteadyPurge*s.SteadyDeliveryRate
}

// steadyBoundOK: with the steady aging, no sample of the steady part held
// more rows than its bound.
func (s summary) steadyBoundOK() bool {
	return s.SteadyFrom > 0 && s.SteadyWorstRows <= s.SteadyWorstBound
}

// agingOK are the verdicts of the aging mode.
func (s summary) agingOK() bool {
	switch s.AgingMode {
	case agingSteady:
		return s.steadyPurgeOK() && s.steadyBoundOK() && s.spaceOK()
	case agingBurst:
		return s.purgeOK() && s.spaceOK()
	}
	return true // off: nothing aged, nothing purged
}

func (s summary) spaceOK() bool {
	return s.Aged != nil && s.FirstGrowth > 0 && s.LastGrowth <= TargetSpaceReuse*s.FirstGrowth
}

func (s summary) deliveredOK() bool { return s.Delivered >= s.total() && s.Failed == 0 }

// total is every job published: the measured ones and the lead.
func (p params) total() int64 { return p.Jobs + p.Lead }

// firstWindow names the mails of the first window.
func (p params) firstWindow() string {
	if p.Lead == 0 {
		return "first " + thousands(p.Window) + " mails"
	}
	return fmt.Sprintf("first %s mails after the lead (%s to %s)", thousands(p.Window), thousands(p.Lead+1), thousands(p.Lead+p.Window))
}

// markdown writes the soak's report.
func (s summary) markdown(w io.Writer) {
	fmt.Fprintf(w, "Command: `%s`\n\n", s.Command)
	fmt.Fprintf(w, "Machine: %s; Kafka, PostgreSQL, smtp-sink and the harness share it with the workers. Mean 1-minute load average over the run: %.2f.\n\n", s.Machine, s.MeanLoad)
	fmt.Fprintf(w, "Settings: %s jobs (%s measured, %s more as the lead) through %d workers in one group; POSTLINE_RETENTION=%s, reaper every %s, its purge every %s (the workers' reapers run the purge); %s; a sample every %s; PostgreSQL checkpointed just before the first job. Wall time of the whole soak: %s.\n\n",
		thousands(s.total()), thousands(s.Jobs), thousands(s.Lead), s.Workers, s.Retention, s.ReaperInterval, s.PurgeInterval, s.ProducerSummary, s.SampleEvery, s.Took.Round(time.Second))
	fmt.Fprintln(w, "| measure | value | target | verdict |")
	fmt.Fprintln(w, "|---|---:|---:|:---:|")
	fmt.Fprintf(w, "| mails sent / failed (rows taken over after their lease ran out, so possibly sent twice; copies deduped) | %s / %s (%s; %s) | all / 0 | %s |\n",
		thousands(s.Delivered), thousands(s.Failed), thousands(s.Takeovers), thousands(s.Duplicates), benchstats.Verdict(s.deliveredOK()))
	fmt.Fprintf(w, "| first mail to last | %s (%.0f mails/s) | - | - |\n", s.Span.Round(time.Second), s.MeanRate)
	fmt.Fprintf(w, "| %s | %.0f mails/s | - | - |\n", s.firstWindow(), s.FirstRate)
	fmt.Fprintf(w, "| last %s measured mails (%s to %s) | %.0f mails/s = %.3f× the first | ≥ %.2f× | %s |\n",
		thousands(s.Window), thousands(s.Jobs-s.Window+1), thousands(s.Jobs), s.LastRate, s.Ratio, TargetRateRatio, benchstats.Verdict(s.rateOK()))
	fmt.Fprintf(w, "| worker RSS, most sampled (VmRSS) | %s MiB | ≤ %d MiB | %s |\n", mibList(s.MaxRSS), TargetRSS>>20, benchstats.Verdict(s.rssOK()))
	fmt.Fprintf(w, "| worker RSS, peak (VmHWM) | %s MiB | ≤ %d MiB | (above) |\n", mibList(s.MaxPeak), TargetRSS>>20)
	fmt.Fprintf(w, "| postline_messages live rows, at the end / most | %s / %s | - | - |\n", thousands(s.FinalRows), thousands(s.MaxRows))
	fmt.Fprintf(w, "| every table of the schema on disk, at the end / most | %.0f / %.0f MiB (postline_messages %.0f MiB, its indexes %.0f MiB) | - | - |\n",
		mib(s.FinalBytes), mib(s.MaxBytes), mib(s.FinalMessagesBytes), mib(s.FinalIndexBytes))
	until := "at the end"
	if s.Aged != nil {
		until = "before the aging"
	}
	fmt.Fprintf(w, "| bytes per live row, after the first window / %s | %.0f / %.0f | ≤ %.1f× | %s |\n",
		until, s.BytesPerRowEarly, s.BytesPerRowEnd, TargetBloat, benchstats.Verdict(s.bloatOK()))
	if cpu := s.cpuMarkdown(); cpu != "" {
		fmt.Fprintf(w, "| CPU per mail by process, first window / last window (µs; the machine's CPUs are shared by all of them) | %s | - | - |\n", cpu)
	}
	fmt.Fprintf(w, "| PostgreSQL WAL per mail, first window / last window (the server's; full-page images per mail; checkpoints begun within) | %.0f / %.0f bytes (%.3f / %.3f; %d / %d) | - | - |\n",
		s.FirstWAL, s.LastWAL, s.FirstFullPages, s.LastFullPages, s.FirstCheckpoints, s.LastCheckpoints)
	if a := s.Aged; a != nil && a.Mode == agingSteady {
		s.steadyMarkdown(w, a)
	}
	if a := s.Aged; a != nil && a.Mode == agingBurst {
		purge := "not all purged"
		if s.PurgeTook > 0 {
			purge = fmt.Sprintf("all purged %s later: %.0f rows/s = %.2f× the mean delivery rate", s.PurgeTook.Round(time.Second), s.PurgeRate, s.PurgeRate/s.MeanRate)
		}
		fmt.Fprintf(w, "| retention purge, the retention passing simulated at %s mails sent (t = %s): the sent rows' timestamps moved back by %s | %s rows aged in %s; %s; %s live rows at the end | purge rate ≥ delivery rate, rows at the end ≤ jobs - aged + %s | %s |\n",
			thousands(a.Sent), a.At.Round(time.Second), a.Shift, thousands(a.Rows), a.Took.Round(100*time.Millisecond), purge,
			thousands(s.FinalRows), thousands(boundSlack), benchstats.Verdict(s.purgeOK()))
		fmt.Fprintf(w, "| tables' growth on disk per mail, first window / last window (just after the aging: %.0f MiB, at the end: %.0f MiB) | %.0f / %.0f bytes = %.2f× | ≤ %.2f× (purged space reused) | %s |\n",
			mib(a.BytesAfter), mib(s.FinalBytes), s.FirstGrowth, s.LastGrowth,
			s.LastGrowth/max(1, s.FirstGrowth), TargetSpaceReuse, benchstats.Verdict(s.spaceOK()))
	}
	if s.RetentionReached {
		fmt.Fprintf(w, "| rows bounded by the retention window (worst sample: rows / mails sent within retention + 2 purge intervals + %s) | %s / %s, %s purged | rows ≤ bound | %s |\n",
			thousands(boundSlack), thousands(s.WorstRows), thousands(s.WorstBound), thousands(s.Purged), benchstats.Verdict(s.boundOK()))
	} else {
		fmt.Fprintf(w, "| rows bounded by a retention that really passed | no sent row reached the %s retention on the clock in a %s run | rows ≤ bound | NOT REACHED |\n",
			s.Retention, s.Span.Round(time.Second))
	}
	fmt.Fprintln(w)
	met := s.rateOK() && s.othersOK()
	switch {
	case met && !s.RetentionReached:
		fmt.Fprintln(w, "Every target this run could reach is met; the bound of a retention that really passes needs a run longer than the retention plus two purge intervals (see -rate).")
	case met && s.boundOK():
		fmt.Fprintln(w, "All targets met.")
	default:
		fmt.Fprintln(w, "Some targets missed.")
	}
}

// steadyMarkdown writes the rows of the steady aging and purge.
func (s summary) steadyMarkdown(w io.Writer, a *aging) {
	fmt.Fprintf(w, "| the retention's passing simulated steadily from %s mails sent (t = %s): the columns' defaults write the created_at of every row inserted since, and the updated_at of every outcome, %s back, so a row becomes purgeable %s after it was sent (the workers' statements write every row; the harness none) | installed in %s | - | - |\n",
		thousands(a.Sent), a.At.Round(time.Second), a.Shift, a.Lag, a.Took.Round(time.Millisecond))
	if s.SteadyFrom == 0 {
		fmt.Fprintf(w, "| retention purge, steady | nothing purged before the last mail | purge ≥ %.2f× delivery | FAIL |\n", TargetSteadyPurge)
		return
	}
	inside := "inside it"
	if s.SteadyFrom > s.LastWindowFrom {
		inside = "NOT inside it"
	}
	var meanPurge float64
	if s.PurgeStatements > 0 {
		meanPurge = 1000 * s.PurgeSeconds / float64(s.PurgeStatements)
	}
	fmt.Fprintf(w, "| retention purge over the steady part, from the first rows purged (t = %s) to the last mail (t = %s); the last window from t = %s: %s | %.0f rows/s purged against %.0f mails/s sent = %.2f× (least-squares slopes); the workers' purge statements: %s, %.1f s in all (mean %.1f ms) | ≥ %.2f×, the last window inside | %s |\n",
		s.SteadyFrom.Round(time.Second), s.SteadyTo.Round(time.Second), s.LastWindowFrom.Round(time.Second), inside,
		s.SteadyPurgeRate, s.SteadyDeliveryRate, s.SteadyPurgeRate/max(s.SteadyDeliveryRate, 1e-9),
		thousands(s.PurgeStatements), s.PurgeSeconds, meanPurge, TargetSteadyPurge, benchstats.Verdict(s.steadyPurgeOK()))
	fmt.Fprintf(w, "| postline_messages live rows at the last mail / a steady state's (the %s sent before the aging, never aged, + %.0f mails/s × (%s lag + %s purge interval)); the worst sample of the steady part / its bound (the rows sent before the aging + the mails sent within the last %s + %s) | %s / %s; %s / %s | rows ≤ bound | %s |\n",
		thousands(a.Sent), s.SteadyDeliveryRate, a.Lag, s.PurgeInterval, steadyBoundWindow(a, s.PurgeInterval), thousands(boundSlack),
		thousands(s.EndRows), thousands(s.PredictedRows), thousands(s.SteadyWorstRows), thousands(s.SteadyWorstBound), benchstats.Verdict(s.steadyBoundOK()))
	fmt.Fprintf(w, "| tables' growth on disk per mail, first window / last window (at the end: %.0f MiB) | %.0f / %.0f bytes = %.2f× | ≤ %.2f× (purged space reused) | %s |\n",
		mib(s.FinalBytes), s.FirstGrowth, s.LastGrowth,
		s.LastGrowth/max(1, s.FirstGrowth), TargetSpaceReuse, benchstats.Verdict(s.spaceOK()))
}

// csvHeader names the columns of writeCSV, one per worker for RSS.
func csvHeader(workers int) []string {
	h := []string{"t_s", "delivered", "failed", "purged", "rate_per_s", "takeovers", "duplicates"}
	for i := range workers {
		h = append(h, fmt.Sprintf("worker%d_rss_bytes", i), fmt.Sprintf("worker%d_peak_bytes", i))
	}
	return append(h, "messages_rows", "messages_total_bytes", "messages_index_bytes",
		"recipients_rows", "all_tables_bytes", "load1", "purge_statements", "purge_seconds",
		"wal_bytes", "wal_full_pages", "checkpoints",
		"cpu_workers_s", "cpu_postgres_s", "cpu_kafka_s", "cpu_sink_s", "cpu_harness_s")
}

func writeCSV(w io.Writer, workers int, samples []sample) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader(workers)); err != nil {
		return err
	}
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, x := range samples {
		row := []string{strconv.FormatFloat(x.T.Seconds(), 'f', 3, 64), i64(x.Delivered), i64(x.Failed), i64(x.Purged),
			strconv.FormatFloat(x.Rate, 'f', 1, 64), i64(x.Takeovers), i64(x.Duplicates)}
		for i := range workers {
			var rss, peak int64
			if i < len(x.RSS) {
				rss, peak = x.RSS[i], x.Peak[i]
			}
			row = append(row, i64(rss), i64(peak))
		}
		t := x.Tables
		row = append(row, i64(t.MessagesRows), i64(t.MessagesBytes), i64(t.MessagesIndexBytes),
			i64(t.RecipientsRows), i64(t.AllBytes), strconv.FormatFloat(x.Load1, 'f', 2, 64),
			i64(x.PurgeStatements), strconv.FormatFloat(x.PurgeSeconds, 'f', 3, 64),
			i64(x.WAL.Bytes), i64(x.WAL.FullPages), i64(x.WAL.Checkpoints))
		for _, part := range cpuParts {
			row = append(row, strconv.FormatFloat(part.of(x.CPU).Seconds(), 'f', 3, 64))
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func mibList(bs []int64) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = fmt.Sprintf("%.1f", mib(b))
	}
	return strings.Join(parts, " / ")
}

// thousands writes n with commas: 1000000 is 1,000,000.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// readCSV reads back what writeCSV wrote, for -plot-from; it returns the
// samples and the number of workers.
func readCSV(r io.Reader) ([]sample, int, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, 0, err
	}
	if len(rows) == 0 {
		return nil, 0, errors.New("csv: no header")
	}
	workers := (len(rows[0]) - len(csvHeader(0))) / 2
	if workers < 0 || !slices.Equal(rows[0], csvHeader(workers)) {
		return nil, 0, fmt.Errorf("csv: header %v is not the soak's", rows[0])
	}
	var samples []sample
	for n, row := range rows[1:] {
		var bad error
		f := func(i int) float64 {
			v, err := strconv.ParseFloat(row[i], 64)
			if err != nil && bad == nil {
				bad = fmt.Errorf("csv: row %d, %s: %w", n+2, rows[0][i], err)
			}
			return v
		}
		i := func(i int) int64 { return int64(f(i)) }
		x := sample{T: time.Duration(f(0) * float64(time.Second)), Delivered: i(1), Failed: i(2), Purged: i(3), Rate: f(4),
			Takeovers: i(5), Duplicates: i(6)}
		for w := range workers {
			x.RSS, x.Peak = append(x.RSS, i(7+2*w)), append(x.Peak, i(8+2*w))
		}
		c := 7 + 2*workers
		x.Tables = tableStats{MessagesRows: i(c), MessagesBytes: i(c + 1), MessagesIndexBytes: i(c + 2),
			RecipientsRows: i(c + 3), AllBytes: i(c + 4)}
		x.Load1 = f(c + 5)
		x.PurgeStatements, x.PurgeSeconds = i(c+6), f(c+7)
		x.WAL = walStats{Bytes: i(c + 8), FullPages: i(c + 9), Checkpoints: i(c + 10)}
		sec := func(i int) time.Duration { return time.Duration(f(i) * float64(time.Second)).Round(time.Millisecond) }
		x.CPU = cpuTimes{Workers: sec(c + 11), Postgres: sec(c + 12), Kafka: sec(c + 13), Sink: sec(c + 14), Harness: sec(c + 15)}
		if bad != nil {
			return nil, 0, bad
		}
		samples = append(samples, x)
	}
	return samples, workers, nil
}
