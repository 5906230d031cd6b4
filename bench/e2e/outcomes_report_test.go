package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestOutcomeTargets(t *testing.T) {
	plain := result{Variant: "postline", Mails: 10000, Span: 2 * time.Second, CPU: time.Second,
		Stack: stackCPU{Measured: true, Own: time.Second, Kafka: time.Second}} // 5000 mails/s
	// 4000 mails/s and events/s: a lag of 4000 events is 1 s.
	hooks := webhookStats{Measured: true, Events: 10000, Received: 10000, Requests: 10000,
		MaxLag: 800, EndLag: 200, Drained: true, Drain: 300 * time.Millisecond}
	row := func(span time.Duration, edit func(*webhookStats)) result {
		h := hooks
		if edit != nil {
			edit(&h)
		}
		return result{Variant: "outcomes", Mails: 10000, Span: span, Hooks: h, CPU: 1100 * time.Millisecond,
			Stack: stackCPU{Measured: true, Own: 2 * time.Second, Injector: 500 * time.Millisecond, Kafka: 1500 * time.Millisecond}}
	}
	tests := []struct {
		name     string
		rows     []result
		want     [2]string
		measured [2]string // when set
	}{
		{name: "both met", rows: []result{plain, row(2500*time.Millisecond, nil)}, want: [2]string{"PASS", "PASS"},
			measured: [2]string{"0.80x (4000 vs 5000 mails/s; CPU per mail: worker 1.10x, whole stack 2.00x)", "max 800 events (0.20 s), 200 at the last mail (0.05 s); last webhook 0.30 s after the last mail"}},
		{name: "slower than 0.8x", rows: []result{plain, row(2600*time.Millisecond, nil)}, want: [2]string{"FAIL", "PASS"}},
		{name: "lag of 1 s is met", rows: []result{plain, row(2500*time.Millisecond, func(h *webhookStats) { h.MaxLag = 4000 })},
			want: [2]string{"PASS", "PASS"}},
		{name: "lag above 1 s", rows: []result{plain, row(2500*time.Millisecond, func(h *webhookStats) { h.MaxLag = 4001 })},
			want: [2]string{"PASS", "FAIL"}},
		{name: "slow drain", rows: []result{plain, row(2500*time.Millisecond, func(h *webhookStats) { h.Drain = 5001 * time.Millisecond })},
			want: [2]string{"PASS", "FAIL"}},
		{name: "not drained", rows: []result{plain, row(2500*time.Millisecond, func(h *webhookStats) {
			h.Drained, h.Received, h.Drain = false, 9000, 61*time.Second
		})}, want: [2]string{"PASS", "FAIL"},
			measured: [2]string{"", "max 800 events (0.20 s), 200 at the last mail (0.05 s); 9000 of 10000 events at the endpoint 61 s after the last mail"}},
		{name: "bad signatures", rows: []result{plain, row(2500*time.Millisecond, func(h *webhookStats) { h.Bad = 2 })},
			want:     [2]string{"PASS", "FAIL"},
			measured: [2]string{"", "max 800 events (0.20 s), 200 at the last mail (0.05 s); last webhook 0.30 s after the last mail; 2 requests did not verify"}},
		{name: "no CPU figures", rows: []result{{Variant: "postline", Mails: 10000, Span: 2 * time.Second},
			{Variant: "outcomes", Mails: 10000, Span: 2500 * time.Millisecond, Hooks: hooks}},
			want: [2]string{"PASS", "PASS"}, measured: [2]string{"0.80x (4000 vs 5000 mails/s)", ""}},
		{name: "no plain row", rows: []result{row(2500*time.Millisecond, nil)}, want: [2]string{"not measured", "PASS"}},
		{name: "no outcomes row", rows: []result{plain}, want: [2]string{"not measured", "not measured"}},
		{name: "outcomes row without webhook figures", rows: []result{plain, {Variant: "outcomes", Mails: 10000, Span: time.Second}},
			want: [2]string{"not measured", "not measured"}},
		{name: "no span", rows: []result{plain, row(0, nil)}, want: [2]string{"not measured", "not measured"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := outcomeTargets(tt.rows, "outcomes", "postline")
			if len(ts) != 2 {
				t.Fatalf("%d targets, want 2", len(ts))
			}
			for i, tg := range ts {
				if tg.verdict() != tt.want[i] {
					t.Errorf("%s: verdict %s (%s), want %s", tg.Name, tg.verdict(), tg.Measured, tt.want[i])
				}
				if tt.measured[i] != "" && tg.Measured != tt.measured[i] {
					t.Errorf("%s: measured\n got %q\nwant %q", tg.Name, tg.Measured, tt.measured[i])
				}
			}
		})
	}

	var b strings.Builder
	targetTable(&b, outcomeTargets([]result{plain, row(2500*time.Millisecond, nil)}, "outcomes", "postline"))
	for _, want := range []string{
		"| outcomes vs postline in the same run, mails/s | 0.80x (4000 vs 5000 mails/s; CPU per mail: worker 1.10x, whole stack 2.00x) | ≥ 0.8x | PASS |",
		"| outcomes webhook lag flat: max lag ≤ 1 s of events, last webhook ≤ 5 s after the last mail | max 800 events (0.20 s), 200 at the last mail (0.05 s); last webhook 0.30 s after the last mail | ≤ 1 s; ≤ 5 s | PASS |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("verdict table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestOutcomeTable(t *testing.T) {
	rows := []result{
		{Variant: "postline", Mails: 5000, Span: time.Second},
		{Variant: "outcomes", Mails: 5000, Span: 2 * time.Second, Hooks: webhookStats{Measured: true,
			Events: 5000, Received: 5000, Requests: 5003, Samples: 31, MaxLag: 1250, EndLag: 25, Drained: true,
			Drain: 420 * time.Millisecond, DispatcherCPU: 1500 * time.Millisecond, DispatcherRSS: 30 << 20}},
	}
	var b strings.Builder
	outcomeTable(&b, rows)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("outcome table has %d lines, want a title, a blank, header, rule and the one row with webhook figures:\n%s", len(lines), b.String())
	}
	// 2500 events/s: 1250 events are 0.5 s, 25 are 0.01 s; 1.5 CPU-s over 5,000 mails.
	if want := "| outcomes | 5000 | 5000 | 5003 | 0 | 31 | 1250 (0.50 s) | 25 (0.01 s) | 0.42 s | 0.300 | 30.0 |"; lines[4] != want {
		t.Errorf("row:\n got %s\nwant %s", lines[4], want)
	}

	rows[1].Hooks.Drained, rows[1].Hooks.Drain = false, 61*time.Second
	b.Reset()
	outcomeTable(&b, rows)
	if !strings.Contains(b.String(), "| not drained in 61 s |") {
		t.Errorf("a row that did not drain should say so:\n%s", b.String())
	}

	b.Reset()
	outcomeTable(&b, rows[:1])
	if b.Len() != 0 {
		t.Errorf("without an outcomes row the table is left out, got:\n%s", b.String())
	}
}

func TestSummarizeHooks(t *testing.T) {
	run := func(span time.Duration, h webhookStats) result {
		h.Measured = true
		return result{Variant: "outcomes", Mails: 1000, Span: span, Hooks: h}
	}
	all := []result{
		run(time.Second, webhookStats{Events: 1000, Received: 1000, MaxLag: 100, EndLag: 0, Drained: true, Drain: time.Second, DispatcherCPU: 3 * time.Second}),
		run(2*time.Second, webhookStats{Events: 1000, Received: 1000, MaxLag: 300, EndLag: 30, Drained: true, Drain: 3 * time.Second, DispatcherCPU: time.Second, Bad: 1}),
		run(4*time.Second, webhookStats{Events: 1000, Received: 990, MaxLag: 200, EndLag: 10, Drained: false, Drain: 2 * time.Second, DispatcherCPU: 2 * time.Second}),
	}
	got := summarize(all)[0].Hooks
	want := webhookStats{Measured: true, Events: 1000, Received: 1000, MaxLag: 200, EndLag: 10, Drained: false,
		Drain: 2 * time.Second, DispatcherCPU: 2 * time.Second, Bad: 1}
	if got != want {
		t.Errorf("summarized hooks\n got %+v\nwant %+v", got, want)
	}
	if one := summarize(all[:1])[0]; one.Hooks != all[0].Hooks {
		t.Errorf("a single run is kept as it is: %+v", one.Hooks)
	}
	if plain := summarize([]result{{Variant: "postline", Mails: 1, Span: time.Second}, {Variant: "postline", Mails: 1, Span: time.Second}}); plain[0].Hooks.Measured {
		t.Error("a row without webhook figures got some")
	}
}

func TestEventRateAndLagSeconds(t *testing.T) {
	r := result{Mails: 1000, Span: 2 * time.Second, Hooks: webhookStats{Measured: true, Events: 1200}}
	if got := r.EventRate(); got != 600 {
		t.Errorf("EventRate = %v, want 600", got)
	}
	if got := r.lagSeconds(300); got != 0.5 {
		t.Errorf("lagSeconds(300) = %v, want 0.5", got)
	}
	for _, r := range []result{{Mails: 10, Span: time.Second}, {Mails: 10, Hooks: webhookStats{Measured: true, Events: 10}}} {
		if got := r.lagSeconds(1); !math.IsNaN(got) {
			t.Errorf("lagSeconds without a rate = %v, want NaN", got)
		}
	}
}

func TestBenchLineWithHooks(t *testing.T) {
	r := result{Variant: "outcomes", Mails: 1000, Span: time.Second, CPU: time.Second,
		Hooks: webhookStats{Measured: true, MaxLag: 120, EndLag: 7, Drain: 250 * time.Millisecond, DispatcherCPU: 500 * time.Millisecond}}
	want := "BenchmarkE2E/outcomes 1000 1000000 ns/op 1000.0 mails/s 1000000 cpu-ns/mail 120 webhook-max-lag-events 7 webhook-end-lag-events 250 webhook-drain-ms 500000 dispatcher-cpu-ns/mail 0 peak-rss-B"
	if got := benchLine(r); got != want {
		t.Errorf("benchLine:\n got %s\nwant %s", got, want)
	}
}
