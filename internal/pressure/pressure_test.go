package pressure

import (
	"math"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestP99(t *testing.T) {
	buckets := []float64{0, 0.001, 0.01, 0.1, math.Inf(1)}
	h := func(counts ...uint64) *metrics.Float64Histogram {
		return &metrics.Float64Histogram{Counts: counts, Buckets: buckets}
	}
	tests := []struct {
		name      string
		now, prev *metrics.Float64Histogram
		want      time.Duration
	}{
		{"empty", h(0, 0, 0, 0), nil, 0},
		{"all in the first bucket", h(100, 0, 0, 0), nil, time.Millisecond},
		{"one slow in a hundred is the p99", h(99, 0, 1, 0), nil, time.Millisecond},
		{"two slow in a hundred are", h(98, 0, 2, 0), nil, 100 * time.Millisecond},
		{"only what happened since the previous reading", h(100, 0, 5, 0), h(0, 0, 5, 0), time.Millisecond},
		{"nothing new", h(100, 0, 5, 0), h(100, 0, 5, 0), 0},
		{"open last bucket reports its lower bound", h(0, 0, 0, 1), nil, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := P99(tt.now, tt.prev); got != tt.want {
				t.Errorf("P99 = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSamplerReadsTheRuntime(t *testing.T) {
	s := NewSampler()
	s.Read()
	runtime.GC() // at least one stop-the-world pause to observe
	gc, _ := s.Read()
	if gc <= 0 {
		t.Errorf("p99 GC pause after runtime.GC = %v, want > 0", gc)
	}
}
