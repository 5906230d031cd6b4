package adaptive

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/postline/postline/job"
)

// Bucket is a retry budget: a token bucket of Burst tokens refilled at
// PerSecond, plus Share tokens earned by every first attempt.
type Bucket struct {
	// Burst is the bucket's size, and how full it starts.
	Burst int
	// PerSecond is the refill rate.
	PerSecond float64
	// Share is the tokens each first attempt earns, in [0,1): retries may
	// be that share of the mail being sent on top of the refill, so the
	// budget grows with the traffic (a fixed 1/s would make a burst of
	// 10,000 jobs that meets a few hundred early refusals wait minutes for
	// tokens). Earned tokens are kept up to Burst. 0 means none.
	Share float64
}

// DefaultBudgets are the retry budgets per priority.
var DefaultBudgets = map[job.Priority]Bucket{
	job.PriorityUrgent: {Burst: 100, PerSecond: 5, Share: 0.2},
	job.PriorityNormal: {Burst: 30, PerSecond: 1, Share: 0.1},
	job.PriorityBulk:   {Burst: 5, PerSecond: 0.2, Share: 0.05},
}

// Budgets are retry budgets per priority: each retry takes a token, and
// first attempts take none but earn a share of one, so a storm of retries
// is held to the refill rate plus a share of the first attempts and cannot
// starve new mail. An empty priority is normal.
type Budgets struct {
	mu     sync.Mutex
	b      map[job.Priority]*rate.Limiter
	cfg    map[job.Priority]Bucket
	earned map[job.Priority]float64 // tokens earned by first attempts, at most Burst
}

// NewBudgets returns full buckets for cfg; a nil cfg means DefaultBudgets.
// Every priority must have a bucket.
func NewBudgets(cfg map[job.Priority]Bucket, start time.Time) (*Budgets, error) {
	if cfg == nil {
		cfg = DefaultBudgets
	}
	out := &Budgets{b: map[job.Priority]*rate.Limiter{}, cfg: map[job.Priority]Bucket{}, earned: map[job.Priority]float64{}}
	for _, p := range []job.Priority{job.PriorityUrgent, job.PriorityNormal, job.PriorityBulk} {
		c, ok := cfg[p]
		switch {
		case !ok:
			return nil, fmt.Errorf("adaptive: budgets have no bucket for priority %s", p)
		case c.Burst < 1 || c.PerSecond <= 0:
			return nil, fmt.Errorf("adaptive: budget %s {Burst: %d, PerSecond: %v} must have a positive burst and rate", p, c.Burst, c.PerSecond)
		case !(c.Share >= 0 && c.Share < 1):
			return nil, fmt.Errorf("adaptive: budget %s Share %v must be in [0,1)", p, c.Share)
		}
		out.cfg[p] = c
		l := rate.NewLimiter(rate.Limit(c.PerSecond), c.Burst)
		l.SetBurstAt(start, c.Burst) // start full at the caller's clock
		out.b[p] = l
	}
	return out, nil
}

// Take takes a retry token for priority at now. When the bucket is empty
// it returns false and the time the reserved token becomes available: the
// token is taken all the same, so the caller must schedule the retry no
// earlier than waitUntil (not call Take again).
func (b *Budgets) Take(now time.Time, priority job.Priority) (ok bool, waitUntil time.Time) {
	if b.spendEarned(priority) {
		return true, now
	}
	l := b.limiter(priority)
	r := l.ReserveN(now, 1)
	d := r.DelayFrom(now)
	return d == 0, now.Add(d)
}

// Earn records a first attempt of priority: it earns the bucket's Share of
// a retry token.
func (b *Budgets) Earn(priority job.Priority) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.known(priority)
	c := b.cfg[p]
	b.earned[p] = min(float64(c.Burst), b.earned[p]+c.Share)
}

// spendEarned takes an earned token of priority if there is one.
func (b *Budgets) spendEarned(priority job.Priority) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.known(priority)
	if b.earned[p] < 1-earnedSlack {
		return false
	}
	b.earned[p] = max(0, b.earned[p]-1)
	return true
}

// earnedSlack absorbs the rounding of adding shares: ten first attempts at
// 0.1 earn a whole token.
const earnedSlack = 1e-9

// known maps a priority without a bucket to normal; b.mu is held.
func (b *Budgets) known(p job.Priority) job.Priority {
	if _, ok := b.b[p]; ok {
		return p
	}
	return job.PriorityNormal
}

// Tokens returns the tokens left for priority at now, earned ones included
// (negative when retries are already reserved into the future), for
// metrics.
func (b *Budgets) Tokens(now time.Time, priority job.Priority) float64 {
	b.mu.Lock()
	earned := b.earned[b.known(priority)]
	b.mu.Unlock()
	return b.limiter(priority).TokensAt(now) + math.Floor(earned+earnedSlack)
}

func (b *Budgets) limiter(p job.Priority) *rate.Limiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	if l, ok := b.b[p]; ok {
		return l
	}
	return b.b[job.PriorityNormal]
}
