package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The aging modes (-aging): how the soak simulates the retention passing,
// so that the workers' purge has rows to delete in a run of minutes.
const (
	// agingSteady moves, when -age-from of the jobs are sent, the defaults
	// the store writes the rows' timestamps from (created_at as a row is
	// inserted, updated_at with every outcome) back by a shift just short
	// of the retention: a row becomes purgeable -age-lag after it was
	// sent, and the purge deletes, each second, about what was sent a
	// second: production's steady state, where it deletes what was sent
	// one retention before.
	agingSteady = "steady"
	// agingBurst ages every row sent so far at once, when -age-from of the
	// jobs are sent: the purge then deletes them in a burst, at its fastest,
	// while the rest is delivered. Production never sees that burst.
	agingBurst = "burst"
	// agingOff ages nothing: nothing is purged and the table only grows.
	agingOff = "off"
)

// defaultShift is how far the aging moves a row's timestamps back unless
// -age-shift says: the steady aging's rows become purgeable lag after they
// were sent; the burst moves the rows it ages past the retention, by a
// margin that covers the statement. A shift that leaves the rows inside
// the retention (-age-shift 30m) ages rows the purge never deletes: the
// aging's own cost, without the purge's.
func defaultShift(mode string, retention, lag time.Duration) time.Duration {
	if mode == agingSteady {
		return retention - lag
	}
	return retention + time.Minute
}

// burstSQL moves every sent row's timestamps back past the retention, in
// one statement. Both columns move, so a purge that selects by either
// finds them.
const burstSQL = `UPDATE postline_messages
	SET created_at = created_at - make_interval(secs => $1), updated_at = updated_at - make_interval(secs => $1)
	WHERE status = 'sent'`

// aging is what the soak's simulated passing of the retention did and
// cost: it began at t = At with Sent mails sent. The burst's statement
// aged Rows rows in Took, load the harness puts on PostgreSQL that
// production does not have; the steady aging's defaults took Took to
// install, and the workers' own statements then write the shifted
// timestamps.
type aging struct {
	Mode       string
	At         time.Duration
	Sent       int64
	Rows       int64         // burst only: the rows aged
	Took       time.Duration // the burst's statement, or installing the defaults
	Shift      time.Duration // how far the timestamps moved back
	Lag        time.Duration // steady only: how long after it was sent a row became purgeable
	BytesAfter int64         // burst only: every table of the schema just after the update
}

// burst runs burstSQL; it starts at sent mails and t.
func burst(ctx context.Context, pool *pgxpool.Pool, shift, t time.Duration, sent int64) (*aging, error) {
	a := &aging{Mode: agingBurst, At: t, Sent: sent, Shift: shift}
	start := time.Now()
	tag, err := pool.Exec(ctx, burstSQL, shift.Seconds())
	if err != nil {
		return nil, fmt.Errorf("age the sent rows: %w", err)
	}
	a.Rows, a.Took = tag.RowsAffected(), time.Since(start)
	tables, err := readTableStats(ctx, pool)
	if err != nil {
		return nil, err
	}
	a.BytesAfter = tables.AllBytes
	return a, nil
}

// steadyDefaultsSQL installs the steady aging, for a shift of %[1]d
// seconds: it moves the defaults of the row's two timestamps back. The
// store writes both from their defaults (created_at as the claim inserts
// the row, updated_at with every outcome), so rows written after it get
// their timestamps as if they had been written a shift earlier, and no
// statement of the harness touches a row: every row is written as often as
// in production, by the same statements, and the outcome's update stays
// HOT (updated_at is in no index; created_at, which is, is set before the
// row's first index entry). Evaluating the shifted default costs what
// now() does; the triggers this replaced cost a PL/pgSQL call per row
// inserted and per row sent (BenchmarkClaimRecord: 2.2 µs of PostgreSQL
// CPU a mail), in the last window only.
const steadyDefaultsSQL = `
ALTER TABLE postline_messages
	ALTER COLUMN created_at SET DEFAULT now() - make_interval(secs => %[1]d),
	ALTER COLUMN updated_at SET DEFAULT now() - make_interval(secs => %[1]d)`

// steady installs the steady aging's defaults on the pool's schema at t,
// with sent mails sent, for rows to become purgeable lag after they are
// sent: their timestamps move back by shift = retention - lag. Rows
// written before keep theirs: they stand for the rows still inside the
// retention. The statement takes the table's lock for a moment: the
// statements of the workers running then finish first, and those that
// come meanwhile wait (Took).
func steady(ctx context.Context, pool *pgxpool.Pool, shift, lag, t time.Duration, sent int64) (*aging, error) {
	a := &aging{Mode: agingSteady, At: t, Sent: sent, Shift: shift, Lag: lag}
	start := time.Now()
	if _, err := pool.Exec(ctx, fmt.Sprintf(steadyDefaultsSQL, int64(shift/time.Second))); err != nil {
		return nil, fmt.Errorf("install the aging defaults: %w", err)
	}
	a.Took = time.Since(start)
	return a, nil
}
