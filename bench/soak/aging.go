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
	// agingSteady installs, when -age-from of the jobs are sent, triggers
	// that write the timestamps of every row inserted after, and of every
	// row marked sent, back by a shift just short of the retention: a row
	// becomes purgeable -age-lag after it was sent, and the purge deletes,
	// each second, about what was sent a second: production's steady
	// state, where it deletes what was sent one retention before.
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
// aged Rows rows in Took; the steady aging's triggers took Took to
// install and then run inside the workers' statements. Either is load the
// harness puts on PostgreSQL that production does not have.
type aging struct {
	Mode       string
	At         time.Duration
	Sent       int64
	Rows       int64         // burst only: the rows aged
	Took       time.Duration // the burst's statement, or installing the triggers
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

// steadyTriggersSQL installs the steady aging, for a shift of %[1]d
// seconds. Rows written after it get their timestamps as if they had been
// written a shift earlier: created_at as the row is inserted (the claim),
// updated_at whenever a statement leaves it sent (the outcome). Only the
// triggers run: no statement of the harness touches the rows, so every row
// is written as often as in production, and the outcome's update stays HOT
// (updated_at is in no index; created_at, which is, is set before the
// row's first index entry). What production does not have is a PL/pgSQL
// call per row inserted and per row sent.
const steadyTriggersSQL = `
CREATE FUNCTION soak_age_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.created_at := NEW.created_at - make_interval(secs => %[1]d);
	RETURN NEW;
END $$;
CREATE FUNCTION soak_age_sent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.updated_at := NEW.updated_at - make_interval(secs => %[1]d);
	RETURN NEW;
END $$;
CREATE TRIGGER soak_age_created BEFORE INSERT ON postline_messages
	FOR EACH ROW EXECUTE FUNCTION soak_age_created();
CREATE TRIGGER soak_age_sent BEFORE UPDATE ON postline_messages
	FOR EACH ROW WHEN (NEW.status = 'sent') EXECUTE FUNCTION soak_age_sent();`

// steady installs the steady aging's triggers on the pool's schema at t,
// with sent mails sent, for rows to become purgeable lag after they are
// sent: their timestamps move back by shift = retention - lag. Rows
// written before keep theirs: they stand for the rows still inside the
// retention.
func steady(ctx context.Context, pool *pgxpool.Pool, shift, lag, t time.Duration, sent int64) (*aging, error) {
	a := &aging{Mode: agingSteady, At: t, Sent: sent, Shift: shift, Lag: lag}
	start := time.Now()
	// One transaction: the triggers take effect together.
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("install the aging triggers: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, fmt.Sprintf(steadyTriggersSQL, int64(shift/time.Second))); err != nil {
		return nil, fmt.Errorf("install the aging triggers: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("install the aging triggers: %w", err)
	}
	a.Took = time.Since(start)
	return a, nil
}
