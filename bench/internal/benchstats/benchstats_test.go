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
