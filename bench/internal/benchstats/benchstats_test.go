package benchstats

import (
	"math"
	"testing"
)

func TestMedian(t *testing.T) {
	tests := []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		if got := Median(tt.xs); got != tt.want {
			t.Errorf("Median(%v) = %v, want %v", tt.xs, got, tt.want)
		}
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %v, want NaN", got)
	}
	xs := []float64{3, 1, 2}
	Median(xs)
	if xs[0] != 3 {
		t.Errorf("Median sorted its argument in place: %v", xs)
	}
}

func TestMedianOf(t *testing.T) {
	type run struct{ mails int }
	tests := []struct {
		runs []run
		want float64
	}{
		{[]run{{7}}, 7},
		{[]run{{9}, {1}, {4}}, 4},
		{[]run{{4}, {1}, {3}, {2}}, 2.5},
	}
	for _, tt := range tests {
		if got := MedianOf(tt.runs, func(r run) float64 { return float64(r.mails) }); got != tt.want {
			t.Errorf("MedianOf(%v) = %v, want %v", tt.runs, got, tt.want)
		}
	}
	if got := MedianOf([]run(nil), func(r run) float64 { return float64(r.mails) }); !math.IsNaN(got) {
		t.Errorf("MedianOf(nil) = %v, want NaN", got)
	}
}

func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		met  bool
		want string
	}{{true, "PASS"}, {false, "FAIL"}} {
		if got := Verdict(tc.met); got != tc.want {
			t.Errorf("Verdict(%v) = %q, want %q", tc.met, got, tc.want)
		}
	}
}
