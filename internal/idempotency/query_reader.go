package idempotency

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Reader answers operators' questions about the rows (postctl status and
// audit). It only reads: it takes no leases, changes no row and needs no
// owner, so it is safe to point at a live database. A Reader is safe for
// concurrent use.
type Reader struct {
	pool *pgxpool.Pool
}

// NewReader returns a Reader on pool, which must already be migrated.
func NewReader(pool *pgxpool.Pool) (*Reader, error) {
	if pool == nil {
		return nil, errors.New("idempotency reader: nil pool")
	}
	return &Reader{pool: pool}, nil
}

// LookupResult is the answer of Reader.Lookup.
type LookupResult struct {
	// At is the database's clock when the rows were read: lease expiry and
	// ages compare against it, as the workers' claims do.
	At time.Time
	// Rows are the rows found, in the order the IDs were asked for.
	Rows []Row
	// Missing are the IDs without a row, in the order asked for.
	Missing []string
}

// lookupSQL reads one row per asked ID, in the order asked, with NULL
// columns for an ID without a row.
const lookupSQL = `
SELECT i.id, now(), m.message_id IS NOT NULL, COALESCE(m.status, ''), COALESCE(m.version, 0),
	COALESCE(m.attempt, 0), m.payload_hash, COALESCE(m.lease_owner, ''), m.lease_expires_at,
	COALESCE(m.provider, ''), COALESCE(m.error_class, ''), COALESCE(m.last_error, ''),
	COALESCE(m.priority, ''), COALESCE(m.tenant, ''), COALESCE(m.conflicts, 0), m.enqueued_at,
	m.created_at, m.updated_at, m.sent_at, c.payload, c.record_key, c.record_headers,
	m.first_seen, m.replayed_at
FROM unnest($1::text[]) WITH ORDINALITY AS i(id, ord)
LEFT JOIN postline_messages m ON m.message_id = i.id
LEFT JOIN postline_message_records c ON c.message_id = m.message_id
ORDER BY i.ord`

// Lookup reads the rows of ids in one round trip. A repeated ID is looked
// up once. No row is not an error: the ID is listed in Missing.
func (r *Reader) Lookup(ctx context.Context, ids []string) (LookupResult, error) {
	var out LookupResult
	ids = uniqueIDs(ids)
	if len(ids) == 0 {
		err := r.pool.QueryRow(ctx, "SELECT now()").Scan(&out.At)
		if err != nil {
			return out, fmt.Errorf("lookup: read the database clock: %w", err)
		}
		return out, nil
	}
	rows, err := r.pool.Query(ctx, lookupSQL, ids)
	if err != nil {
		return out, fmt.Errorf("lookup %d message IDs: %w", len(ids), err)
	}
	var (
		id                                                    string
		found                                                 bool
		row                                                   Row
		lease, created, updated, enqueued, sent, seen, replay pgtype.Timestamptz
		headers                                               []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &out.At, &found, &row.Status, &row.Version, &row.Attempt,
		&row.PayloadHash, &row.LeaseOwner, &lease, &row.Provider, &row.ErrorClass, &row.LastError,
		&row.Priority, &row.Tenant, &row.Conflicts, &enqueued, &created, &updated, &sent,
		&row.Payload, &row.RecordKey, &headers, &seen, &replay}, func() error {
		if !found {
			out.Missing = append(out.Missing, id)
			return nil
		}
		row.MessageID = id
		row.LeaseExpiresAt, row.EnqueuedAt, row.SentAt = timeOf(lease), timeOf(enqueued), timeOf(sent)
		row.CreatedAt, row.UpdatedAt = timeOf(created), timeOf(updated)
		row.FirstSeen, row.ReplayedAt = timeOf(seen), timeOf(replay)
		h, err := parseTraceHeaders(headers)
		if err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		row.TraceHeaders = h
		out.Rows = append(out.Rows, row)
		row, headers = Row{}, nil
		return nil
	})
	if err != nil {
		return LookupResult{}, fmt.Errorf("lookup %d message IDs: %w", len(ids), err)
	}
	return out, nil
}

// missingBatch is how many IDs one round trip of Reader.Missing checks:
// large enough that a million published IDs take a hundred round trips,
// small enough that one array parameter stays a few hundred kilobytes.
const missingBatch = 10_000

// Missing returns the IDs of ids that have no row, in the order given, each
// once. It reads only the primary key, missingBatch IDs per round trip.
func (r *Reader) Missing(ctx context.Context, ids []string) ([]string, error) {
	ids = uniqueIDs(ids)
	var missing []string
	for chunk := range slices.Chunk(ids, missingBatch) {
		rows, err := r.pool.Query(ctx, `
SELECT i.id FROM unnest($1::text[]) WITH ORDINALITY AS i(id, ord)
WHERE NOT EXISTS (SELECT 1 FROM postline_messages m WHERE m.message_id = i.id)
ORDER BY i.ord`, chunk)
		if err != nil {
			return nil, fmt.Errorf("check %d message IDs for rows: %w", len(chunk), err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("check %d message IDs for rows: %w", len(chunk), err)
		}
		missing = append(missing, got...)
	}
	return missing, nil
}

// Defaults of AuditOptions.
const (
	// DefaultAuditLeaseGrace is longer than the reaper's pass interval plus
	// its grace (30s + 10s), so a row the reaper is about to hand back is
	// not reported.
	DefaultAuditLeaseGrace = time.Minute
	// DefaultAuditMaxAge is the longest default per-priority max age of
	// the worker (bulk: 48h): an older row in flight should be dead.
	DefaultAuditMaxAge = 48 * time.Hour
	// DefaultAuditLimit is how many problem rows an audit lists.
	DefaultAuditLimit = 100
)

// AuditOptions configures Reader.Audit.
type AuditOptions struct {
	// LeaseGrace is how long past its lease a sending row may stay before
	// it counts as stuck. Defaults to DefaultAuditLeaseGrace (1m).
	LeaseGrace time.Duration
	// MaxAge is how long after its first publication (reset by a replay;
	// the row's creation when unknown) a row may stay in flight
	// (pending, sending, retrying) before it counts as too old. Defaults to
	// DefaultAuditMaxAge (48h).
	MaxAge time.Duration
	// Limit is how many stuck and how many too-old rows are listed (all
	// are counted). Defaults to DefaultAuditLimit (100).
	Limit int
}

// WithDefaults returns o with zero fields set to their defaults.
func (o AuditOptions) WithDefaults() AuditOptions {
	o.LeaseGrace = cmp.Or(o.LeaseGrace, DefaultAuditLeaseGrace)
	o.MaxAge = cmp.Or(o.MaxAge, DefaultAuditMaxAge)
	o.Limit = cmp.Or(o.Limit, DefaultAuditLimit)
	return o
}

// Validate reports the first invalid field of o (after WithDefaults).
func (o AuditOptions) Validate() error {
	switch {
	case o.LeaseGrace < 0:
		return fmt.Errorf("audit options: LeaseGrace %v is negative", o.LeaseGrace)
	case o.MaxAge < 0:
		return fmt.Errorf("audit options: MaxAge %v is negative", o.MaxAge)
	case o.Limit < 1:
		return fmt.Errorf("audit options: Limit %d is below 1", o.Limit)
	}
	return nil
}

// InFlight is a row that is not terminal, as an audit lists it.
type InFlight struct {
	MessageID string
	Status    Status
	Attempt   int
	// Age is the time since the row's first publication (see
	// AuditOptions.MaxAge), on the database's clock.
	Age time.Duration
	// LeaseOwner and LeaseExpiresAt are set while the row is sending.
	LeaseOwner     string
	LeaseExpiresAt time.Time
	// PastLease is how long ago the lease expired; zero when it has not.
	PastLease  time.Duration
	ErrorClass string
	UpdatedAt  time.Time
}

// AuditReport is the answer of Reader.Audit. It is one consistent snapshot
// of the table.
type AuditReport struct {
	// At is the database's clock of the snapshot.
	At time.Time
	// Counts has every status, with zero when it has no rows.
	Counts map[Status]int64
	// Oldest is the in-flight row first published longest ago; nil when
	// nothing is in flight.
	Oldest *InFlight
	// StuckCount counts rows in sending whose lease expired more than
	// LeaseGrace ago; Stuck lists up to Limit of them, longest expired
	// first.
	StuckCount int64
	Stuck      []InFlight
	// TooOldCount counts in-flight rows older than MaxAge; TooOld lists up
	// to Limit of them, oldest first.
	TooOldCount int64
	TooOld      []InFlight
}

// Total is the number of rows.
func (a AuditReport) Total() int64 {
	var n int64
	for _, c := range a.Counts {
		n += c
	}
	return n
}

// InFlightCount is the number of rows that are not terminal.
func (a AuditReport) InFlightCount() int64 {
	var n int64
	for st, c := range a.Counts {
		if !st.Terminal() {
			n += c
		}
	}
	return n
}

// inFlightColumns are the columns scanned by scanInFlight. A row's age
// counts from first_seen, which a replay resets.
const inFlightColumns = `message_id, status, attempt, COALESCE(lease_owner, ''), lease_expires_at,
	now() - COALESCE(first_seen, created_at),
	CASE WHEN status = 'sending' AND lease_expires_at < now() THEN now() - lease_expires_at END,
	COALESCE(error_class, ''), updated_at`

// The audit's statements. The stuck ones take LeaseGrace and the too-old
// ones MaxAge, in seconds, as $1; the listing ones the limit as $2.
const (
	auditCountsSQL = `SELECT status, count(*) FROM postline_messages GROUP BY status`
	auditOldestSQL = `SELECT ` + inFlightColumns + ` FROM postline_messages
WHERE status IN ('pending', 'sending', 'retrying')
ORDER BY COALESCE(first_seen, created_at), message_id LIMIT 1`
	auditStuckCountSQL = `SELECT count(*) FROM postline_messages
WHERE status = 'sending' AND lease_expires_at < now() - make_interval(secs => $1)`
	auditStuckSQL = `SELECT ` + inFlightColumns + ` FROM postline_messages
WHERE status = 'sending' AND lease_expires_at < now() - make_interval(secs => $1)
ORDER BY lease_expires_at, message_id LIMIT $2`
	auditTooOldCountSQL = `SELECT count(*) FROM postline_messages
WHERE status IN ('pending', 'sending', 'retrying')
	AND COALESCE(first_seen, created_at) < now() - make_interval(secs => $1)`
	auditTooOldSQL = `SELECT ` + inFlightColumns + ` FROM postline_messages
WHERE status IN ('pending', 'sending', 'retrying')
	AND COALESCE(first_seen, created_at) < now() - make_interval(secs => $1)
ORDER BY COALESCE(first_seen, created_at), message_id LIMIT $2`
)

// Audit counts the rows per status and finds the oldest in-flight row, the
// rows stuck past their lease and the rows in flight for too long, in one
// read-only, repeatable-read transaction (one batch), so the numbers agree
// with each other.
func (r *Reader) Audit(ctx context.Context, opts AuditOptions) (AuditReport, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return AuditReport{}, err
	}
	var rep AuditReport
	err := pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var (
			b      pgx.Batch
			oldest []InFlight
		)
		rep.Counts = make(map[Status]int64, len(Statuses))
		for _, st := range Statuses {
			rep.Counts[st] = 0
		}
		b.Queue(auditCountsSQL).Query(func(rows pgx.Rows) error {
			var (
				st Status
				n  int64
			)
			_, err := pgx.ForEachRow(rows, []any{&st, &n}, func() error {
				rep.Counts[st] = n
				return nil
			})
			return err
		})
		b.Queue("SELECT now()").QueryRow(func(row pgx.Row) error { return row.Scan(&rep.At) })
		b.Queue(auditOldestSQL).Query(func(rows pgx.Rows) (err error) {
			oldest, err = scanInFlight(rows)
			return err
		})
		grace, maxAge := opts.LeaseGrace.Seconds(), opts.MaxAge.Seconds()
		b.Queue(auditStuckCountSQL, grace).QueryRow(func(row pgx.Row) error { return row.Scan(&rep.StuckCount) })
		b.Queue(auditStuckSQL, grace, opts.Limit).Query(func(rows pgx.Rows) (err error) {
			rep.Stuck, err = scanInFlight(rows)
			return err
		})
		b.Queue(auditTooOldCountSQL, maxAge).QueryRow(func(row pgx.Row) error { return row.Scan(&rep.TooOldCount) })
		b.Queue(auditTooOldSQL, maxAge, opts.Limit).Query(func(rows pgx.Rows) (err error) {
			rep.TooOld, err = scanInFlight(rows)
			return err
		})
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return err
		}
		if len(oldest) > 0 {
			rep.Oldest = &oldest[0]
		}
		return nil
	})
	if err != nil {
		return AuditReport{}, fmt.Errorf("audit rows: %w", err)
	}
	return rep, nil
}

// scanInFlight reads rows of inFlightColumns.
func scanInFlight(rows pgx.Rows) ([]InFlight, error) {
	var (
		out       []InFlight
		f         InFlight
		lease     pgtype.Timestamptz
		age, past pgtype.Interval
	)
	_, err := pgx.ForEachRow(rows, []any{&f.MessageID, &f.Status, &f.Attempt, &f.LeaseOwner, &lease,
		&age, &past, &f.ErrorClass, &f.UpdatedAt}, func() error {
		f.LeaseExpiresAt, f.Age, f.PastLease = timeOf(lease), durationOf(age), durationOf(past)
		out = append(out, f)
		f = InFlight{}
		return nil
	})
	return out, err
}

// durationOf converts a PostgreSQL interval of a clock difference (days and
// microseconds, no months) to a duration; NULL is zero.
func durationOf(iv pgtype.Interval) time.Duration {
	if !iv.Valid {
		return 0
	}
	days := time.Duration(iv.Days) + 30*time.Duration(iv.Months)
	return days*24*time.Hour + time.Duration(iv.Microseconds)*time.Microsecond
}

// uniqueIDs returns ids without repeats and empty strings, in first-seen
// order.
func uniqueIDs(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if id != "" && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
