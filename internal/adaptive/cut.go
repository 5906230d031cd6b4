package adaptive

import "time"

// lastCut remembers when a controller (AIMD, Pacer) last decreased, so it
// can tell a refusal it already answered from one that asks for another cut.
type lastCut struct {
	at  time.Time
	set bool
}

// within reports whether the last cut happened less than d before now.
func (c *lastCut) within(now time.Time, d time.Duration) bool {
	return c.set && now.Sub(c.at) < d
}

// answered reports whether a send that started at sent was already answered
// by the last cut (it started before it).
func (c *lastCut) answered(sent time.Time) bool {
	return c.set && sent.Before(c.at)
}

func (c *lastCut) mark(now time.Time) { c.at, c.set = now, true }
