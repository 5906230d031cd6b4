package adaptive

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/postline/postline/job"
)

// Bucket is a token bucket: Burst tokens, refilled at PerSecond.
type Bucket struct {
	// Burst is the bucket's size, and how full it starts.
	Burst int
	// PerSecond is the refill rate.
	PerSecond float64
}

// DefaultBudgets are the retry budgets per priority.
var DefaultBudgets = map[job.Priority]Bucket{
	job.PriorityUrgent: {Burst: 100, PerSecond: 5},
	job.PriorityNormal: {Burst: 30, PerSecond: 1},
	job.PriorityBulk:   {Burst: 5, PerSecond: 0.2},
}

// Budgets are retry budgets per priority: each retry takes a token, and
// first attempts take none, so a storm of retries is paced by the refill
// rate and cannot starve new mail. An empty priority is normal.
type Budgets struct {
	mu sync.Mutex
	b  map[job.Priority]*rate.Limiter
}

// NewBudgets returns full buckets for cfg; a nil cfg means DefaultBudgets.
// Every priority must have a bucket.
func NewBudgets(cfg map[job.Priority]Bucket, start time.Time) (*Budgets, error) {
	if cfg == nil {
		cfg = DefaultBudgets
	}
	out := &Budgets{b: map[job.Priority]*rate.Limiter{}}
	for _, p := range []job.Priority{job.PriorityUrgent, job.PriorityNormal, job.PriorityBulk} {
		c, ok := cfg[p]
		switch {
		case !ok:
			return nil, fmt.Errorf("adaptive: budgets have no bucket for priority %s", p)
		case c.Burst < 1 || c.PerSecond <= 0:
			return nil, fmt.Errorf("adaptive: budget %s {Burst: %d, PerSecond: %v} must have a positive burst and rate", p, c.Burst, c.PerSecond)
		}
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
	l := b.limiter(priority)
	r := l.ReserveN(now, 1)
	d := r.DelayFrom(now)
	return d == 0, now.Add(d)
}

// Tokens returns the tokens left for priority at now (negative when retries
// are already reserved into the future), for metrics.
func (b *Budgets) Tokens(now time.Time, priority job.Priority) float64 {
	return b.limiter(priority).TokensAt(now)
}

func (b *Budgets) limiter(p job.Priority) *rate.Limiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	if l, ok := b.b[p]; ok {
		return l
	}
	return b.b[job.PriorityNormal]
}
