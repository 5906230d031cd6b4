package idempotency

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// OutboxEntry is what a transition Resolve made still owes: its event to
// publish and its suppression entry to add, as the caller encoded them
// (Resolution.Effect). The entry is written in the transaction of the
// compare-and-set that made the transition and deleted (OutboxDone) once its
// effects are performed, so a transition whose effects were cut short (the
// process died, Kafka failed) keeps its entry until someone performs them.
type OutboxEntry struct {
	// EventID is the transition's event ID, the entry's key.
	EventID string
	// MessageID is the mail the transition is about.
	MessageID string
	// Body is Resolution.Effect, byte for byte.
	Body []byte
	// CreatedAt is when the transition was made, on the database's clock.
	CreatedAt time.Time
}

const outboxSQL = `
SELECT event_id, message_id, body, created_at FROM postline_event_outbox
WHERE created_at < now() - make_interval(secs => $1)
ORDER BY created_at, event_id
LIMIT $2`

// Outbox returns up to limit entries written more than minAge ago on the
// database's clock, oldest first: the ones whose writer should have
// performed and deleted them by now.
func (s *Store) Outbox(ctx context.Context, minAge time.Duration, limit int) ([]OutboxEntry, error) {
	if minAge < 0 {
		return nil, fmt.Errorf("outbox: negative age %v", minAge)
	}
	if limit < 1 {
		return nil, fmt.Errorf("outbox: limit %d is below 1", limit)
	}
	start := time.Now()
	rows, err := s.pool.Query(ctx, outboxSQL, minAge.Seconds(), limit)
	var out []OutboxEntry
	if err == nil {
		var e OutboxEntry
		_, err = pgx.ForEachRow(rows, []any{&e.EventID, &e.MessageID, &e.Body, &e.CreatedAt}, func() error {
			out = append(out, e)
			e = OutboxEntry{}
			return nil
		})
	}
	s.observe(ctx, opOutbox, start, err)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	return out, nil
}

// OutboxDone deletes the entries of eventIDs, whose effects were performed,
// in one round trip. IDs without an entry are ignored: two writers
// performing one entry both delete it.
func (s *Store) OutboxDone(ctx context.Context, eventIDs []string) error {
	if len(eventIDs) == 0 {
		return nil
	}
	start := time.Now()
	_, err := s.pool.Exec(ctx, `DELETE FROM postline_event_outbox WHERE event_id = ANY($1::text[])`, eventIDs)
	s.observe(ctx, opOutbox, start, err)
	if err != nil {
		return fmt.Errorf("outbox: delete %d entries: %w", len(eventIDs), err)
	}
	return nil
}
