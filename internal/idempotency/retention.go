package idempotency

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// purgeSQL scans the rows by created_at, the one indexed column besides the
// key (an index on status or updated_at would keep status updates from
// being HOT, see migration 0011): a row's fate is never older than the
// row, so every row due was created before the cut-off. The rows created
// before it that are not due yet (in flight, or a fate recorded
// recently) are read again by every purge; they are few.
//
// The delete finds the rows it locked by their ctid, a TID scan, rather
// than by message_id, a descent of the primary key per row: a third of
// the statement on an idle database (1,000 rows: 29 to 19 ms). A locked
// row cannot be pruned, so its ctid names it until the statement ends; the
// message_id and the conditions are checked again on the row deleted, so a
// row updated between the snapshot and the lock is deleted only if still
// due, or skipped for the next purge, never deleted wrongly.
const purgeSQL = `
WITH doomed AS (
	SELECT ctid, message_id FROM postline_messages
	WHERE created_at < now() - make_interval(secs => $1)
		AND status IN ('sent', 'failed', 'dead', 'suppressed') AND updated_at < now() - make_interval(secs => $1)
		AND NOT (confirm_by IS NOT NULL AND confirmation IS NULL)
	ORDER BY created_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), gone AS (
	DELETE FROM postline_messages m USING doomed
	WHERE m.ctid = doomed.ctid AND m.message_id = doomed.message_id
		AND m.status IN ('sent', 'failed', 'dead', 'suppressed') AND m.updated_at < now() - make_interval(secs => $1)
		AND NOT (m.confirm_by IS NOT NULL AND m.confirmation IS NULL)
	RETURNING m.message_id
), recipients AS (
	-- No foreign key cascades to them or to the record copies (migrations
	-- 0012 and 0013): a cascade is a trigger and a query per row deleted.
	DELETE FROM postline_recipients r USING gone WHERE r.message_id = gone.message_id
), copies AS (
	-- A terminal row's copy went with its fate; this only finds one a
	-- caller left behind, by a probe of the copies' small primary key. The
	-- table is empty unless a replay or a caller stored copies, and then
	-- the one-time check skips a probe per row deleted.
	DELETE FROM postline_message_records c USING gone WHERE c.message_id = gone.message_id
		AND EXISTS (SELECT FROM postline_message_records)
)
SELECT count(*) FROM gone`

// purgeTurnSQL makes purge statements take turns across the fleet: every
// worker's reaper purges, and two statements at once cost 1.37x the
// PostgreSQL CPU per row of one (BenchmarkPurge), each stepping over the
// rows the other has locked and working on the same pages. It is a
// statement of its own, before the purge, so that the purge's snapshot is
// taken after the previous turn committed and does not step over the rows
// that one deleted either. The key is the table's own (its OID), so schemas
// of one database do not wait for each other; the lock ends with the
// transaction.
const purgeTurnSQL = `SELECT pg_advisory_xact_lock('postline_messages'::regclass::oid::int, 1)`

// Purge deletes up to limit terminal rows (sent, failed, dead, suppressed),
// with their recipients and any record copy, whose fate
// was recorded more than olderThan ago on the database's clock, the oldest
// rows (by creation) first, in one statement after its turn (purgeTurnSQL),
// and returns how many it deleted. Rows in flight
// are never deleted, whatever their age, nor mail still awaiting its
// confirmation (the sweep that marks it unconfirmed comes first). A purge
// waits for another's statement to commit, and its round trip metric
// includes that wait. Rows locked by another statement (a replay resetting them) are
// skipped rather than waited for, so a purge cannot deadlock. A
// duplicate of a purged message is a new message: olderThan is the dedupe
// window.
func (s *Store) Purge(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("purge: retention %v must be positive", olderThan)
	}
	if limit < 1 {
		return 0, fmt.Errorf("purge: limit %d is below 1", limit)
	}
	start := time.Now()
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, purgeTurnSQL); err != nil {
			return fmt.Errorf("wait for the purge's turn: %w", err)
		}
		return tx.QueryRow(ctx, purgeSQL, olderThan.Seconds(), limit).Scan(&n)
	})
	s.observe(ctx, opPurge, start, err)
	if err != nil {
		return 0, fmt.Errorf("purge terminal rows older than %v: %w", olderThan, err)
	}
	return n, nil
}
