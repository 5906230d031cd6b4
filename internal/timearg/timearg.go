// Package timearg reads the times operators type into postctl flags and the
// console's forms: an RFC 3339 time, or a duration before now ("90m", "2h",
// "7d").
package timearg

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// maxDays bounds a duration ago in days, so that it cannot overflow.
const maxDays = 100_000

// Parse reads s as an RFC 3339 time or a duration before now; "" is the
// zero time (no bound).
func Parse(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	var (
		d   time.Duration
		err error
	)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		if n, err = strconv.Atoi(days); err == nil && (n > maxDays || n < -maxDays) {
			err = errors.New("too many days")
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil {
		return time.Time{}, errors.New("want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (90m, 2h, 7d)")
	}
	if d < 0 {
		return time.Time{}, errors.New("a duration ago must not be negative")
	}
	return now.Add(-d), nil
}
