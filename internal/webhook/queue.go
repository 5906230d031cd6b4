package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/event"
)

// Queue is the durable side of webhook delivery, in PostgreSQL: per
// endpoint, the events waiting for another attempt and those given up on
// (dead letters), and each endpoint's health and whether it is disabled.
// The dispatcher and postctl both read and write it through these methods.
// It is safe for concurrent use by many dispatcher replicas: claims skip
// rows another replica holds.
type Queue struct {
	pool *pgxpool.Pool
}

// NewQueue returns the queue on pool, whose schema has the migrations
// applied.
func NewQueue(pool *pgxpool.Pool) *Queue { return &Queue{pool: pool} }

// Row statuses.
const (
	statusPending = "pending"
	statusDead    = "dead"
)

// Pending is one event waiting for (or given up on by) one endpoint.
type Pending struct {
	Endpoint string
	EventID  string
	Type     event.Type
	Tenant   string
	// EventAt is the event's own time.
	EventAt time.Time
	// Payload is the event exactly as published: what is signed and sent.
	Payload []byte
	// Topic, Partition and Offset locate the record it came from, for a
	// dead letter; Offset is -1 for an event queued by a replay.
	Topic     string
	Partition int
	Offset    int64
	// Attempts made so far.
	Attempts int
	// FirstAt is when the first attempt was made or due: the horizon
	// counts from it. NextAt is when the next is due.
	FirstAt, NextAt time.Time
	// LastStatus is the HTTP status of the last attempt, 0 when it got no
	// reply; LastError says what went wrong, never with the URL.
	LastStatus int
	LastError  string
}

const pendingColumns = `endpoint, event_id, event_type, tenant, event_at, payload, src_topic, src_partition,
	src_offset, attempts, first_at, next_at, last_status, last_error`

// claimedColumns are pendingColumns of the claim's updated rows.
const claimedColumns = `q.endpoint, q.event_id, q.event_type, q.tenant, q.event_at, q.payload, q.src_topic,
	q.src_partition, q.src_offset, q.attempts, q.first_at, q.next_at, q.last_status, q.last_error`

func scanPending(row pgx.Row) (Pending, error) {
	var p Pending
	err := row.Scan(&p.Endpoint, &p.EventID, &p.Type, &p.Tenant, &p.EventAt, &p.Payload, &p.Topic, &p.Partition,
		&p.Offset, &p.Attempts, &p.FirstAt, &p.NextAt, &p.LastStatus, &p.LastError)
	return p, err
}

// Enqueue stores p as pending. A row the endpoint already has for the
// event (a copy of it, pending or dead) is left as it is.
func (q *Queue) Enqueue(ctx context.Context, p Pending) error {
	_, err := q.pool.Exec(ctx, `INSERT INTO postline_webhook_queue (`+pendingColumns+`, status)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, 'pending')
		ON CONFLICT (endpoint, event_id) DO NOTHING`,
		p.Endpoint, p.EventID, p.Type, p.Tenant, p.EventAt, p.Payload, p.Topic, p.Partition,
		p.Offset, p.Attempts, p.FirstAt, p.NextAt, p.LastStatus, p.LastError)
	if err != nil {
		return fmt.Errorf("webhook queue: enqueue for %s: %w", p.Endpoint, err)
	}
	return nil
}

// Claim takes up to limit of endpoint's rows due at now, oldest due first,
// and holds each for lease: a claimer that dies leaves them due again once
// the lease ends. Rows another claimer holds are skipped.
func (q *Queue) Claim(ctx context.Context, endpoint string, now time.Time, lease time.Duration, limit int) ([]Pending, error) {
	rows, err := q.pool.Query(ctx, `UPDATE postline_webhook_queue q SET next_at = $3
		FROM (SELECT endpoint, event_id FROM postline_webhook_queue
			WHERE endpoint = $1 AND status = 'pending' AND next_at <= $2
			ORDER BY next_at LIMIT $4 FOR UPDATE SKIP LOCKED) due
		WHERE q.endpoint = due.endpoint AND q.event_id = due.event_id
		RETURNING `+claimedColumns,
		endpoint, now, now.Add(lease), limit)
	if err != nil {
		return nil, fmt.Errorf("webhook queue: claim for %s: %w", endpoint, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Pending, error) { return scanPending(r) })
	if err != nil {
		return nil, fmt.Errorf("webhook queue: claim for %s: %w", endpoint, err)
	}
	return out, nil
}

// Delivered removes the endpoint's row of a delivered event.
func (q *Queue) Delivered(ctx context.Context, endpoint, eventID string) error {
	if _, err := q.pool.Exec(ctx, `DELETE FROM postline_webhook_queue WHERE endpoint = $1 AND event_id = $2`,
		endpoint, eventID); err != nil {
		return fmt.Errorf("webhook queue: delivered for %s: %w", endpoint, err)
	}
	return nil
}

// Unclaim makes a claimed row due again at now: its attempt was cut off
// by a shutdown and was not made, as far as anyone knows.
func (q *Queue) Unclaim(ctx context.Context, endpoint, eventID string, now time.Time) error {
	if _, err := q.pool.Exec(ctx, `UPDATE postline_webhook_queue SET next_at = $3
		WHERE endpoint = $1 AND event_id = $2 AND status = 'pending'`, endpoint, eventID, now); err != nil {
		return fmt.Errorf("webhook queue: unclaim for %s: %w", endpoint, err)
	}
	return nil
}

// Reschedule records a failed attempt of a pending row: its attempts, last
// status and error, and when it is due again.
func (q *Queue) Reschedule(ctx context.Context, p Pending) error {
	if _, err := q.pool.Exec(ctx, `UPDATE postline_webhook_queue
		SET attempts = $3, next_at = $4, last_status = $5, last_error = $6
		WHERE endpoint = $1 AND event_id = $2 AND status = 'pending'`,
		p.Endpoint, p.EventID, p.Attempts, p.NextAt, p.LastStatus, p.LastError); err != nil {
		return fmt.Errorf("webhook queue: reschedule for %s: %w", p.Endpoint, err)
	}
	return nil
}

// Bury makes p a dead letter of its endpoint with reason, whether or not it
// was queued before.
func (q *Queue) Bury(ctx context.Context, p Pending, reason string, at time.Time) error {
	_, err := q.pool.Exec(ctx, `INSERT INTO postline_webhook_queue (`+pendingColumns+`, status, dead_at, dead_reason)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, 'dead', $15, $16)
		ON CONFLICT (endpoint, event_id) DO UPDATE SET status = 'dead', attempts = EXCLUDED.attempts,
			last_status = EXCLUDED.last_status, last_error = EXCLUDED.last_error,
			dead_at = EXCLUDED.dead_at, dead_reason = EXCLUDED.dead_reason`,
		p.Endpoint, p.EventID, p.Type, p.Tenant, p.EventAt, p.Payload, p.Topic, p.Partition,
		p.Offset, p.Attempts, p.FirstAt, p.NextAt, p.LastStatus, p.LastError, at, reason)
	if err != nil {
		return fmt.Errorf("webhook queue: dead letter for %s: %w", p.Endpoint, err)
	}
	return nil
}

// PullForward makes every pending row of endpoint that is due later due at
// now: the endpoint answers again, so what waited for it need not wait out
// its schedule. It returns how many rows it moved.
func (q *Queue) PullForward(ctx context.Context, endpoint string, now time.Time) (int64, error) {
	tag, err := q.pool.Exec(ctx, `UPDATE postline_webhook_queue SET next_at = $2
		WHERE endpoint = $1 AND status = 'pending' AND next_at > $2`, endpoint, now)
	if err != nil {
		return 0, fmt.Errorf("webhook queue: pull forward for %s: %w", endpoint, err)
	}
	return tag.RowsAffected(), nil
}

// PurgeDead deletes up to limit dead letters that died before cutoff and
// returns how many it deleted.
func (q *Queue) PurgeDead(ctx context.Context, endpoint string, cutoff time.Time, limit int) (int64, error) {
	tag, err := q.pool.Exec(ctx, `DELETE FROM postline_webhook_queue q USING (
			SELECT endpoint, event_id FROM postline_webhook_queue
			WHERE endpoint = $1 AND status = 'dead' AND dead_at < $2 LIMIT $3) old
		WHERE q.endpoint = old.endpoint AND q.event_id = old.event_id`, endpoint, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("webhook queue: purge dead letters of %s: %w", endpoint, err)
	}
	return tag.RowsAffected(), nil
}

// Health is what the dispatchers learned of an endpoint in a while: the
// last success, and the first failure after it (or, without a success, the
// first failure) with the last failure's time, status and error.
type Health struct {
	LastSuccess  time.Time // zero: none
	FirstFailure time.Time // zero: none since LastSuccess
	LastFailure  time.Time // zero: none
	LastStatus   int
	LastError    string
}

// EndpointState is an endpoint's shared state.
type EndpointState struct {
	Endpoint       string
	LastSuccess    time.Time // zero: none yet
	LastFailure    time.Time // zero: none yet
	LastStatus     int
	LastError      string
	FailingSince   time.Time // zero: healthy
	DisabledAt     time.Time // zero: enabled
	DisabledReason string
}

// Disabled reports whether the endpoint is disabled.
func (s EndpointState) Disabled() bool { return !s.DisabledAt.IsZero() }

// RecordHealth merges h into the endpoint's state: a success clears the
// failing time unless a failure followed it; a failure with no success
// sets it when it is not set yet.
func (q *Queue) RecordHealth(ctx context.Context, endpoint string, h Health) error {
	_, err := q.pool.Exec(ctx, `INSERT INTO postline_webhook_endpoints AS e
			(endpoint, last_success_at, last_failure_at, last_status, last_error, failing_since)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (endpoint) DO UPDATE SET
			last_success_at = GREATEST(e.last_success_at, EXCLUDED.last_success_at),
			last_failure_at = GREATEST(e.last_failure_at, EXCLUDED.last_failure_at),
			last_status = CASE WHEN EXCLUDED.last_failure_at IS NULL THEN e.last_status ELSE EXCLUDED.last_status END,
			last_error = CASE WHEN EXCLUDED.last_failure_at IS NULL THEN e.last_error ELSE EXCLUDED.last_error END,
			failing_since = CASE WHEN EXCLUDED.last_success_at IS NOT NULL THEN EXCLUDED.failing_since
				ELSE COALESCE(e.failing_since, EXCLUDED.failing_since) END`,
		endpoint, nullTime(h.LastSuccess), nullTime(h.LastFailure), h.LastStatus, h.LastError, nullTime(h.FirstFailure))
	if err != nil {
		return fmt.Errorf("webhook queue: record health of %s: %w", endpoint, err)
	}
	return nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// State returns the endpoint's shared state; an endpoint never heard of is
// healthy and enabled.
func (q *Queue) State(ctx context.Context, endpoint string) (EndpointState, error) {
	s := EndpointState{Endpoint: endpoint}
	var success, failure, failing, disabled *time.Time
	err := q.pool.QueryRow(ctx, `SELECT last_success_at, last_failure_at, last_status, last_error,
			failing_since, disabled_at, disabled_reason
		FROM postline_webhook_endpoints WHERE endpoint = $1`, endpoint).
		Scan(&success, &failure, &s.LastStatus, &s.LastError, &failing, &disabled, &s.DisabledReason)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("webhook queue: state of %s: %w", endpoint, err)
	}
	s.LastSuccess, s.LastFailure, s.FailingSince, s.DisabledAt = deref(success), deref(failure), deref(failing), deref(disabled)
	return s, nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// Actors of the endpoint log: who disabled, enabled or replayed.
const (
	// ActorDispatcher is the dispatcher itself.
	ActorDispatcher = "dispatcher"
)

// DisableIfFailingSince disables the endpoint when it is enabled and has
// failed every attempt since cutoff or earlier. It reports whether it did
// (of many replicas checking at once, one does).
func (q *Queue) DisableIfFailingSince(ctx context.Context, endpoint string, cutoff, now time.Time) (bool, error) {
	var since time.Time
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `UPDATE postline_webhook_endpoints SET disabled_at = $3,
				disabled_reason = 'failed every attempt since ' || to_char(failing_since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
			WHERE endpoint = $1 AND disabled_at IS NULL AND failing_since <= $2
			RETURNING failing_since`, endpoint, cutoff, now).Scan(&since)
		if err != nil {
			return err
		}
		return logAction(ctx, tx, endpoint, now, "disabled", ActorDispatcher, "failed every attempt since "+since.UTC().Format(time.RFC3339))
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("webhook queue: disable %s: %w", endpoint, err)
	}
	return true, nil
}

// SetDisabled disables (with reason) or enables the endpoint for actor and
// logs it. Enabling forgets the failures and makes the endpoint's pending
// rows due at once. It reports whether anything changed.
func (q *Queue) SetDisabled(ctx context.Context, endpoint string, disable bool, reason, actor string, now time.Time) (bool, error) {
	changed := false
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO postline_webhook_endpoints (endpoint) VALUES ($1)
			ON CONFLICT (endpoint) DO NOTHING`, endpoint); err != nil {
			return err
		}
		var tag interface{ RowsAffected() int64 }
		var err error
		if disable {
			tag, err = tx.Exec(ctx, `UPDATE postline_webhook_endpoints SET disabled_at = $2, disabled_reason = $3
				WHERE endpoint = $1 AND disabled_at IS NULL`, endpoint, now, reason)
		} else {
			tag, err = tx.Exec(ctx, `UPDATE postline_webhook_endpoints SET disabled_at = NULL, disabled_reason = '',
				failing_since = NULL WHERE endpoint = $1 AND disabled_at IS NOT NULL`, endpoint)
		}
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		changed = true
		action := "enabled"
		if disable {
			action = "disabled"
		} else if _, err := tx.Exec(ctx, `UPDATE postline_webhook_queue SET next_at = $2
			WHERE endpoint = $1 AND status = 'pending' AND next_at > $2`, endpoint, now); err != nil {
			return err
		}
		return logAction(ctx, tx, endpoint, now, action, actor, reason)
	})
	if err != nil {
		return false, fmt.Errorf("webhook queue: set disabled of %s: %w", endpoint, err)
	}
	return changed, nil
}

func logAction(ctx context.Context, tx pgx.Tx, endpoint string, at time.Time, action, actor, detail string) error {
	_, err := tx.Exec(ctx, `INSERT INTO postline_webhook_endpoint_log (endpoint, at, action, actor, detail)
		VALUES ($1, $2, $3, $4, $5)`, endpoint, at, action, actor, detail)
	return err
}

// LogEntry is one line of an endpoint's log.
type LogEntry struct {
	At                    time.Time
	Action, Actor, Detail string
}

// Log returns the endpoint's last limit log entries, newest first.
func (q *Queue) Log(ctx context.Context, endpoint string, limit int) ([]LogEntry, error) {
	rows, err := q.pool.Query(ctx, `SELECT at, action, actor, detail FROM postline_webhook_endpoint_log
		WHERE endpoint = $1 ORDER BY at DESC LIMIT $2`, endpoint, limit)
	if err != nil {
		return nil, fmt.Errorf("webhook queue: log of %s: %w", endpoint, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[LogEntry])
	if err != nil {
		return nil, fmt.Errorf("webhook queue: log of %s: %w", endpoint, err)
	}
	return out, nil
}

// Backlog is what an endpoint's queue holds.
type Backlog struct {
	Pending       int
	OldestPending time.Time // zero: none
	Dead          int
}

// Backlog counts the endpoint's pending rows and dead letters.
func (q *Queue) Backlog(ctx context.Context, endpoint string) (Backlog, error) {
	var b Backlog
	var oldest *time.Time
	err := q.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'pending'),
			min(first_at) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'dead')
		FROM postline_webhook_queue WHERE endpoint = $1`, endpoint).Scan(&b.Pending, &oldest, &b.Dead)
	if err != nil {
		return b, fmt.Errorf("webhook queue: backlog of %s: %w", endpoint, err)
	}
	b.OldestPending = deref(oldest)
	return b, nil
}

// ReplayFilter selects an endpoint's dead letters.
type ReplayFilter struct {
	Endpoint string
	// From and To bound the event's time (From inclusive, To exclusive);
	// zero: unbounded.
	From, To time.Time
	// Types are the event types; empty: every type.
	Types []event.Type
	// Tenants are the events' tenants; empty: every tenant's.
	Tenants []string
}

// Matches reports whether e is one that f selects (the endpoint aside).
func (f ReplayFilter) Matches(e *event.Event) bool {
	return !e.At.Before(f.From) && (f.To.IsZero() || e.At.Before(f.To)) &&
		(len(f.Types) == 0 || slices.Contains(f.Types, e.Type)) &&
		(len(f.Tenants) == 0 || slices.Contains(f.Tenants, e.Tenant))
}

// String says what f selects, for the endpoint's log.
func (f ReplayFilter) String() string {
	var s []string
	if !f.From.IsZero() {
		s = append(s, "from "+f.From.UTC().Format(time.RFC3339))
	}
	if !f.To.IsZero() {
		s = append(s, "to "+f.To.UTC().Format(time.RFC3339))
	}
	if len(f.Types) > 0 {
		s = append(s, fmt.Sprintf("of types %v", f.Types))
	}
	if len(f.Tenants) > 0 {
		s = append(s, fmt.Sprintf("of tenants %v", f.Tenants))
	}
	return strings.Join(s, " ")
}

// Replay queues the dead letters f selects again, as new pending rows with
// no attempts, due one after the other at rate a second from now, so that
// a replay does not flood the endpoint; with dryRun it only counts them.
// It returns how many it selected, and logs the replay for actor.
func (q *Queue) Replay(ctx context.Context, f ReplayFilter, rate float64, dryRun bool, actor string, now time.Time) (int, error) {
	if rate <= 0 {
		return 0, fmt.Errorf("webhook queue: replay rate %g: must be positive", rate)
	}
	types := make([]string, len(f.Types))
	for i, t := range f.Types {
		types[i] = string(t)
	}
	where := `endpoint = $1 AND status = 'dead'
		AND ($2::timestamptz IS NULL OR event_at >= $2) AND ($3::timestamptz IS NULL OR event_at < $3)
		AND (cardinality($4::text[]) = 0 OR event_type = ANY($4))
		AND (cardinality($5::text[]) = 0 OR tenant = ANY($5))`
	args := []any{f.Endpoint, nullTime(f.From), nullTime(f.To), types, append([]string{}, f.Tenants...)}
	if dryRun {
		var n int
		if err := q.pool.QueryRow(ctx, `SELECT count(*) FROM postline_webhook_queue WHERE `+where, args...).Scan(&n); err != nil {
			return 0, fmt.Errorf("webhook queue: count dead letters of %s: %w", f.Endpoint, err)
		}
		return n, nil
	}
	var n int64
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE postline_webhook_queue q SET status = 'pending', attempts = 0,
				first_at = sel.due, next_at = sel.due, dead_at = NULL, dead_reason = NULL
			FROM (SELECT endpoint, event_id,
					$6::timestamptz + (row_number() OVER (ORDER BY event_at, event_id) - 1) * $7::interval AS due
				FROM postline_webhook_queue WHERE `+where+`) sel
			WHERE q.endpoint = sel.endpoint AND q.event_id = sel.event_id`,
			append(args, now, time.Duration(float64(time.Second)/rate))...)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		if n == 0 {
			return nil
		}
		return logAction(ctx, tx, f.Endpoint, now, "replayed", actor, strings.TrimSpace(fmt.Sprintf("%d dead letters %s", n, f)))
	})
	if err != nil {
		return 0, fmt.Errorf("webhook queue: replay dead letters of %s: %w", f.Endpoint, err)
	}
	return int(n), nil
}

// EndpointReport is an endpoint's state with what its queue holds.
type EndpointReport struct {
	EndpointState
	Backlog
}

// Endpoints reports every endpoint the dispatchers have heard from, or
// that has rows in the queue, by id.
func (q *Queue) Endpoints(ctx context.Context) ([]EndpointReport, error) {
	rows, err := q.pool.Query(ctx, `SELECT ids.endpoint, e.last_success_at, e.last_failure_at, COALESCE(e.last_status, 0),
			COALESCE(e.last_error, ''), e.failing_since, e.disabled_at, COALESCE(e.disabled_reason, ''),
			COALESCE(b.pending, 0), b.oldest, COALESCE(b.dead, 0)
		FROM (SELECT endpoint FROM postline_webhook_endpoints UNION SELECT DISTINCT endpoint FROM postline_webhook_queue) ids
		LEFT JOIN postline_webhook_endpoints e ON e.endpoint = ids.endpoint
		LEFT JOIN (SELECT endpoint, count(*) FILTER (WHERE status = 'pending') AS pending,
				min(first_at) FILTER (WHERE status = 'pending') AS oldest, count(*) FILTER (WHERE status = 'dead') AS dead
			FROM postline_webhook_queue GROUP BY endpoint) b ON b.endpoint = ids.endpoint
		ORDER BY ids.endpoint`)
	if err != nil {
		return nil, fmt.Errorf("webhook queue: endpoints: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (EndpointReport, error) {
		var e EndpointReport
		var success, failure, failing, disabled, oldest *time.Time
		err := r.Scan(&e.Endpoint, &success, &failure, &e.LastStatus, &e.LastError, &failing, &disabled, &e.DisabledReason,
			&e.Pending, &oldest, &e.Dead)
		e.LastSuccess, e.LastFailure, e.FailingSince, e.DisabledAt = deref(success), deref(failure), deref(failing), deref(disabled)
		e.OldestPending = deref(oldest)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("webhook queue: endpoints: %w", err)
	}
	return out, nil
}

// Requeue queues events for the endpoint again, read back from the events
// topic by an operator: each becomes a pending row with no attempts, due
// one after the other at rate a second from now, whether the endpoint
// never had it, has it pending or gave up on it. It logs the replay for
// actor with what selected them, and returns how many it queued.
func (q *Queue) Requeue(ctx context.Context, ps []Pending, rate float64, selected ReplayFilter, actor string, now time.Time) (int, error) {
	if rate <= 0 {
		return 0, fmt.Errorf("webhook queue: replay rate %g: must be positive", rate)
	}
	if len(ps) == 0 {
		return 0, nil
	}
	step := time.Duration(float64(time.Second) / rate)
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		for i, p := range ps {
			due := now.Add(time.Duration(i) * step)
			batch.Queue(`INSERT INTO postline_webhook_queue (`+pendingColumns+`, status)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 0, $10, $10, 0, '', 'pending')
				ON CONFLICT (endpoint, event_id) DO UPDATE SET status = 'pending', attempts = 0,
					first_at = EXCLUDED.first_at, next_at = EXCLUDED.next_at, dead_at = NULL, dead_reason = NULL`,
				p.Endpoint, p.EventID, p.Type, p.Tenant, p.EventAt, p.Payload, p.Topic, p.Partition, p.Offset, due)
		}
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return err
		}
		return logAction(ctx, tx, ps[0].Endpoint, now, "replayed", actor, strings.TrimSpace(fmt.Sprintf("%d events from the topic %s", len(ps), selected)))
	})
	if err != nil {
		return 0, fmt.Errorf("webhook queue: replay events for %s: %w", ps[0].Endpoint, err)
	}
	return len(ps), nil
}
