package delivery

import (
	"fmt"
	"time"

	"github.com/postline/postline/job"
)

// RetryLimit bounds how often and for how long a job is retried.
type RetryLimit struct {
	// MaxAttempts is the highest attempt number a job may reach; a failure
	// of that attempt makes the job dead.
	MaxAttempts int
	// MaxAge is how long after its first publication a job may still be
	// tried; past it the job is dead the next time it is looked at.
	MaxAge time.Duration
}

// DefaultRetryLimits are the limits per priority.
var DefaultRetryLimits = map[job.Priority]RetryLimit{
	job.PriorityUrgent: {MaxAttempts: 10, MaxAge: 6 * time.Hour},
	job.PriorityNormal: {MaxAttempts: 8, MaxAge: 24 * time.Hour},
	job.PriorityBulk:   {MaxAttempts: 5, MaxAge: 48 * time.Hour},
}

// validateRetryLimits checks that every priority has sane limits.
func validateRetryLimits(limits map[job.Priority]RetryLimit) error {
	for _, p := range []job.Priority{job.PriorityUrgent, job.PriorityNormal, job.PriorityBulk} {
		l, ok := limits[p]
		switch {
		case !ok:
			return fmt.Errorf("delivery: RetryLimits has no entry for priority %s", p)
		case l.MaxAttempts < 1:
			return fmt.Errorf("delivery: RetryLimits[%s].MaxAttempts %d must be at least 1", p, l.MaxAttempts)
		case l.MaxAge <= 0:
			return fmt.Errorf("delivery: RetryLimits[%s].MaxAge %s must be positive", p, l.MaxAge)
		}
	}
	return nil
}
