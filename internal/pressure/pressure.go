// Package pressure measures Go runtime pressure for the worker: the p99 of
// GC stop-the-world pauses and of goroutine scheduling latency over each
// interval, read from runtime/metrics, fed to an adaptive.PressureGuard
// that scales send concurrency down before the process falls over.
package pressure

import (
	"context"
	"math"
	"runtime/metrics"
	"time"

	"github.com/postline/postline/internal/adaptive"
)

// The runtime/metrics histograms read, cumulative since the process
// started.
const (
	gcPauses       = "/sched/pauses/total/gc:seconds"
	schedLatencies = "/sched/latencies:seconds"
)

// Sampler reads the runtime's pause and latency histograms and reports
// the p99 of what happened since its previous reading.
type Sampler struct {
	samples []metrics.Sample
	prev    [2]*metrics.Float64Histogram
}

// NewSampler returns a sampler whose first Read covers the time since the
// process started.
func NewSampler() *Sampler {
	return &Sampler{samples: []metrics.Sample{{Name: gcPauses}, {Name: schedLatencies}}}
}

// Read returns the p99 GC pause and the p99 scheduling latency since the
// previous Read (0 when nothing happened).
func (s *Sampler) Read() (gcPauseP99, schedLatencyP99 time.Duration) {
	metrics.Read(s.samples)
	var out [2]time.Duration
	for i, sample := range s.samples {
		if sample.Value.Kind() != metrics.KindFloat64Histogram {
			continue // not in this Go version: no reading
		}
		h := sample.Value.Float64Histogram()
		out[i] = P99(h, s.prev[i])
		s.prev[i] = copyHistogram(h)
	}
	return out[0], out[1]
}

// P99 is the 99th percentile of the observations in h that are not in
// prev (an earlier reading of the same histogram; nil for none), as the
// upper bound of the bucket that holds it; 0 without observations.
func P99(h, prev *metrics.Float64Histogram) time.Duration {
	var total uint64
	delta := make([]uint64, len(h.Counts))
	for i, c := range h.Counts {
		if prev != nil && i < len(prev.Counts) {
			c -= min(c, prev.Counts[i])
		}
		delta[i] = c
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(0.99 * float64(total)))
	var seen uint64
	for i, c := range delta {
		seen += c
		if seen >= rank {
			upper := h.Buckets[i+1]
			if math.IsInf(upper, 1) {
				upper = h.Buckets[i] // the last bucket is open: its lower bound
			}
			return time.Duration(upper * float64(time.Second))
		}
	}
	return 0
}

func copyHistogram(h *metrics.Float64Histogram) *metrics.Float64Histogram {
	return &metrics.Float64Histogram{Counts: append([]uint64(nil), h.Counts...), Buckets: h.Buckets}
}

// Run feeds guard a reading every interval until ctx ends.
func Run(ctx context.Context, guard *adaptive.PressureGuard, interval time.Duration) error {
	s := NewSampler()
	s.Read() // start counting from now
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			guard.Observe(s.Read())
		}
	}
}
