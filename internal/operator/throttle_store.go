package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// blocked returns how long the most blocked of keys stays blocked at now;
// 0 when none is.
func (s *Store) blocked(ctx context.Context, keys []throttleKey, now time.Time) (time.Duration, error) {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.key
	}
	var until *time.Time
	err := s.db.QueryRow(ctx, `SELECT max(blocked_until) FROM postline_console_login_failures WHERE key = ANY($1)`,
		names).Scan(&until)
	if err != nil {
		return 0, fmt.Errorf("operator login: read throttle: %w", err)
	}
	if until == nil || !until.After(now) {
		return 0, nil
	}
	return until.Sub(now), nil
}

// fail counts a wrong password against each key and blocks it for its
// schedule's wait. The count and the block are one transaction per login,
// so replicas failing the same key at once each add one.
func (s *Store) fail(ctx context.Context, keys []throttleKey, now time.Time) error {
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		for _, k := range keys {
			var failures int
			err := tx.QueryRow(ctx, `INSERT INTO postline_console_login_failures AS f (key, failures, last_failure_at, blocked_until)
				VALUES ($1, 1, $2, $2)
				ON CONFLICT (key) DO UPDATE SET
					failures = CASE WHEN f.last_failure_at < $3 THEN 1 ELSE f.failures + 1 END,
					last_failure_at = $2
				RETURNING failures`, k.key, now, now.Add(-k.schedule.Forget)).Scan(&failures)
			if err != nil {
				return err
			}
			if wait := k.schedule.Wait(failures); wait > 0 {
				if _, err := tx.Exec(ctx, `UPDATE postline_console_login_failures SET blocked_until = $2 WHERE key = $1`,
					k.key, now.Add(wait)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("operator login: count failure: %w", err)
	}
	return nil
}
