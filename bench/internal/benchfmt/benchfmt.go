// Package benchfmt is how the benchmark harnesses print figures in their
// tables: durations in milliseconds, sizes as 10k or 1M.
package benchfmt

import (
	"fmt"
	"strconv"
	"time"
)

// Millis prints d in milliseconds with one decimal: "12.5 ms".
func Millis(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// Count prints n as "10k" or "1M" when it is a whole number of those, else
// as it is.
func Count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n >= 1000 && n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}
