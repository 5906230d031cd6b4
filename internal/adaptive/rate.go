package adaptive

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// FleetShare is one worker's share of a fleet-wide rate: totalRate split
// evenly over the live members of the consumer group. With no members known
// (members < 1) the worker takes all of it, as a lone worker would.
func FleetShare(totalRate float64, members int) float64 {
	if totalRate <= 0 || math.IsNaN(totalRate) {
		return 0
	}
	return totalRate / float64(max(members, 1))
}

// RateLimiter paces sends to one relay with a token bucket whose rate
// can be set again (when group membership changes). All methods take the
// time explicitly so a virtual clock drives it. A rate of 0 or less means
// unlimited.
type RateLimiter struct {
	mu sync.Mutex
	l  *rate.Limiter
}

// NewRateLimiter returns a limiter of perSecond with burst, full at now.
func NewRateLimiter(now time.Time, perSecond float64, burst int) *RateLimiter {
	l := rate.NewLimiter(toLimit(perSecond), max(burst, 1))
	l.SetBurstAt(now, max(burst, 1))
	return &RateLimiter{l: l}
}

func toLimit(perSecond float64) rate.Limit {
	if perSecond <= 0 {
		return rate.Inf
	}
	return rate.Limit(perSecond)
}

// SetRate changes the rate from now on.
func (r *RateLimiter) SetRate(now time.Time, perSecond float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.l.SetLimitAt(now, toLimit(perSecond))
}

// Rate returns the current rate (+Inf when unlimited).
func (r *RateLimiter) Rate() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return float64(r.l.Limit())
}

// Reserve takes one token at now and returns when the send may start: now
// when a token was free, later when the caller must wait.
func (r *RateLimiter) Reserve(now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return now.Add(r.l.ReserveN(now, 1).DelayFrom(now))
}

// Allow takes one token at now if one is free.
func (r *RateLimiter) Allow(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.l.AllowN(now, 1)
}

// Next returns when a token is free at or after now, without taking it.
func (r *RateLimiter) Next(now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.l.Limit() == rate.Inf {
		return now
	}
	tokens := r.l.TokensAt(now)
	if tokens >= 1 {
		return now
	}
	return now.Add(time.Duration(math.Ceil((1 - tokens) / float64(r.l.Limit()) * float64(time.Second))))
}
