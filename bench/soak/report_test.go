package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"strings"
	"testing"
	"time"
)

func pts(xs ...int64) []point {
	// One poll a second: xs[i] mails sent after i seconds.
	out := make([]point, len(xs))
	for i, x := range xs {
		out[i] = point{T: time.Duration(i) * time.Second, Delivered: x}
	}
	return out
}

func TestTimeAt(t *testing.T) {
	p := pts(0, 100, 100, 300)
	for _, tc := range []struct {
		x    int64
		want time.Duration
		ok   bool
	}{
		{0, 0, true},
		{50, 500 * time.Millisecond, true},
		{100, time.Second, true}, // the first poll that saw it, not the second
		{200, 2500 * time.Millisecond, true},
		{300, 3 * time.Second, true},
		{301, 0, false},
	} {
		got, ok := timeAt(p, tc.x)
		if got != tc.want || ok != tc.ok {
			t.Errorf("timeAt(%d) = %s, %v; want %s, %v", tc.x, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDeliveredAt(t *testing.T) {
	p := pts(0, 100, 300)
	for _, tc := range []struct {
		t    time.Duration
		want int64
	}{
		{-time.Second, 0},
		{0, 0},
		{500 * time.Millisecond, 50},
		{1500 * time.Millisecond, 200},
		{time.Hour, 300},
	} {
		if got := deliveredAt(p, tc.t); got != tc.want {
			t.Errorf("deliveredAt(%s) = %d, want %d", tc.t, got, tc.want)
		}
	}
	if got := deliveredAt(nil, time.Second); got != 0 {
		t.Errorf("deliveredAt(nil) = %d, want 0", got)
	}
}

func TestWindowRates(t *testing.T) {
	for _, tc := range []struct {
		name               string
		points             []point
		lead, jobs, window int64
		first, last        float64
		wantErr            string
	}{
		{
			// 1,000/s throughout after a second of start-up, which the
			// first window does not count.
			name:   "steady",
			points: pts(0, 0, 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000),
			jobs:   10000, window: 1000, first: 1000, last: 1000,
		},
		{
			name:   "decaying to half",
			points: pts(0, 2000, 4000, 6000, 7000, 8000, 9000),
			jobs:   9000, window: 2000, first: 2000, last: 1000,
		},
		{
			// The lead's 3,000 mails go at 3,000/s, the rest at 1,000/s,
			// and the 2,000 sent after the last measured mail at 2,000/s:
			// neither counts.
			name:   "the lead left out at both ends",
			points: pts(0, 3000, 4000, 5000, 6000, 7000, 8000, 10000),
			lead:   3000, jobs: 8000, window: 2000, first: 1000, last: 1000,
		},
		{name: "total below two windows", points: pts(0, 10), jobs: 10, window: 6, wantErr: "at least 12"},
		{name: "no room for the lead", points: pts(0, 10), lead: 5, jobs: 10, window: 3, wantErr: "at least 11"},
		{name: "never finished", points: pts(0, 500, 900), jobs: 1000, window: 100, wantErr: "never reached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, last, err := windowRates(tc.points, tc.lead, tc.jobs, tc.window)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !near(first, tc.first) || !near(last, tc.last) {
				t.Fatalf("rates %.2f, %.2f; want %.2f, %.2f", first, last, tc.first, tc.last)
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 0.01 && b-a < 0.01 }

// soakOf is a soak at rate mails/s for secs seconds, sampled every 10 s,
// with rows kept as keep(delivered, t) says and RSS rss per worker.
func soakOf(rate int64, secs int, keep func(delivered int64, t time.Duration) int64, rss int64) ([]point, []sample) {
	var points []point
	var samples []sample
	for i := 0; i <= secs; i++ {
		t := time.Duration(i) * time.Second
		d := rate * int64(i)
		points = append(points, point{T: t, Delivered: d})
		if i > 0 && i%10 == 0 {
			rows := keep(d, t)
			samples = append(samples, sample{T: t, Delivered: d, Rate: float64(rate), Purged: d - rows,
				RSS: []int64{rss, rss}, Peak: []int64{rss + 1, rss + 1},
				Tables: tableStats{MessagesRows: rows, MessagesBytes: rows * 800, MessagesIndexBytes: rows * 100,
					RecipientsRows: rows, AllBytes: rows * 1000},
				Load1: 2, PurgeStatements: (d - rows) / 1000, PurgeSeconds: float64(d-rows) / 10_000,
				WAL: walStats{Bytes: d * 1200, FullPages: d / 100, Checkpoints: int64(i / 60)}})
		}
	}
	return points, samples
}

func TestSummarize(t *testing.T) {
	keepAll := func(d int64, _ time.Duration) int64 { return d }
	base := params{Workers: 2, Retention: time.Hour, ReaperInterval: 30 * time.Second, PurgeInterval: 30 * time.Second, SampleEvery: 10 * time.Second}
	t.Run("short run keeps every row: the bound is not reached", func(t *testing.T) {
		points, samples := soakOf(1000, 600, keepAll, 60<<20)
		p := base
		p.Jobs, p.Window = 600_000, 60_000
		s, err := summarize(p, points, samples)
		if err != nil {
			t.Fatal(err)
		}
		if s.RetentionReached || s.boundOK() {
			t.Fatalf("RetentionReached %v, boundOK %v after a 10-minute run with a 1h retention", s.RetentionReached, s.boundOK())
		}
		if !s.rateOK() || !s.rssOK() || !s.bloatOK() || !s.deliveredOK() {
			t.Fatalf("a steady soak fails a target: %+v", s)
		}
		if s.FinalRows != 600_000 || s.BytesPerRowEnd != 1000 || s.MeanLoad != 2 {
			t.Fatalf("final rows %d, bytes/row %.0f, load %.1f", s.FinalRows, s.BytesPerRowEnd, s.MeanLoad)
		}
	})
	// A soak at 100/s for 2 hours with a 1h retention: the purge must keep
	// about 100 × (1h + the reaper's lag) rows.
	purgedAfter := func(lag time.Duration) func(int64, time.Duration) int64 {
		return func(d int64, t time.Duration) int64 {
			if t <= lag {
				return d
			}
			return d - 100*int64((t-lag)/time.Second)
		}
	}
	for _, tc := range []struct {
		name string
		lag  time.Duration
		ok   bool
	}{
		{"the purge keeps up", time.Hour + 30*time.Second, true},
		{"the purge falls behind", time.Hour + 10*time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			points, samples := soakOf(100, 7200, purgedAfter(tc.lag), 60<<20)
			p := base
			p.Jobs, p.Window = 720_000, 72_000
			s, err := summarize(p, points, samples)
			if err != nil {
				t.Fatal(err)
			}
			if !s.RetentionReached || s.boundOK() != tc.ok {
				t.Fatalf("RetentionReached %v, boundOK %v (worst %d rows, bound %d); want reached, %v",
					s.RetentionReached, s.boundOK(), s.WorstRows, s.WorstBound, tc.ok)
			}
		})
	}
	t.Run("the lead is delivered beyond the measured jobs", func(t *testing.T) {
		points, samples := soakOf(1000, 600, keepAll, 60<<20)
		p := base
		p.Jobs, p.Window, p.Lead = 540_000, 60_000, 60_000
		s, err := summarize(p, points, samples)
		if err != nil {
			t.Fatal(err)
		}
		if !s.deliveredOK() || !s.rateOK() || s.total() != 600_000 {
			t.Fatalf("deliveredOK %v, rateOK %v, total %d; want both, 600,000", s.deliveredOK(), s.rateOK(), s.total())
		}
		p.Jobs = 600_000 // the lead's 60,000 never sent
		if _, err := summarize(p, points, samples); err == nil || !strings.Contains(err.Error(), "never reached 660000") {
			t.Fatalf("summarize of a soak short of its lead: %v", err)
		}
	})
	t.Run("a worker above the RSS target fails", func(t *testing.T) {
		points, samples := soakOf(1000, 600, keepAll, 60<<20)
		samples[3].Peak[1] = TargetRSS + 1 // a spike between samples shows in VmHWM only
		p := base
		p.Jobs, p.Window = 600_000, 60_000
		s, err := summarize(p, points, samples)
		if err != nil {
			t.Fatal(err)
		}
		if s.rssOK() {
			t.Fatalf("rssOK with a peak of %d bytes", s.MaxPeak[1])
		}
	})
	t.Run("bloat fails", func(t *testing.T) {
		points, samples := soakOf(1000, 600, keepAll, 60<<20)
		last := &samples[len(samples)-1]
		last.Tables.AllBytes = last.Tables.MessagesRows * 2000
		p := base
		p.Jobs, p.Window = 600_000, 60_000
		s, err := summarize(p, points, samples)
		if err != nil {
			t.Fatal(err)
		}
		if s.bloatOK() {
			t.Fatalf("bloatOK with %.0f bytes a row at the end against %.0f", s.BytesPerRowEnd, s.BytesPerRowEarly)
		}
	})
	if _, err := summarize(base, nil, nil); err == nil {
		t.Fatal("summarize without samples succeeded")
	}
}

func TestMarkdown(t *testing.T) {
	points, samples := soakOf(1000, 600, func(d int64, _ time.Duration) int64 { return d }, 60<<20)
	p := params{Jobs: 600_000, Window: 60_000, Workers: 2, Retention: time.Hour, ReaperInterval: 30 * time.Second, PurgeInterval: 30 * time.Second,
		SampleEvery: 10 * time.Second, Command: "go run ./bench/soak -aging off", Machine: "2 CPUs", ProducerSummary: "ahead",
		AgingMode: agingOff}
	s, err := summarize(p, points, samples)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	s.markdown(&b)
	md := b.String()
	for _, want := range []string{
		"| 600,000 / 0 (0; 0) | all / 0 | PASS |",
		"| first 60,000 mails | 1000 mails/s | - | - |",
		"| last 60,000 measured mails (540,001 to 600,000) | 1000 mails/s = 1.000× the first | ≥ 0.90× | PASS |",
		"| worker RSS, most sampled (VmRSS) | 60.0 / 60.0 MiB | ≤ 100 MiB | PASS |",
		"NOT REACHED",
		"| PostgreSQL WAL per mail, first window / last window (the server's; full-page images per mail; checkpoints begun within) | 1200 / 1200 bytes (0.010 / 0.010; 1 / 1) | - | - |",
		"Every target this run could reach is met",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestWriteCSV(t *testing.T) {
	_, samples := soakOf(1000, 20, func(d int64, _ time.Duration) int64 { return d }, 50<<20)
	for i := range samples {
		samples[i].CPU = cpuOf(samples[i].Delivered, 70, 50, 0, 20, 10)
	}
	var b bytes.Buffer
	if err := writeCSV(&b, 2, samples); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || len(rows[0]) != len(csvHeader(2)) || len(rows[1]) != len(rows[0]) {
		t.Fatalf("CSV of %d rows, widths %d and %d; want 3 rows as wide as the header", len(rows), len(rows[0]), len(rows[1]))
	}
	if got := strings.Join(rows[1][:7], ","); got != "10.000,10000,0,0,1000.0,0,0" {
		t.Fatalf("first row starts %q", got)
	}
	if got := strings.Join(rows[1][len(rows[1])-10:len(rows[1])-5], ","); got != "0,0.000,12000000,100,0" {
		t.Fatalf("first row's WAL columns %q, want no purge statements, 12 MB of WAL, 100 full pages, no checkpoint", got)
	}
	if got := strings.Join(rows[1][len(rows[1])-5:], ","); got != "0.700,0.500,0.000,0.200,0.100" {
		t.Fatalf("first row ends %q, want the CPU seconds of the workers, PostgreSQL, Kafka (not measured), the sink and the harness", got)
	}
	b.Reset()
	if err := writeCSV(&b, 2, samples); err != nil {
		t.Fatal(err)
	}
	back, workers, err := readCSV(&b)
	if err != nil || workers != 2 || len(back) != len(samples) {
		t.Fatalf("readCSV: %d samples of %d workers, %v; want %d of 2", len(back), workers, err, len(samples))
	}
	for i := range samples {
		if fmt.Sprint(back[i]) != fmt.Sprint(samples[i]) {
			t.Fatalf("sample %d read back as %+v, written as %+v", i, back[i], samples[i])
		}
	}
	if _, _, err := readCSV(strings.NewReader("a,b\n")); err == nil {
		t.Fatal("readCSV of another CSV succeeded")
	}
}

// cpuOf is what each process of a soak has used after delivered mails at
// the given microseconds a mail.
func cpuOf(delivered int64, workers, postgres, kafka, sink, harness int64) cpuTimes {
	at := func(us int64) time.Duration { return time.Duration(delivered*us) * time.Microsecond }
	return cpuTimes{Workers: at(workers), Postgres: at(postgres), Kafka: at(kafka), Sink: at(sink), Harness: at(harness)}
}

// TestSummarizeCPU: each process's CPU is per mail sent in each window, a
// process that was not measured is left out of the report, and a cost
// that grows in the last window shows there.
func TestSummarizeCPU(t *testing.T) {
	points, samples := soakOf(1000, 600, func(d int64, _ time.Duration) int64 { return d }, 60<<20)
	// PostgreSQL costs 50 µs a mail, and 30 µs more for every mail after
	// the 540,000th (the last window); Kafka has no pid file.
	for i := range samples {
		x := &samples[i]
		x.CPU = cpuOf(x.Delivered, 80, 50, 0, 20, 10)
		if after := x.Delivered - 540_000; after > 0 {
			x.CPU.Postgres += time.Duration(after*30) * time.Microsecond
		}
	}
	p := params{Jobs: 600_000, Window: 60_000, Workers: 2, Retention: time.Hour, ReaperInterval: 30 * time.Second, PurgeInterval: 30 * time.Second,
		SampleEvery: 10 * time.Second}
	s, err := summarize(p, points, samples)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.cpuMarkdown(), "workers 80 / 80, PostgreSQL 50 / 80, smtp-sink 20 / 20, harness 10 / 10"; got != want {
		t.Errorf("cpuMarkdown = %q, want %q", got, want)
	}
	var b strings.Builder
	s.markdown(&b)
	if !strings.Contains(b.String(), "| CPU per mail by process, first window / last window (µs; the machine's CPUs are shared by all of them) | workers 80 / 80, PostgreSQL 50 / 80,") {
		t.Errorf("markdown lacks the CPU row:\n%s", b.String())
	}
	// Without any pid file and no samples of CPU, the row is left out.
	for i := range samples {
		samples[i].CPU = cpuTimes{}
	}
	if s, err = summarize(p, points, samples); err != nil || s.cpuMarkdown() != "" {
		t.Errorf("no CPU measured: cpuMarkdown = %q, %v; want nothing", s.cpuMarkdown(), err)
	}
}

// TestSummarizeWAL: the WAL of each window is per mail sent in it, and a
// checkpoint in the last window shows as its full-page images.
func TestSummarizeWAL(t *testing.T) {
	points, samples := soakOf(1000, 600, func(d int64, _ time.Duration) int64 { return d }, 60<<20)
	// From t = 550 s a checkpoint: each mail after it writes 2 full pages
	// (8 KiB each) besides its 1,200 bytes.
	for i := range samples {
		x := &samples[i]
		x.WAL = walStats{Bytes: x.Delivered * 1200, Checkpoints: 0}
		if after := x.Delivered - 550_000; after > 0 {
			x.WAL.Bytes += after * 2 * 8192
			x.WAL.FullPages = after * 2
			x.WAL.Checkpoints = 1
		}
	}
	p := params{Jobs: 600_000, Window: 60_000, Workers: 2, Retention: time.Hour, ReaperInterval: 30 * time.Second, PurgeInterval: 30 * time.Second,
		SampleEvery: 10 * time.Second}
	s, err := summarize(p, points, samples)
	if err != nil {
		t.Fatal(err)
	}
	// The last window is mails 540,001 to 600,000: the samples at 540,000
	// and 600,000 bound it, and 50,000 of its 60,000 mails came after the
	// checkpoint.
	wantLast := 1200 + float64(50_000*2*8192)/60_000
	if s.FirstWAL != 1200 || !near(s.LastWAL, wantLast) {
		t.Errorf("WAL per mail %.1f / %.1f, want 1200 / %.1f", s.FirstWAL, s.LastWAL, wantLast)
	}
	if s.FirstFullPages != 0 || !near(s.LastFullPages, 100_000.0/60_000) {
		t.Errorf("full pages per mail %.3f / %.3f, want 0 / %.3f", s.FirstFullPages, s.LastFullPages, 100_000.0/60_000)
	}
	if s.FirstCheckpoints != 0 || s.LastCheckpoints != 1 {
		t.Errorf("checkpoints %d / %d, want 0 / 1", s.FirstCheckpoints, s.LastCheckpoints)
	}
}

func TestPerMail(t *testing.T) {
	samples := []sample{
		{Delivered: 100, Tables: tableStats{AllBytes: 1_000}},
		{Delivered: 200, Tables: tableStats{AllBytes: 3_000}},
		{Delivered: 400, Tables: tableStats{AllBytes: 4_000}},
	}
	bytes := func(x sample) int64 { return x.Tables.AllBytes }
	for _, tc := range []struct {
		from, to int64
		perMail  float64
		total    int64
	}{
		{from: 0, to: 100, perMail: 10, total: 1_000},              // from an empty schema
		{from: 100, to: 200, perMail: 20, total: 2_000},            // exact samples
		{from: 150, to: 300, perMail: 1_000.0 / 200, total: 1_000}, // the first samples at or past each
		{from: 300, to: 500, perMail: 0, total: 0},                 // the samples end before 500
		{from: 400, to: 400, perMail: 0, total: 0},                 // no mails between
	} {
		got, total := perMail(samples, tc.from, tc.to, bytes)
		if got != tc.perMail || total != tc.total {
			t.Errorf("perMail(%d, %d) = %.2f, %d; want %.2f, %d", tc.from, tc.to, got, total, tc.perMail, tc.total)
		}
		if g := growthPerMail(samples, tc.from, tc.to); g != tc.perMail {
			t.Errorf("growthPerMail(%d, %d) = %.2f, want %.2f", tc.from, tc.to, g, tc.perMail)
		}
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1000000: "1,000,000", -12345: "-12,345"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestSummarizeAging(t *testing.T) {
	// 1,000 mails/s for 600 s; at t = 300 s the 300,000 sent rows are
	// aged, and the purge deletes purgeRate of them a second from t = 310 s.
	// bounded: once the purge is done, the tables stop growing on disk
	// (the purged rows' space is reused); otherwise they keep growing by
	// soakOf's 1,000 bytes a mail.
	soak := func(purgeRate int64, bounded bool) summary {
		t.Helper()
		points, samples := soakOf(1000, 600, func(d int64, at time.Duration) int64 {
			if at <= 310*time.Second {
				return d
			}
			return d - min(300_000, purgeRate*int64((at-310*time.Second)/time.Second))
		}, 60<<20)
		for i := range samples {
			if x := &samples[i]; x.T > 310*time.Second {
				x.Tables.AllBytes = 310_000 * 1000
				if !bounded {
					x.Tables.AllBytes += (x.Delivered - 310_000) * 1000
				}
			}
		}
		p := params{Jobs: 600_000, Window: 60_000, Workers: 2, Retention: time.Hour, ReaperInterval: 30 * time.Second, PurgeInterval: 30 * time.Second,
			AgingMode: agingBurst, Aged: &aging{Mode: agingBurst, Shift: time.Hour + time.Minute, At: 300 * time.Second, Took: 10 * time.Second, Sent: 300_000,
				Rows: 300_000, BytesAfter: 400 << 20}}
		s, err := summarize(p, points, samples)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := soak(5000, true)
	if s.PurgeTook != 60*time.Second || s.PurgeRate != 5000 || !s.purgeOK() || !s.spaceOK() {
		t.Fatalf("purge at 5,000/s: took %s, %.0f/s, purgeOK %v, spaceOK %v (growth %.0f, %.0f)",
			s.PurgeTook, s.PurgeRate, s.purgeOK(), s.spaceOK(), s.FirstGrowth, s.LastGrowth)
	}
	if s := soak(5000, false); s.spaceOK() {
		t.Fatalf("spaceOK with the tables growing by %.0f bytes a mail in the last window, %.0f in the first", s.LastGrowth, s.FirstGrowth)
	}
	// At 500/s the purge falls behind the 1,000/s of delivery: it ends
	// after the soak, so it never finished.
	if s := soak(500, true); s.purgeOK() || s.PurgeTook != 0 {
		t.Fatalf("a purge slower than delivery: purgeOK %v, took %s", s.purgeOK(), s.PurgeTook)
	}
	var b strings.Builder
	s.markdown(&b)
	if !strings.Contains(b.String(), "300,000 rows aged in 10s; all purged 1m0s later: 5000 rows/s = 5.00× the mean delivery rate") {
		t.Fatalf("markdown lacks the purge line:\n%s", b.String())
	}
}

func TestSlope(t *testing.T) {
	for _, tc := range []struct {
		name   string
		xs, ys []float64
		want   float64
	}{
		{"a line", []float64{0, 1, 2, 3}, []float64{5, 7, 9, 11}, 2},
		{"a staircase around a line", []float64{0, 1, 2, 3, 4, 5}, []float64{0, 0, 20, 20, 40, 40}, 9.143},
		{"flat", []float64{0, 1, 2}, []float64{3, 3, 3}, 0},
		{"one point", []float64{1}, []float64{4}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := slope(tc.xs, tc.ys); got-tc.want > 0.001 || tc.want-got > 0.001 {
				t.Fatalf("slope = %.4f, want %.4f", got, tc.want)
			}
		})
	}
}

// steadySoak is a soak at 1,000 mails/s for 600 s whose steady aging
// begins at t = 120 s (120,000 sent) with a 15 s lag: from then on the
// rows sent more than 16 s before are purgeable (a second for the
// outcome's batch). A reaper
// pass every 30 s from firstPass on deletes what is purgeable, at most
// purgeRate rows a second since the first pass (0: no limit). The tables
// stop growing on disk once purging, when bounded.
func steadySoak(t *testing.T, firstPass time.Duration, purgeRate int64, bounded bool) summary {
	t.Helper()
	const rate, pre = 1000, 120_000
	purgedBy := func(at time.Duration) int64 {
		if at < firstPass {
			return 0
		}
		pass := firstPass + (at-firstPass)/(30*time.Second)*(30*time.Second)
		purgeable := max(0, rate*int64((pass-16*time.Second)/time.Second)-pre)
		if purgeRate > 0 {
			purgeable = min(purgeable, purgeRate*int64((pass-firstPass)/time.Second+30))
		}
		return purgeable
	}
	points, samples := soakOf(rate, 600, func(d int64, at time.Duration) int64 { return d - purgedBy(at) }, 60<<20)
	for i := range samples {
		switch x := &samples[i]; {
		case !bounded:
			x.Tables.AllBytes = x.Delivered * 1000
		case x.T > firstPass:
			x.Tables.AllBytes = samples[i-1].Tables.AllBytes
		}
	}
	a := &aging{Mode: agingSteady, At: 120 * time.Second, Sent: pre, Shift: time.Hour - 15*time.Second, Lag: 15 * time.Second, Took: 20 * time.Millisecond}
	p := params{Jobs: 600_000, Window: 60_000, Workers: 2, Retention: time.Hour, ReaperInterval: 30 * time.Second, PurgeInterval: 30 * time.Second,
		SampleEvery: 10 * time.Second, AgingMode: agingSteady, Aged: a}
	s, err := summarize(p, points, samples)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSummarizeSteady(t *testing.T) {
	for _, tc := range []struct {
		name                              string
		firstPass                         time.Duration
		purgeRate                         int64
		bounded                           bool
		purgeOK, boundOK, spaceOK, inside bool
	}{
		{name: "the purge keeps up", firstPass: 150 * time.Second, bounded: true,
			purgeOK: true, boundOK: true, spaceOK: true, inside: true},
		{name: "the tables keep growing", firstPass: 150 * time.Second,
			purgeOK: true, boundOK: true, inside: true},
		{name: "the purge at half the delivery rate", firstPass: 150 * time.Second, purgeRate: 500, bounded: true,
			spaceOK: true, inside: true},
		{name: "the purge starts after the last window began", firstPass: 560 * time.Second, bounded: true,
			boundOK: true, spaceOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := steadySoak(t, tc.firstPass, tc.purgeRate, tc.bounded)
			if s.steadyPurgeOK() != tc.purgeOK || s.steadyBoundOK() != tc.boundOK || s.spaceOK() != tc.spaceOK ||
				(s.SteadyFrom <= s.LastWindowFrom) != tc.inside {
				t.Fatalf("purgeOK %v, boundOK %v, spaceOK %v, last window inside %v; want %v, %v, %v, %v "+
					"(purge %.0f/s, delivery %.0f/s, worst %d of %d rows, steady from %s, last window from %s)",
					s.steadyPurgeOK(), s.steadyBoundOK(), s.spaceOK(), s.SteadyFrom <= s.LastWindowFrom,
					tc.purgeOK, tc.boundOK, tc.spaceOK, tc.inside,
					s.SteadyPurgeRate, s.SteadyDeliveryRate, s.SteadyWorstRows, s.SteadyWorstBound, s.SteadyFrom, s.LastWindowFrom)
			}
			if s.agingOK() != (tc.purgeOK && tc.boundOK && tc.spaceOK) {
				t.Fatalf("agingOK %v with purgeOK %v, boundOK %v, spaceOK %v", s.agingOK(), tc.purgeOK, tc.boundOK, tc.spaceOK)
			}
		})
	}
	s := steadySoak(t, 150*time.Second, 0, true)
	// 120,000 rows never aged, plus 1,000/s × (15 s + 30 s).
	if s.PredictedRows != 165_000 || s.SteadyFrom != 150*time.Second || s.SteadyTo != 600*time.Second {
		t.Fatalf("predicted %d rows, steady from %s to %s; want 165,000 from 2m30s to 10m0s", s.PredictedRows, s.SteadyFrom, s.SteadyTo)
	}
	var b strings.Builder
	s.markdown(&b)
	for _, want := range []string{
		"a row becomes purgeable 15s after it was sent (the workers' statements write every row; the harness none) | installed in 20ms | - | - |",
		"the last window from t = 9m0s: inside it | 999 rows/s purged against 1000 mails/s sent = 1.00×",
		"| 136,000 / 165,000; 136,000 / 155,000 | rows ≤ bound | PASS |",
		"| 1000 / 0 bytes = 0.00× | ≤ 0.25× (purged space reused) | PASS |",
		"Every target this run could reach is met",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
}
