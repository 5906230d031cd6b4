package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestFormatRatio(t *testing.T) {
	tests := []struct {
		x    float64
		want string
	}{
		{17.04, "17.0x"},
		{1, "1.00x"},
		{0.2449, "0.24x"},
		{123.4, "123x"},
		{9.999, "10.00x"},
		{0, "n/a"},
		{-1, "n/a"},
		{math.NaN(), "n/a"},
		{math.Inf(1), "n/a"},
	}
	for _, tt := range tests {
		if got := formatRatio(tt.x); got != tt.want {
			t.Errorf("formatRatio(%v) = %q, want %q", tt.x, got, tt.want)
		}
	}
}

func TestFormatShare(t *testing.T) {
	tests := []struct {
		x    float64
		want string
	}{
		{1, "100%"},
		{0.244, "24%"},
		{0.032, "3.2%"},
		{0, "n/a"},
		{math.NaN(), "n/a"},
	}
	for _, tt := range tests {
		if got := formatShare(tt.x); got != tt.want {
			t.Errorf("formatShare(%v) = %q, want %q", tt.x, got, tt.want)
		}
	}
}

func TestFormatLatency(t *testing.T) {
	tests := []struct {
		d    time.Duration
		ok   bool
		want string
	}{
		{788039 * time.Microsecond, true, "788.0 ms"},
		{1500 * time.Microsecond, true, "1.5 ms"},
		{8430 * time.Millisecond, true, "8.43 s"},
		{time.Second, true, "1.00 s"},
		{time.Second, false, "n/a"},
	}
	for _, tt := range tests {
		if got := formatLatency(tt.d, tt.ok); got != tt.want {
			t.Errorf("formatLatency(%v, %v) = %q, want %q", tt.d, tt.ok, got, tt.want)
		}
	}
}

func TestResultRates(t *testing.T) {
	r := result{Mails: 20000, Span: 16 * time.Second, CPU: 8 * time.Second}
	if got := r.Rate(); got != 1250 {
		t.Errorf("Rate() = %v, want 1250", got)
	}
	if got := r.CPUPerMail(); got != 400*time.Microsecond {
		t.Errorf("CPUPerMail() = %v, want 400µs", got)
	}
	if got := (result{}).Rate(); got != 0 {
		t.Errorf("zero Rate() = %v, want 0", got)
	}
	if got := (result{}).CPUPerMail(); got != 0 {
		t.Errorf("zero CPUPerMail() = %v, want 0", got)
	}
}

func TestSummarizeTakesMediansPerVariant(t *testing.T) {
	all := []result{
		{Variant: "postline", Mails: 1000, Span: time.Second, HasLatency: true, P50: 10 * time.Millisecond, CPU: time.Second, PeakRSSBytes: 30},
		{Variant: "naive", Mails: 500, Span: 10 * time.Second, HasLatency: true, CPU: 2 * time.Second, PeakRSSBytes: 20},
		{Variant: "postline", Mails: 1000, Span: 2 * time.Second, HasLatency: true, P50: 30 * time.Millisecond, CPU: 3 * time.Second, PeakRSSBytes: 10},
		{Variant: "postline", Mails: 1000, Span: 4 * time.Second, HasLatency: true, P50: 20 * time.Millisecond, CPU: 2 * time.Second, PeakRSSBytes: 20},
	}
	got := summarize(all)
	if len(got) != 2 || got[0].Variant != "postline" || got[1].Variant != "naive" {
		t.Fatalf("summarize variants = %+v, want postline then naive", got)
	}
	p := got[0]
	if p.Rate() != 500 || p.P50 != 20*time.Millisecond || p.CPU != 2*time.Second || p.PeakRSSBytes != 20 || !p.HasLatency {
		t.Errorf("postline median = rate %v p50 %v cpu %v rss %d latency %v; want 500, 20ms, 2s, 20, true",
			p.Rate(), p.P50, p.CPU, p.PeakRSSBytes, p.HasLatency)
	}
	if got[1] != all[1] {
		t.Errorf("a single run is kept as it is: got %+v, want %+v", got[1], all[1])
	}
}

func TestTable(t *testing.T) {
	rows := []result{
		{Variant: "postline", Mails: 20000, Span: 16 * time.Second, HasLatency: true,
			P50: 8 * time.Second, P99: 15 * time.Second, CPU: 8 * time.Second, PeakRSSBytes: 32 << 20,
			Stack:     stackCPU{Measured: true, Own: 7 * time.Second, Injector: time.Second, Kafka: 4 * time.Second, Postgres: 3 * time.Second, Sink: time.Second},
			HasAllocs: true, AllocBytes: 20000 * 12_345, Allocs: 20000 * 150},
		{Variant: "naive", Mails: 5000, Span: 80 * time.Second, HasLatency: true,
			P50: 40 * time.Second, P99: 79 * time.Second, CPU: 10 * time.Second, PeakRSSBytes: 20 << 20},
		{Variant: "postfix", Mails: 20000, Span: 100 * time.Second, CPU: 40 * time.Second,
			Stack: stackCPU{Measured: true, Own: 40 * time.Second, Injector: 2 * time.Second, Sink: 6 * time.Second}},
		{Variant: "smtp-source-d", Mails: 20000, Span: 4 * time.Second, CPU: time.Second, PeakRSSBytes: 9 << 20},
	}
	var b strings.Builder
	table(&b, rows, "naive", "postfix", "smtp-source-d")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("table has %d lines, want header, rule and 4 rows:\n%s", len(lines), b.String())
	}
	want := []string{
		// 1250/s vs 62.5/s = 20x and vs 200/s = 6.25x; whole stack 16 s vs 48 s for
		// the same mails = 0.33x; 1250 vs 5000/s = 25%.
		"| postline | 20000 | 1250 | 8.00 s | 15.00 s | 0.400 | 0.800 | 12.3 | 150 | 32.0 | 20.0x | 6.25x | 0.33x | 25% |",
		"| naive | 5000 | 62 | 40.00 s | 79.00 s | 2.000 | n/a | n/a | n/a | 20.0 | 1.00x | 0.31x | n/a | 1.2% |",
		"| postfix | 20000 | 200 | n/a | n/a | 2.000 | 2.400 | n/a | n/a | n/a | 3.20x | 1.00x | 1.00x | 4.0% |",
		"| smtp-source-d | 20000 | 5000 | n/a | n/a | 0.050 | n/a | n/a | n/a | 9.0 | 80.0x | 25.0x | n/a | 100% |",
	}
	for i, w := range want {
		if lines[2+i] != w {
			t.Errorf("row %d:\n got %s\nwant %s", i, lines[2+i], w)
		}
	}

	b.Reset()
	table(&b, rows[:1], "naive", "postfix", "smtp-source-d")
	if !strings.Contains(b.String(), "| 32.0 | n/a | n/a | n/a | n/a |") {
		t.Errorf("without baseline rows the ratios should be n/a:\n%s", b.String())
	}
}

func TestStackTable(t *testing.T) {
	rows := []result{
		{Variant: "postline", Mails: 2000,
			Stack: stackCPU{Measured: true, Own: 800 * time.Millisecond, Injector: 200 * time.Millisecond, Kafka: 600 * time.Millisecond, Postgres: 400 * time.Millisecond, Sink: 100 * time.Millisecond}},
		{Variant: "naive", Mails: 100},
	}
	var b strings.Builder
	stackTable(&b, rows)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("whole-stack table has %d lines, want header, rule and the one measured row:\n%s", len(lines), b.String())
	}
	if want := "| postline | 0.400 | 0.100 | 0.300 | 0.200 | 0.050 | 1.050 |"; lines[2] != want {
		t.Errorf("row:\n got %s\nwant %s", lines[2], want)
	}
}

func TestTargets(t *testing.T) {
	postline := result{Variant: "postline", Mails: 10000, Span: 4 * time.Second, CPU: 3 * time.Second,
		Stack:     stackCPU{Measured: true, Own: 3 * time.Second, Kafka: 2 * time.Second},
		HasAllocs: true, AllocBytes: 10000 * 14_999, Allocs: 10000 * 120}
	postfix := result{Variant: "postfix", Mails: 10000, Span: 40 * time.Second, CPU: 20 * time.Second,
		Stack: stackCPU{Measured: true, Own: 20 * time.Second, Injector: 5 * time.Second}}
	raw := result{Variant: "smtp-source-d", Mails: 10000, Span: 2 * time.Second}
	baseline := result{Variant: "baseline", Mails: 10000, Span: 5 * time.Second, CPU: 5 * time.Second}

	tests := []struct {
		name string
		rows []result
		want []string // verdicts in order: relay, raw share, baseline CPU, allocations
		// measured, when set, is the measured cell of each target.
		measured []string
	}{
		{
			name:     "all met",
			rows:     []result{baseline, postline, postfix, raw},
			want:     []string{"PASS", "PASS", "PASS", "PASS"},
			measured: []string{"10.0x (2500 vs 250 mails/s; the relay's whole stack uses 5.00x the CPU per mail)", "50% (2500 vs 5000 mails/s)", "0.60x (0.300 vs 0.500 ms)", "15.0 KB (120 allocs)"},
		},
		{
			name: "all missed",
			rows: []result{
				{Variant: "baseline", Mails: 10000, CPU: 3 * time.Second},
				{Variant: "postline", Mails: 10000, Span: 6 * time.Second, CPU: 3 * time.Second, HasAllocs: true, AllocBytes: 10000 * 15_001},
				postfix, raw},
			want: []string{"FAIL", "FAIL", "FAIL", "FAIL"},
		},
		{
			name: "rows missing",
			rows: []result{{Variant: "postline", Mails: 10, Span: time.Second}},
			want: []string{"not measured", "not measured", "not measured", "not measured"},
		},
		{
			name: "no postline row",
			rows: []result{baseline, postfix, raw},
			want: []string{"not measured", "not measured", "not measured", "not measured"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := targets(tt.rows, "postline", "postfix", "smtp-source-d", "baseline", "4c91515")
			if len(ts) != len(tt.want) {
				t.Fatalf("%d targets, want %d", len(ts), len(tt.want))
			}
			for i, tg := range ts {
				if tg.verdict() != tt.want[i] {
					t.Errorf("%s: verdict %s (%s), want %s", tg.Name, tg.verdict(), tg.Measured, tt.want[i])
				}
				if tt.measured != nil && tg.Measured != tt.measured[i] {
					t.Errorf("%s: measured %q, want %q", tg.Name, tg.Measured, tt.measured[i])
				}
			}
		})
	}

	var b strings.Builder
	targetTable(&b, targets([]result{baseline, postline, postfix, raw}, "postline", "postfix", "smtp-source-d", "baseline", "4c91515"))
	for _, want := range []string{
		"| postline vs postfix relay, mails/s | 10.0x (2500 vs 250 mails/s; the relay's whole stack uses 5.00x the CPU per mail) | ≥ 10x | PASS |",
		"| postline worker CPU per mail vs baseline (4c91515) | 0.60x (0.300 vs 0.500 ms) | ≤ 0.6x | PASS |",
		"| postline worker allocation per mail | 15.0 KB (120 allocs) | ≤ 15 KB | PASS |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("verdict table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestSummarizeStackAndAllocs(t *testing.T) {
	all := []result{
		{Variant: "postline", Mails: 1000, Span: time.Second, Stack: stackCPU{Measured: true, Own: time.Second, Kafka: 3 * time.Second}, HasAllocs: true, AllocBytes: 1e7, Allocs: 1e5},
		{Variant: "postline", Mails: 2000, Span: time.Second, Stack: stackCPU{Measured: true, Own: 4 * time.Second, Kafka: 2 * time.Second}, HasAllocs: true, AllocBytes: 4e7, Allocs: 2e5},
		{Variant: "postline", Mails: 1000, Span: time.Second, Stack: stackCPU{Measured: true, Own: 3 * time.Second, Kafka: 2 * time.Second}, HasAllocs: true, AllocBytes: 3e7, Allocs: 3e5},
	}
	got := summarize(all)[0]
	// Per mail: own 1, 2, 3 ms -> 2 ms; Kafka 3, 1, 2 ms -> 2 ms; bytes 10, 20, 30 KB -> 20 KB; allocs 100, 100, 300 -> 100.
	if got.Mails != 1000 || got.Stack.Own != 2*time.Second || got.Stack.Kafka != 2*time.Second || !got.Stack.Measured {
		t.Errorf("whole-stack median = %+v over %d mails, want own 2s, kafka 2s over 1000", got.Stack, got.Mails)
	}
	if got.AllocBytesPerMail() != 20_000 || got.AllocsPerMail() != 100 {
		t.Errorf("alloc medians = %v B, %v allocs per mail; want 20000, 100", got.AllocBytesPerMail(), got.AllocsPerMail())
	}
}

func TestBenchLine(t *testing.T) {
	tests := []struct {
		r    result
		want string
	}{
		{
			result{Variant: "postline", Mails: 20000, Span: 16 * time.Second, HasLatency: true,
				P50: 8 * time.Second, P99: 15500 * time.Microsecond, CPU: 8 * time.Second, PeakRSSBytes: 1 << 20},
			"BenchmarkE2E/postline 20000 800000 ns/op 1250.0 mails/s 8000.000 p50-ms 15.500 p99-ms 400000 cpu-ns/mail 1048576 peak-rss-B",
		},
		{
			result{Variant: "smtp-source", Mails: 100, Span: time.Second, CPU: 10 * time.Millisecond, PeakRSSBytes: 4096},
			"BenchmarkE2E/smtp-source 100 10000000 ns/op 100.0 mails/s 100000 cpu-ns/mail 4096 peak-rss-B",
		},
		{
			result{Variant: "baseline", Mails: 1000, Span: time.Second, CPU: time.Second,
				Stack:     stackCPU{Measured: true, Own: time.Second, Kafka: time.Second},
				HasAllocs: true, AllocBytes: 12_345_000, Allocs: 150_500},
			"BenchmarkE2E/baseline 1000 1000000 ns/op 1000.0 mails/s 1000000 cpu-ns/mail 2000000 stack-cpu-ns/mail 1000000 kafka-cpu-ns/mail 0 postgres-cpu-ns/mail 0 sink-cpu-ns/mail 12345 alloc-B/mail 150.5 allocs/mail 0 peak-rss-B",
		},
	}
	for _, tt := range tests {
		if got := benchLine(tt.r); got != tt.want {
			t.Errorf("benchLine:\n got %s\nwant %s", got, tt.want)
		}
	}
}

func TestTemplateLine(t *testing.T) {
	plain := result{Variant: "postline", Mails: 5000, Span: 2 * time.Second}
	tmpl := result{Variant: "template", Mails: 5000, Span: 2500 * time.Millisecond}
	tests := []struct {
		name string
		rows []result
		want string
	}{
		// 2000/s against 2500/s.
		{"both rows", []result{plain, {Variant: "naive", Mails: 10, Span: time.Second}, tmpl},
			"template jobs: 2000 mails/s = 0.80× plain jobs in the same run (target ≥ 0.8×)\n\n"},
		{"faster than plain", []result{{Variant: "template", Mails: 3000, Span: time.Second}, plain},
			"template jobs: 3000 mails/s = 1.20× plain jobs in the same run (target ≥ 0.8×)\n\n"},
		{"plain rate unknown", []result{{Variant: "postline"}, tmpl},
			"template jobs: 2000 mails/s = n/a plain jobs in the same run (target ≥ 0.8×)\n\n"},
		{"no template row", []result{plain}, ""},
		{"no plain row", []result{tmpl}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			templateLine(&b, tt.rows, "template", "postline")
			if b.String() != tt.want {
				t.Errorf("templateLine:\n got %q\nwant %q", b.String(), tt.want)
			}
		})
	}
}
