package circuit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// row is a circuit as stored, with its version.
type row struct {
	relay   string
	c       Circuit
	version int64
}

const columns = `provider, state, failures, cooldown, opened_at, open_until, probe_owner, probe_until, last_class, version, successes, window_start`

// ensureRows inserts a closed row for every relay that has none.
func ensureRows(ctx context.Context, pool *pgxpool.Pool, relays []string, cooldown time.Duration) error {
	_, err := pool.Exec(ctx, `INSERT INTO postline_circuits (provider, state, cooldown)
		SELECT p, 'closed', $2 FROM unnest($1::text[]) AS p
		ON CONFLICT (provider) DO NOTHING`, relays, cooldown)
	return err
}

// loadRows reads the rows of relays in one query.
func loadRows(ctx context.Context, pool *pgxpool.Pool, relays []string) ([]row, error) {
	rows, err := pool.Query(ctx, `SELECT `+columns+` FROM postline_circuits WHERE provider = ANY($1::text[])`, relays)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		out, _, err := scanRow(r)
		return out, err
	})
}

// scanRow scans the columns, and any extra destinations after them.
func scanRow(r pgx.Row, extra ...any) (row, []any, error) {
	var (
		out                             row
		state                           string
		openedAt, openUntil, probeUntil *time.Time
		windowStart                     *time.Time
		probeOwner, lastClass           *string
	)
	dest := append([]any{&out.relay, &state, &out.c.Failures, &out.c.Cooldown, &openedAt, &openUntil,
		&probeOwner, &probeUntil, &lastClass, &out.version, &out.c.Successes, &windowStart}, extra...)
	if err := r.Scan(dest...); err != nil {
		return row{}, nil, err
	}
	st, err := parseState(state)
	if err != nil {
		return row{}, nil, fmt.Errorf("relay %s: %w", out.relay, err)
	}
	out.c.State = st
	out.c.OpenedAt = deref(openedAt)
	out.c.OpenUntil = deref(openUntil)
	out.c.ProbeUntil = deref(probeUntil)
	out.c.ProbeOwner = deref(probeOwner)
	out.c.LastClass = deref(lastClass)
	out.c.WindowStart = deref(windowStart)
	return out, extra, nil
}

// errNoRow: the relay's row is gone (New creates it; an operator may have
// deleted it).
var errNoRow = errors.New("no row in postline_circuits")

// apply locks the relay's row, applies ev with the database clock and
// writes the result if it changed. It returns the circuit before and after,
// and the row's version after.
func apply(ctx context.Context, pool *pgxpool.Pool, relay string, ev Event, p Policy) (before, after row, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var now time.Time
		// clock_timestamp, not now(): the time the row lock was granted
		// (re-evaluated after a concurrent update), not the transaction's start.
		r, _, err := scanRow(tx.QueryRow(ctx, `SELECT `+columns+`, clock_timestamp() FROM postline_circuits
			WHERE provider = $1 FOR UPDATE`, relay), &now)
		if errors.Is(err, pgx.ErrNoRows) {
			return errNoRow
		}
		if err != nil {
			return err
		}
		before, after = r, r
		next := Next(r.c, ev, now, p)
		if next.Equal(r.c) {
			return nil
		}
		after.c = next
		return tx.QueryRow(ctx, `UPDATE postline_circuits SET state = $2, failures = $3, cooldown = $4,
			opened_at = $5, open_until = $6, probe_owner = $7, probe_until = $8, last_class = $9,
			successes = $10, window_start = $11, updated_at = clock_timestamp(), version = version + 1
			WHERE provider = $1 RETURNING version`,
			relay, next.State.String(), next.Failures, next.Cooldown, nullTime(next.OpenedAt),
			nullTime(next.OpenUntil), nullString(next.ProbeOwner), nullTime(next.ProbeUntil),
			nullString(next.LastClass), next.Successes, nullTime(next.WindowStart)).Scan(&after.version)
	})
	return before, after, err
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
