package redrive

import (
	"context"
	"errors"

	"golang.org/x/time/rate"
)

// burst is how many records a run publishes at once: a tenth of a second's
// worth, so the rate holds over any stretch longer than that and a stopped
// run leaves at most that many rows reopened with nothing published.
func burst(perSecond float64, batch int) int {
	return max(1, min(batch, int(perSecond/10)))
}

// pacer waits for a rate limiter's tokens on a Clock.
type pacer struct {
	lim   *rate.Limiter
	clock Clock
}

// wait takes n tokens, sleeping until they are due.
func (p pacer) wait(ctx context.Context, n int) error {
	now := p.clock.Now()
	res := p.lim.ReserveN(now, n)
	if !res.OK() {
		return errors.New("redrive: more records at once than the rate's burst")
	}
	if err := p.clock.Sleep(ctx, res.DelayFrom(now)); err != nil {
		res.CancelAt(p.clock.Now())
		return err
	}
	return nil
}
