package idempotency

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

const statusesSQL = `SELECT message_id, status FROM postline_messages WHERE message_id = ANY($1::text[])`

// Statuses reads the status of each of messageIDs in one round trip and
// changes nothing: a dry run of a re-drive asks which rows a reset would
// take (failed, dead, or none). An ID without a row is absent from the map.
func (s *Store) Statuses(ctx context.Context, messageIDs []string) (map[string]Status, error) {
	out := make(map[string]Status, len(messageIDs))
	if len(messageIDs) == 0 {
		return out, nil
	}
	start := time.Now()
	rows, err := s.pool.Query(ctx, statusesSQL, messageIDs)
	if err == nil {
		var (
			id string
			st Status
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &st}, func() error {
			out[id] = st
			return nil
		})
	}
	s.observe(ctx, opStatuses, start, err)
	if err != nil {
		return nil, fmt.Errorf("read the status of %d messages: %w", len(messageIDs), err)
	}
	return out, nil
}

// Replayable reports whether ResetForReplay resets a row in status s:
// failed and dead rows (and IDs without a row, which have no status).
func (s Status) Replayable() bool { return s == StatusFailed || s == StatusDead }
