package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The aging modes (-aging): how the soak simulates the retention passing,
// so that the workers' purge has rows to delete in a run of minutes.
const (
	// agingSteady ages, every -age-every from the moment -age-from of the
	// jobs are sent, the rows sent more than -age-lag before: rows become
	// purgeable about -age-lag after they were sent, and the purge deletes,
	// each second, about what was sent a second: production's steady state,
	// where it deletes what was sent one retention before.
	agingSteady = "steady"
	// agingBurst ages every row sent so far at once, when -age-from of the
	// jobs are sent: the purge then deletes them in a burst, at its fastest,
	// while the rest is delivered. Production never sees that burst.
	agingBurst = "burst"
	// agingOff ages nothing: nothing is purged and the table only grows.
	agingOff = "off"
)

// agingShift is how far aging moves a row's timestamps back by default:
// past the retention, by a margin that covers the reapers' clock and the
// statement. -age-shift below the retention ages rows the purge never
// deletes: the aging's own cost, without the purge's.
func agingShift(retention time.Duration) time.Duration { return retention + time.Minute }

// burstSQL moves every sent row's timestamps back past the retention, in
// one statement. Both columns move, so a purge that selects by either
// finds them.
const burstSQL = `UPDATE postline_messages
	SET created_at = created_at - make_interval(secs => $1), updated_at = updated_at - make_interval(secs => $1)
	WHERE status = 'sent'`

// steadySQL moves back the timestamps of the sent rows created in
// [$2, $3): a range on the created_at index. A row it aged lands a shift
// (at least a lag) before, out of every later range, which begins at most
// a lag before this one ends: no row is aged twice.
const steadySQL = `UPDATE postline_messages
	SET created_at = created_at - make_interval(secs => $1), updated_at = updated_at - make_interval(secs => $1)
	WHERE created_at >= $2 AND created_at < $3 AND status = 'sent'`

// aging is what the soak's simulated passing of the retention did and
// cost: it began at t = At with Sent mails sent, and its Statements
// (one for a burst) aged Rows rows in Took in all. This is load the
// harness puts on PostgreSQL that production does not have.
type aging struct {
	Mode       string
	At         time.Duration
	Sent       int64
	Statements int
	Rows       int64
	Took       time.Duration // the statements' durations, summed
	Longest    time.Duration // the longest statement
	Shift      time.Duration // how far the timestamps moved back
	Lag, Every time.Duration // steady only: -age-lag and -age-every
	BytesAfter int64         // burst only: every table of the schema just after the update
}

// rowsPerSecond is the rows aged per second spent aging.
func (a *aging) rowsPerSecond() float64 {
	if a.Took <= 0 {
		return 0
	}
	return float64(a.Rows) / a.Took.Seconds()
}

func (a *aging) add(rows int64, took time.Duration) {
	a.Statements++
	a.Rows += rows
	a.Took += took
	a.Longest = max(a.Longest, took)
}

// burst runs burstSQL; it starts at sent mails and t.
func burst(ctx context.Context, pool *pgxpool.Pool, shift, t time.Duration, sent int64) (*aging, error) {
	a := &aging{Mode: agingBurst, At: t, Sent: sent, Shift: shift}
	start := time.Now()
	tag, err := pool.Exec(ctx, burstSQL, shift.Seconds())
	if err != nil {
		return nil, fmt.Errorf("age the sent rows: %w", err)
	}
	a.add(tag.RowsAffected(), time.Since(start))
	tables, err := readTableStats(ctx, pool)
	if err != nil {
		return nil, err
	}
	a.BytesAfter = tables.AllBytes
	return a, nil
}

// steadyAger runs steadySQL every Every until stopped.
type steadyAger struct {
	pool              *pgxpool.Pool
	shift, lag, every time.Duration

	rows atomic.Int64 // aged so far, for the progress lines
}

// run ages from t (sent mails sent) until stop is closed, and returns what
// it did. The statement in progress when stop closes is finished, not
// cancelled: its rows count.
//
// Each statement ages the rows created from the previous statement's end
// less a lag (rows claimed then but sent late, up to a lag late, still
// qualify) to now less the lag: a range of about lag + every, however long
// the soak, rather than everything since the aging began, whose index
// entries (the aged rows' old versions, dead until vacuum) every statement
// would read again.
func (g *steadyAger) run(ctx context.Context, stop <-chan struct{}, t time.Duration, sent int64) (*aging, error) {
	a := &aging{Mode: agingSteady, At: t, Sent: sent, Shift: g.shift, Lag: g.lag, Every: g.every}
	from, err := g.dbNow(ctx) // rows created before the aging began are never aged
	if err != nil {
		return nil, err
	}
	end := from // of the range aged last
	tick := time.NewTicker(g.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return a, ctx.Err()
		case <-stop:
			return a, nil
		case <-tick.C:
		}
		start := time.Now()
		now, err := g.dbNow(ctx)
		if err != nil {
			return a, err
		}
		lo, hi := maxTime(from, end.Add(-g.lag)), now.Add(-g.lag)
		if !hi.After(lo) {
			continue // not a lag since the aging began
		}
		tag, err := g.pool.Exec(ctx, steadySQL, g.shift.Seconds(), lo, hi)
		if err != nil {
			return a, fmt.Errorf("age the rows sent before the last %s: %w", g.lag, err)
		}
		end = hi
		a.add(tag.RowsAffected(), time.Since(start))
		g.rows.Add(tag.RowsAffected())
	}
}

// dbNow is the database's clock, which created_at is written by.
func (g *steadyAger) dbNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := g.pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("aging: read the database's clock: %w", err)
	}
	return now, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// progress is the rows aged so far for a progress line, "" without a
// steady aging.
func (g *steadyAger) progress() string {
	if g == nil {
		return ""
	}
	return " " + thousands(g.rows.Load()) + " aged,"
}
