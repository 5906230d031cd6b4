package main

import (
	"strings"
	"testing"
	"time"
)

func TestRunsMarkdown(t *testing.T) {
	keepAll := func(d int64, _ time.Duration) int64 { return d }
	// run is a 600 s soak at 1000 mails/s whose last window runs at
	// last mails/s, and whose workers peak at rss bytes.
	run := func(t *testing.T, last int64, rss int64) summary {
		t.Helper()
		points, samples := soakOf(1000, 600, keepAll, rss)
		// Slow the last 60,000 mails down to last mails/s: they take
		// 60,000/last seconds instead of 60.
		stretch := time.Duration(60_000 * int64(time.Second) / last)
		for i := range points {
			if points[i].Delivered > 540_000 {
				points[i].T = 540*time.Second + time.Duration(points[i].Delivered-540_000)*stretch/60_000
			}
		}
		p := params{Jobs: 600_000, Window: 60_000, Workers: 2, Retention: time.Hour, ReaperInterval: 30 * time.Second, PurgeInterval: 30 * time.Second,
			SampleEvery: 10 * time.Second, Machine: "2 CPUs", AgingMode: agingOff}
		s, err := summarize(p, points, samples)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		name  string
		lasts []int64 // each run's last window, mails/s, against a first of 1000
		rss   int64   // the second run's
		want  []string
	}{
		{
			name:  "the median passes where one run fails",
			lasts: []int64{950, 850, 920},
			rss:   60 << 20,
			want: []string{
				"| 1 | 1000 | 950 | 0.950× | PASS | 60.0 / 60.0 | PASS |",
				"| 2 | 1000 | 850 | 0.850× | FAIL | 60.0 / 60.0 | PASS |",
				"over 3 runs: 0.920× (target ≥ 0.90×): PASS. The other targets: met in every run.",
			},
		},
		{
			name:  "the median fails where one run passes",
			lasts: []int64{950, 850, 880},
			rss:   60 << 20,
			want:  []string{"over 3 runs: 0.880× (target ≥ 0.90×): FAIL."},
		},
		{
			name:  "an even count takes the middle two",
			lasts: []int64{950, 850},
			rss:   60 << 20,
			want:  []string{"over 2 runs: 0.900× (target ≥ 0.90×): PASS."},
		},
		{
			name:  "a run over the memory target fails the others",
			lasts: []int64{950, 950, 950},
			rss:   TargetRSS + 1<<20,
			want: []string{
				"| 2 | 1000 | 950 | 0.950× | PASS | 101.0 / 101.0 | FAIL |",
				"The other targets: missed in a run (FAIL above).",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs []summary
			for i, last := range tc.lasts {
				rss := int64(60 << 20)
				if i == 1 {
					rss = tc.rss
				}
				runs = append(runs, run(t, last, rss))
			}
			var b strings.Builder
			runsMarkdown(&b, "go run ./bench/soak -runs 3", runs)
			md := b.String()
			for _, want := range append(tc.want, "Command: `go run ./bench/soak -runs 3`") {
				if !strings.Contains(md, want) {
					t.Errorf("report lacks %q:\n%s", want, md)
				}
			}
		})
	}
}
