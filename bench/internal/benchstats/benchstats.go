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

// MedianOf returns the median of figure over runs: the value a table row
// shows for one figure of several runs of the same row.
func MedianOf[T any](runs []T, figure func(T) float64) float64 {
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = figure(r)
	}
	return Median(xs)
}

// Verdict is the cell of a target that a figure met (PASS) or missed
// (FAIL), the words every harness's targets are judged in.
func Verdict(met bool) string {
	if met {
		return "PASS"
	}
	return "FAIL"
}
