package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/relaystate"
)

// pgRelays reads the breakers and relay states from PostgreSQL.
type pgRelays struct {
	store *relaystate.Store
	pool  *pgxpool.Pool
}

func (p pgRelays) states(ctx context.Context) (relaystate.Listing, error) {
	return p.store.List(ctx)
}

// breakers reads every relay's circuit breaker. It only reads:
// internal/circuit owns the rows and the rules, and its Breakers would
// create rows for the relays it is given.
func (p pgRelays) breakers(ctx context.Context) ([]BreakerRow, error) {
	rows, err := p.pool.Query(ctx, `SELECT provider, state, failures, opened_at, open_until, probe_owner, probe_until, last_class
		FROM postline_circuits ORDER BY provider`)
	if err != nil {
		return nil, fmt.Errorf("read postline_circuits: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (BreakerRow, error) {
		var (
			b                               BreakerRow
			openedAt, openUntil, probeUntil *time.Time
			probeOwner, lastClass           *string
		)
		err := r.Scan(&b.Provider, &b.State, &b.Failures, &openedAt, &openUntil, &probeOwner, &probeUntil, &lastClass)
		b.OpenedAt, b.OpenUntil, b.ProbeUntil = deref(openedAt), deref(openUntil), deref(probeUntil)
		b.ProbeOwner, b.LastClass = deref(probeOwner), deref(lastClass)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("read postline_circuits: %w", err)
	}
	return out, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
