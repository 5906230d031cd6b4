package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/postline/postline/job"
)

func TestDueBy(t *testing.T) {
	tests := []struct {
		elapsed time.Duration
		rate    float64
		n, want int
	}{
		{elapsed: 0, rate: 1000, n: 10, want: 1},
		{elapsed: 999 * time.Microsecond, rate: 1000, n: 10, want: 1},
		{elapsed: time.Millisecond, rate: 1000, n: 10, want: 2},
		{elapsed: 5 * time.Millisecond, rate: 1000, n: 10, want: 6},
		{elapsed: time.Second, rate: 1000, n: 10, want: 10},
		{elapsed: 500 * time.Millisecond, rate: 4, n: 10, want: 3},
		{elapsed: -time.Millisecond, rate: 1000, n: 10, want: 1},
		{elapsed: time.Second, rate: 0, n: 10, want: 1},
		{elapsed: time.Second, rate: 1000, n: 0, want: 0},
	}
	for _, tt := range tests {
		if got := dueBy(tt.elapsed, tt.rate, tt.n); got != tt.want {
			t.Errorf("dueBy(%s, %g, %d) = %d, want %d", tt.elapsed, tt.rate, tt.n, got, tt.want)
		}
	}
}

// pacedPublish publishes every job once, in order, spread over the time
// the rate gives, not at once.
func TestPacedPublish(t *testing.T) {
	tests := []struct {
		name     string
		jobs     int
		rate     float64
		minTook  time.Duration
		maxTook  time.Duration
		failWith error
	}{
		{name: "200 at 2,000/s", jobs: 200, rate: 2000, minTook: 95 * time.Millisecond, maxTook: time.Second},
		{name: "10 at 100/s", jobs: 10, rate: 100, minTook: 85 * time.Millisecond, maxTook: time.Second},
		{name: "one", jobs: 1, rate: 100, maxTook: 500 * time.Millisecond},
		{name: "an error ends it", jobs: 100, rate: 1000, maxTook: time.Second, failWith: errors.New("broker down")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jobs := plainJobs(tt.jobs, 10)
			var (
				mu    sync.Mutex
				got   []string
				first time.Time
				last  time.Time
			)
			publish := func(_ context.Context, batch []job.Job) error {
				mu.Lock()
				defer mu.Unlock()
				if first.IsZero() {
					first = time.Now()
				}
				last = time.Now()
				for _, j := range batch {
					got = append(got, j.Subject)
				}
				return tt.failWith
			}
			took, err := pacedPublish(context.Background(), publish, jobs, tt.rate, time.Millisecond, 4)
			if tt.failWith != nil {
				if !errors.Is(err, tt.failWith) {
					t.Fatalf("err = %v, want %v", err, tt.failWith)
				}
				if len(got) == tt.jobs {
					t.Errorf("published all %d jobs after an error", tt.jobs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if took < tt.minTook || took > tt.maxTook {
				t.Errorf("took %s, want %s to %s", took, tt.minTook, tt.maxTook)
			}
			if spread := last.Sub(first); spread < tt.minTook {
				t.Errorf("publishes spread over %s, want at least %s", spread, tt.minTook)
			}
			seen := map[string]bool{}
			for _, s := range got {
				seen[s] = true
			}
			if len(got) != tt.jobs || len(seen) != tt.jobs {
				t.Errorf("published %d jobs (%d distinct), want each of %d once", len(got), len(seen), tt.jobs)
			}
		})
	}
}

func TestLatencyTargets(t *testing.T) {
	row := func(variant string, p50, p99, mx time.Duration) result {
		return result{Variant: variant, Mails: 40000, Span: 10 * time.Second, HasLatency: true, P50: p50, P99: p99, Max: mx}
	}
	ms := time.Millisecond
	tests := []struct {
		name             string
		rows             []result
		halfLoad, lone   string // verdicts
		halfLoadM, loneM string // measured
	}{
		{name: "both met", rows: []result{row("halfload", 4*ms, 20*ms, 60*ms), row("lone", 8*ms, 8*ms, 15*ms)},
			halfLoad: "PASS", halfLoadM: "4.0 ms / 20.0 ms (60.0 ms) at 4000 mails/s", lone: "PASS", loneM: "8.0 ms (15.0 ms) over 40000 mails"},
		{name: "at the bounds", rows: []result{row("halfload", 10*ms, 50*ms, 50*ms), row("lone", 20*ms, 20*ms, 20*ms)},
			halfLoad: "PASS", halfLoadM: "10.0 ms / 50.0 ms (50.0 ms) at 4000 mails/s", lone: "PASS", loneM: "20.0 ms (20.0 ms) over 40000 mails"},
		{name: "p99 over", rows: []result{row("halfload", 4*ms, 51*ms, 90*ms), row("lone", 21*ms, 30*ms, 30*ms)},
			halfLoad: "FAIL", halfLoadM: "4.0 ms / 51.0 ms (90.0 ms) at 4000 mails/s", lone: "FAIL", loneM: "21.0 ms (30.0 ms) over 40000 mails"},
		{name: "p50 over", rows: []result{row("halfload", 11*ms, 20*ms, 30*ms)},
			halfLoad: "FAIL", halfLoadM: "11.0 ms / 20.0 ms (30.0 ms) at 4000 mails/s", lone: "not measured", loneM: "n/a"},
		{name: "no rows", halfLoad: "not measured", halfLoadM: "n/a", lone: "not measured", loneM: "n/a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := latencyTargets(tt.rows, "halfload", "lone")
			if len(ts) != 2 {
				t.Fatalf("%d targets, want 2", len(ts))
			}
			if ts[0].verdict() != tt.halfLoad || ts[0].Measured != tt.halfLoadM {
				t.Errorf("halfload = %q, %q; want %q, %q", ts[0].verdict(), ts[0].Measured, tt.halfLoad, tt.halfLoadM)
			}
			if ts[1].verdict() != tt.lone || ts[1].Measured != tt.loneM {
				t.Errorf("lone = %q, %q; want %q, %q", ts[1].verdict(), ts[1].Measured, tt.lone, tt.loneM)
			}
		})
	}
}
