package webhook

import (
	"net/http"
	"strconv"
	"time"
)

// backoff is the retry schedule of a failed delivery.
type backoff struct {
	base, max time.Duration
	// jitter returns a uniformly random duration in [0, n]; n > 0.
	jitter func(n time.Duration) time.Duration
}

// ceiling is the wait after failed attempt n (from 1) before jitter:
// base doubled n-1 times, at most max.
func (b backoff) ceiling(n int) time.Duration {
	d := b.base
	for i := 1; i < n && d < b.max; i++ {
		d *= 2
	}
	return min(d, b.max)
}

// delay is the wait after failed attempt n: the ceiling with the lower half
// of it jittered away at random ("equal jitter"), so that retries of
// events that failed together spread out while the schedule still grows.
// A Retry-After the endpoint asked for is honoured up to max.
func (b backoff) delay(n int, retryAfter time.Duration) time.Duration {
	c := b.ceiling(n)
	d := c/2 + b.jitter(c-c/2)
	return max(d, min(retryAfter, b.max))
}

// maxRetryAfter bounds what parseRetryAfter returns; the delay is capped
// at RetryMaxDelay anyway.
const maxRetryAfter = 24 * time.Hour

// parseRetryAfter reads a Retry-After header (delay-seconds or an HTTP
// date) as a duration from now, at most maxRetryAfter; 0 when absent,
// unreadable or past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(maxRetryAfter/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter)
	}
	return 0
}
