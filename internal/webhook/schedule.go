package webhook

import (
	"net/http"
	"strconv"
	"time"

	"github.com/postline/postline/internal/configerr"
)

// DefaultDelays is the common webhook redelivery schedule: the wait before each
// attempt after the first, which is made at once. Past its end the last
// wait repeats until the horizon.
var DefaultDelays = []time.Duration{
	5 * time.Second, 5 * time.Minute, 30 * time.Minute,
	2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour,
}

// Defaults of Schedule.
const (
	// DefaultHorizon is how long after its first attempt an event is still
	// tried: the attempt that fails at or past it dead-letters the event.
	DefaultHorizon = 72 * time.Hour
	// DefaultJitter spreads each wait by up to a tenth either way, so events
	// that failed together do not come back together.
	DefaultJitter = 0.1
	// maxRetryAfter bounds the Retry-After an endpoint can ask for.
	maxRetryAfter = 24 * time.Hour
)

// Schedule decides when an event an endpoint did not take is tried again,
// and when it is given up on. It is pure: the clock and the randomness are
// the caller's.
type Schedule struct {
	// Delays are the waits before the second, third, ... attempt; the last
	// repeats. Defaults to DefaultDelays (5s, 5m, 30m, 2h, 5h, 10h, 10h).
	Delays []time.Duration
	// Horizon: an attempt that fails this long or longer after the event's
	// first attempt dead-letters it. Defaults to DefaultHorizon (72h).
	Horizon time.Duration
	// Jitter is the fraction each wait may be shortened or lengthened by,
	// at random. Defaults to DefaultJitter (0.1).
	Jitter float64
}

// WithDefaults returns s with zero fields set to their defaults.
func (s Schedule) WithDefaults() Schedule {
	if len(s.Delays) == 0 {
		s.Delays = DefaultDelays
	}
	if s.Horizon == 0 {
		s.Horizon = DefaultHorizon
	}
	if s.Jitter == 0 {
		s.Jitter = DefaultJitter
	}
	return s
}

// Validate names the first bad field.
func (s Schedule) Validate() error {
	for i, d := range s.Delays {
		if d <= 0 {
			return configerr.Errorf("Delays", "Delays[%d] = %s: must be positive", i, d)
		}
	}
	switch {
	case len(s.Delays) == 0:
		return configerr.Errorf("Delays", "Delays: at least one wait is required")
	case s.Horizon <= 0:
		return configerr.Errorf("Horizon", "Horizon = %s: must be positive", s.Horizon)
	case s.Jitter < 0 || s.Jitter >= 1:
		return configerr.Errorf("Jitter", "Jitter = %g: must be at least 0 and less than 1", s.Jitter)
	}
	return nil
}

// Next returns when to make the attempt after the attempts-th one (from 1)
// failed at now, for an event first tried at first, or false when the
// event is to be given up on: the failed attempt was made at or past the
// horizon. A Retry-After the endpoint sent is honoured (up to 24 h) when it
// asks for a longer wait than the schedule. rand returns a uniformly random
// number in [0, 1).
func (s Schedule) Next(attempts int, first, now time.Time, retryAfter time.Duration, rand func() float64) (time.Time, bool) {
	if now.Sub(first) >= s.Horizon {
		return time.Time{}, false
	}
	wait := s.Delays[min(max(attempts, 1), len(s.Delays))-1]
	spread := time.Duration(float64(wait) * s.Jitter)
	wait += time.Duration(float64(2*spread)*rand()) - spread
	return now.Add(max(wait, min(retryAfter, maxRetryAfter))), true
}

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
