package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Row is a message's row as stored. NULL columns read as zero values.
type Row struct {
	MessageID      string
	Status         Status
	Version        int64
	Attempt        int
	PayloadHash    []byte
	LeaseOwner     string
	LeaseExpiresAt time.Time
	Provider       string
	ErrorClass     string
	LastError      string
	Priority       string
	Tenant         string
	Conflicts      int
	EnqueuedAt     time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	SentAt         time.Time
	// Payload, RecordKey and TraceHeaders are the row's record copy (see
	// ClaimRequest.Payload and Reset.Payload); nil when it has none.
	Payload      []byte
	RecordKey    []byte
	TraceHeaders map[string]string
	// FirstSeen is the job's first publication (reset by a replay).
	FirstSeen time.Time
	// ReplayedAt is when postctl dlq replay last reset the row; zero when
	// never.
	ReplayedAt time.Time
}

const getSQL = `
SELECT message_id, status, version, attempt, payload_hash,
	COALESCE(lease_owner, ''), lease_expires_at, COALESCE(provider, ''),
	COALESCE(error_class, ''), COALESCE(last_error, ''), COALESCE(priority, ''),
	COALESCE(tenant, ''), conflicts, enqueued_at, created_at, updated_at, sent_at,
	c.payload, c.record_key, c.record_headers, first_seen, replayed_at
FROM postline_messages m LEFT JOIN postline_message_records c USING (message_id)
WHERE message_id = $1`

// Get returns the row of messageID, or an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, messageID string) (Row, error) {
	var (
		r                                         Row
		lease, enqueued, sentTime, seen, replayed pgtype.Timestamptz
		headers                                   []byte
	)
	start := time.Now()
	err := s.pool.QueryRow(ctx, getSQL, messageID).Scan(&r.MessageID, &r.Status, &r.Version, &r.Attempt,
		&r.PayloadHash, &r.LeaseOwner, &lease, &r.Provider, &r.ErrorClass, &r.LastError, &r.Priority,
		&r.Tenant, &r.Conflicts, &enqueued, &r.CreatedAt, &r.UpdatedAt, &sentTime,
		&r.Payload, &r.RecordKey, &headers, &seen, &replayed)
	if errors.Is(err, pgx.ErrNoRows) {
		s.observe(ctx, opGet, start, nil)
		return Row{}, fmt.Errorf("get %s: %w", messageID, ErrNotFound)
	}
	s.observe(ctx, opGet, start, err)
	if err != nil {
		return Row{}, fmt.Errorf("get %s: %w", messageID, err)
	}
	r.LeaseExpiresAt, r.EnqueuedAt, r.SentAt = timeOf(lease), timeOf(enqueued), timeOf(sentTime)
	r.FirstSeen, r.ReplayedAt = timeOf(seen), timeOf(replayed)
	if r.TraceHeaders, err = parseTraceHeaders(headers); err != nil {
		return Row{}, fmt.Errorf("get %s: %w", messageID, err)
	}
	return r, nil
}

// CountByStatus returns the number of rows in each status; every status is
// present in the map, with zero when it has no rows.
func (s *Store) CountByStatus(ctx context.Context) (map[Status]int64, error) {
	start := time.Now()
	rows, err := s.pool.Query(ctx, "SELECT status, count(*) FROM postline_messages GROUP BY status")
	counts := make(map[Status]int64, len(Statuses))
	for _, st := range Statuses {
		counts[st] = 0
	}
	if err == nil {
		var (
			st Status
			n  int64
		)
		_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error {
			counts[st] = n
			return nil
		})
	}
	s.observe(ctx, opCountByStatus, start, err)
	if err != nil {
		return nil, fmt.Errorf("count rows by status: %w", err)
	}
	return counts, nil
}
