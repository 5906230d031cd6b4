package main

import (
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSummarizeMedians(t *testing.T) {
	all := []result{
		{Workers: 2, Mails: 8000, Span: 20 * time.Second, P50: 3 * time.Second, WorkerCPU: 4 * time.Second},
		{Workers: 1, Mails: 8000, Span: 40 * time.Second, P50: 9 * time.Second},
		{Workers: 2, Mails: 8000, Span: 10 * time.Second, P50: 1 * time.Second, WorkerCPU: 2 * time.Second},
		{Workers: 2, Mails: 8000, Span: 16 * time.Second, P50: 2 * time.Second, WorkerCPU: 3 * time.Second},
	}
	rows := summarize(all)
	if got := []int{rows[0].Workers, rows[1].Workers}; !slices.Equal(got, []int{1, 2}) || len(rows) != 2 {
		t.Fatalf("worker counts = %v (%d rows), want [1 2] ascending", got, len(rows))
	}
	// Rates of the 2-worker runs: 400, 800, 500 mails/s; the median is 500.
	if got := rows[1].Rate(); math.Abs(got-500) > 1e-6 {
		t.Errorf("median rate = %v, want 500", got)
	}
	if rows[1].P50 != 2*time.Second || rows[1].WorkerCPU != 3*time.Second {
		t.Errorf("median p50, cpu = %s, %s, want 2s, 3s", rows[1].P50, rows[1].WorkerCPU)
	}
	if rows[0].Rate() != 200 {
		t.Errorf("single run rate = %v, want 200", rows[0].Rate())
	}
}

func TestJudge(t *testing.T) {
	rate := func(n int, perSec float64) result {
		return result{Workers: n, Mails: 1000, Span: time.Duration(1000 / perSec * float64(time.Second))}
	}
	tests := []struct {
		name      string
		rows      []result
		row       int
		ratio     float64 // NaN: none
		hasTarget bool
		pass      bool
		cell      string
	}{
		{"base row", []result{rate(1, 100), rate(2, 195)}, 0, 1, false, false, "-"},
		{"2 workers meet 1.9x", []result{rate(1, 100), rate(2, 195)}, 1, 1.95, true, true, "PASS"},
		{"2 workers at exactly 1.9x", []result{rate(1, 100), rate(2, 190)}, 1, 1.9, true, true, "PASS"},
		{"2 workers miss", []result{rate(1, 100), rate(2, 180)}, 1, 1.8, true, false, "FAIL"},
		{"4 workers meet 3.5x", []result{rate(1, 100), rate(4, 360)}, 1, 3.6, true, true, "PASS"},
		{"4 workers miss", []result{rate(1, 100), rate(4, 290)}, 1, 2.9, true, false, "FAIL"},
		{"3 workers have no target", []result{rate(1, 100), rate(3, 290)}, 1, 2.9, false, false, "-"},
		{"no base row", []result{rate(2, 100), rate(4, 290)}, 1, math.NaN(), true, false, "FAIL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := judge(tt.rows, tt.rows[tt.row])
			if math.IsNaN(tt.ratio) != math.IsNaN(v.Ratio) || !math.IsNaN(tt.ratio) && math.Abs(v.Ratio-tt.ratio) > 1e-6 {
				t.Errorf("ratio = %v, want %v", v.Ratio, tt.ratio)
			}
			if v.HasTarget != tt.hasTarget || v.Pass != tt.pass || v.passCell() != tt.cell {
				t.Errorf("verdict = %+v (%s), want target %v pass %v (%s)", v, v.passCell(), tt.hasTarget, tt.pass, tt.cell)
			}
		})
	}
}

func TestTableAndAllPass(t *testing.T) {
	rows := []result{
		{Workers: 1, Mails: 8000, Span: 32 * time.Second, P50: 15 * time.Second, P99: 30 * time.Second,
			WorkerCPU: 2 * time.Second, MachineCPU: 8 * time.Second, MachineBusy: 0.125},
		{Workers: 2, Mails: 8000, Span: 16 * time.Second, P50: 7 * time.Second, P99: 15 * time.Second,
			WorkerCPU: 2 * time.Second, MachineCPU: 8 * time.Second, MachineBusy: 0.25},
		{Workers: 4, Mails: 8000, Span: 10 * time.Second, P50: 450 * time.Millisecond, P99: 9 * time.Second,
			WorkerCPU: 4 * time.Second, MachineCPU: 16 * time.Second, MachineBusy: 0.8},
	}
	var b strings.Builder
	table(&b, rows)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("table has %d lines, want header, rule and 3 rows:\n%s", len(lines), b.String())
	}
	for i, want := range []string{
		"| 1 | 8000 | 250 | 1.00x | - | - | 15.00 s | 30.00 s | 0.250 | 1.000 | 12% |",
		"| 2 | 8000 | 500 | 2.00x | ≥ 1.9x | PASS | 7.00 s | 15.00 s | 0.250 | 1.000 | 25% |",
		"| 4 | 8000 | 800 | 3.20x | ≥ 3.5x | FAIL | 450.0 ms | 9.00 s | 0.500 | 2.000 | 80% |",
	} {
		if lines[i+2] != want {
			t.Errorf("row %d =\n%s\nwant\n%s", i, lines[i+2], want)
		}
	}
	if allPass(rows) {
		t.Error("allPass = true with 4 workers at 3.2x")
	}
	if !allPass(rows[:2]) {
		t.Error("allPass = false with 2 workers at 2.0x")
	}
}

func TestBenchLine(t *testing.T) {
	r := result{Workers: 4, Mails: 8000, Span: 10 * time.Second, P50: 1500 * time.Microsecond, P99: 2 * time.Second,
		WorkerCPU: 4 * time.Second, MachineCPU: 8 * time.Second}
	want := "BenchmarkScale/workers=4 8000 1250000 ns/op 800.0 mails/s 1.500 p50-ms 2000.000 p99-ms 500000 worker-cpu-ns/mail 1000000 machine-cpu-ns/mail"
	if got := benchLine(r); got != want {
		t.Errorf("benchLine =\n%s\nwant\n%s", got, want)
	}
}

func TestParseProcStat(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	stat := "cpu  100 10 50 800 20 5 5 10 30 0\ncpu0 50 5 25 400 10 2 3 5 15 0\nintr 1 2 3\n"
	got, err := parseProcStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := (cpuTimes{busy: 170, total: 1000}); got != want {
		t.Errorf("parseProcStat = %+v, want %+v (guest already in user, steal not busy)", got, want)
	}
	later := cpuTimes{busy: got.busy + 150, total: got.total + 200}
	share, busy := later.since(got, 100)
	if share != 0.75 || busy != 1500*time.Millisecond {
		t.Errorf("since = %v, %s, want 0.75, 1.5s", share, busy)
	}
	if s, d := got.since(got, 100); s != 0 || d != 0 {
		t.Errorf("since itself = %v, %s, want 0, 0", s, d)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5\n", "cpu  1 2 x 4 5\n"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q) = nil error", bad)
		}
	}
}

func TestParseWorkersAndOrder(t *testing.T) {
	got, err := parseWorkers("4, 1,2,2", 8)
	if err != nil || !slices.Equal(got, []int{1, 2, 4}) {
		t.Fatalf("parseWorkers = %v, %v, want [1 2 4]", got, err)
	}
	for _, bad := range []string{"", "0", "9", "two", "1,,2", "1.5"} {
		if _, err := parseWorkers(bad, 8); err == nil || !strings.Contains(err.Error(), "-workers") {
			t.Errorf("parseWorkers(%q) = %v, want an error naming -workers", bad, err)
		}
	}
	if o := order(got, 1); !slices.Equal(o, []int{1, 2, 4}) {
		t.Errorf("order run 1 = %v", o)
	}
	if o := order(got, 2); !slices.Equal(o, []int{4, 2, 1}) || !slices.Equal(got, []int{1, 2, 4}) {
		t.Errorf("order run 2 = %v (input now %v), want [4 2 1] and the input untouched", o, got)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.jobs != DefaultJobs || o.partitions != DefaultPartitions || o.replyDelay != DefaultReplyDelay ||
		!slices.Equal(o.workers, []int{1, 2, 4}) || o.senders != DefaultSenders {
		t.Errorf("defaults = %+v", o)
	}
	for _, tt := range []struct{ args []string }{
		{[]string{"-jobs", "0"}},
		{[]string{"-workers", "16"}}, // above the 8 partitions
		{[]string{"-senders", "-1"}},
		{[]string{"-reply-delay", "-1ms"}},
		{[]string{"extra"}},
	} {
		if _, err := parseFlags(tt.args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) = nil error", tt.args)
		}
	}
}
