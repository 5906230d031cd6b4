// Package benchstats owns the statistics the benchmark harnesses report
// over repeated runs, so that every table reduces its runs the same way,
// and the benchstat files they write them to.
package benchstats

import (
	"math"
	"slices"
)

// Median returns the median of xs (the mean of the middle two for an even
// count), and NaN for none. xs is left as it was.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	mid := len(s) / 2
	if len(s)%2 == 1 {
		return s[mid]
	}
	return (s[mid-1] + s[mid]) / 2
}

// Verdict is the cell of a target that a figure met (PASS) or missed
// (FAIL), the words every harness's targets are judged in.
func Verdict(met bool) string {
	if met {
		return "PASS"
	}
	return "FAIL"
}
