// Package backoff owns the one loop every component uses to call a
// dependency (Kafka, PostgreSQL) again after a failure: a growing wait
// between attempts, an end when the context ends, and a stop at the first
// failure that trying again cannot mend.
package backoff

import (
	"context"
	"time"
)

// Policy is how a dependency call is made again: the first wait is First, and
// each failure doubles it up to Max.
type Policy struct {
	First, Max time.Duration
	// Permanent reports a failure that trying again cannot mend (refused
	// credentials, a record too large); nil: every failure is tried again.
	Permanent func(error) bool
	// OnWait, if not nil, sees each failure that will be tried again: its
	// call number (1 for the first) and the wait before the next.
	OnWait func(err error, call int, wait time.Duration)
}

// Do calls op until it succeeds (nil), ctx ends (ctx's error: a failure
// met once ctx has ended is not tried again, nor reported to OnWait), or op
// fails permanently (that failure).
func (r Policy) Do(ctx context.Context, op func() error) error {
	wait := r.First
	for call := 1; ; call++ {
		err := op()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r.Permanent != nil && r.Permanent(err) {
			return err
		}
		if r.OnWait != nil {
			r.OnWait(err, call, wait)
		}
		if err := Sleep(ctx, wait); err != nil {
			return err
		}
		wait = min(2*wait, r.Max)
	}
}

// Sleep waits d, or until ctx ends: then it returns ctx's error at once.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
