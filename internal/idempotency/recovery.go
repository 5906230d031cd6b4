package idempotency

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// traceHeaderKeys are the record headers a row keeps (ClaimRequest.TraceHeaders):
// the W3C trace context, nothing else.
var traceHeaderKeys = []string{"traceparent", "tracestate"}

// traceHeadersJSON encodes the trace context headers of h as a JSON object,
// or "" (NULL) when there are none. Other keys are dropped.
func traceHeadersJSON(h map[string]string) (string, error) {
	kept := make(map[string]string, len(traceHeaderKeys))
	for _, k := range traceHeaderKeys {
		if v, ok := h[k]; ok && v != "" {
			kept[k] = cleanText(v, MaxErrorBytes)
		}
	}
	if len(kept) == 0 {
		return "", nil
	}
	b, err := json.Marshal(kept)
	if err != nil {
		return "", fmt.Errorf("encode trace headers: %w", err)
	}
	return string(b), nil
}

// parseTraceHeaders decodes a record_headers value; NULL is nil.
func parseTraceHeaders(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("decode record_headers: %w", err)
	}
	return h, nil
}

// Stuck is a row left in sending by an owner whose lease expired: the
// owner crashed (or stalled) between claiming and recording a fate.
type Stuck struct {
	// MessageID is the row's key.
	MessageID string
	// Version is the row version: HandBack compare-and-sets on it.
	Version int64
	// Attempt is the attempt the row expects; a re-published copy must
	// carry it to be claimable.
	Attempt int
	// Payload is the original record value.
	Payload []byte
	// Key is the original record key; nil when it was not stored (use the
	// message ID, as publishers do).
	Key []byte
	// TraceHeaders are the stored W3C trace context headers (traceparent,
	// tracestate); nil when none were stored.
	TraceHeaders map[string]string
	// FirstSeen is the job's first publication; zero when not stored.
	FirstSeen time.Time
	// LeaseOwner is the owner whose lease expired.
	LeaseOwner string
	// LeaseExpiresAt is when that lease expired, on the database's clock.
	LeaseExpiresAt time.Time
}

// stuckSQL starts from the record copies, which few rows have, so that it
// needs no index on the message row's status or lease (see migration 0011).
const stuckSQL = `
SELECT m.message_id, m.version, m.attempt, c.payload, c.record_key, c.record_headers, m.first_seen,
	COALESCE(m.lease_owner, ''), m.lease_expires_at
FROM postline_message_records c JOIN postline_messages m ON m.message_id = c.message_id
WHERE m.status = 'sending' AND m.lease_expires_at < now() - make_interval(secs => $1)
ORDER BY m.lease_expires_at, m.message_id
LIMIT $2`

// Stuck returns up to limit rows in sending whose lease expired more than
// grace ago on the database's clock, the longest expired first. Only rows
// with a record copy (see ClaimRequest.Payload; a replay stores one) are
// returned: the others have nothing to re-publish, and need nothing, as
// their uncommitted Kafka record is redelivered and re-claims them.
func (s *Store) Stuck(ctx context.Context, grace time.Duration, limit int) ([]Stuck, error) {
	return s.listStuck(ctx, "stuck rows", opStuck, stuckSQL, grace, limit)
}

// listStuck checks grace and limit, runs query (stuckSQL or
// stalledReplaysSQL) as op and names what it lists in its errors.
func (s *Store) listStuck(ctx context.Context, what, op, query string, grace time.Duration, limit int) ([]Stuck, error) {
	if grace < 0 {
		return nil, fmt.Errorf("%s: negative grace %v", what, grace)
	}
	if limit < 1 {
		return nil, fmt.Errorf("%s: limit %d is below 1", what, limit)
	}
	start := time.Now()
	out, err := s.queryStuck(ctx, query, grace, limit)
	s.observe(ctx, op, start, err)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

func (s *Store) queryStuck(ctx context.Context, sql string, grace time.Duration, limit int) ([]Stuck, error) {
	rows, err := s.pool.Query(ctx, sql, grace.Seconds(), limit)
	if err != nil {
		return nil, err
	}
	var (
		out     []Stuck
		st      Stuck
		headers []byte
		seen    pgtype.Timestamptz
		lease   pgtype.Timestamptz
	)
	_, err = pgx.ForEachRow(rows, []any{&st.MessageID, &st.Version, &st.Attempt, &st.Payload, &st.Key,
		&headers, &seen, &st.LeaseOwner, &lease}, func() error {
		h, err := parseTraceHeaders(headers)
		if err != nil {
			return fmt.Errorf("%s: %w", st.MessageID, err)
		}
		st.TraceHeaders, st.FirstSeen, st.LeaseExpiresAt = h, timeOf(seen), timeOf(lease)
		out = append(out, st)
		st, headers = Stuck{}, nil
		return nil
	})
	return out, err
}

const stalledReplaysSQL = `
SELECT m.message_id, m.version, m.attempt, c.payload, c.record_key, c.record_headers, m.first_seen,
	'', NULL::timestamptz
FROM postline_message_records c JOIN postline_messages m ON m.message_id = c.message_id
WHERE m.status = 'pending' AND m.replayed_at < now() - make_interval(secs => $1)
ORDER BY m.replayed_at, m.message_id
LIMIT $2`

// StalledReplays returns up to limit rows that a replay made pending more
// than grace ago (database clock) and that no worker has claimed since: a
// replay whose publish failed after the reset leaves such a row with nothing
// on its way. The oldest come first; LeaseOwner and LeaseExpiresAt are
// empty. Re-publishing one whose record is merely waiting in the topic is
// harmless: the claim lets one copy through.
func (s *Store) StalledReplays(ctx context.Context, grace time.Duration, limit int) ([]Stuck, error) {
	return s.listStuck(ctx, "stalled replays", opStalledReplays, stalledReplaysSQL, grace, limit)
}

const touchReplaysSQL = `
WITH u AS (
	SELECT * FROM unnest($1::text[], $2::int8[]) AS u(message_id, version)
), locked AS MATERIALIZED (
	SELECT m.message_id FROM postline_messages m JOIN u ON m.message_id = u.message_id
	WHERE m.version = u.version AND m.status = 'pending' AND m.replayed_at IS NOT NULL
	ORDER BY m.message_id COLLATE "C"
	FOR UPDATE OF m
), upd AS (
	UPDATE postline_messages m SET replayed_at = now(), updated_at = now()
	FROM locked WHERE m.message_id = locked.message_id
	RETURNING m.message_id
)
SELECT message_id FROM upd`

// TouchReplays restarts the grace of stalled replays the caller has just
// re-published, so the next pass does not publish them again while their
// copies wait in the topic. It compare-and-sets on version and returns the
// IDs it did not touch (claimed meanwhile).
func (s *Store) TouchReplays(ctx context.Context, ids []string, versions []int64) (lost []string, err error) {
	_, lost, err = s.setByVersion(ctx, "touch replays", opTouchReplays, touchReplaysSQL, ids, versions)
	return lost, err
}

const handBackSQL = `
WITH u AS (
	SELECT * FROM unnest($1::text[], $2::int8[]) AS u(message_id, version)
), locked AS MATERIALIZED (
	SELECT u.* FROM postline_messages m JOIN u ON m.message_id = u.message_id
	WHERE m.version = u.version AND m.status = 'sending' AND m.lease_expires_at <= now()
	ORDER BY m.message_id COLLATE "C"
	FOR UPDATE OF m
)
UPDATE postline_messages m SET
	status = 'retrying',
	version = m.version + 1,
	lease_owner = NULL,
	lease_expires_at = NULL,
	updated_at = now()
FROM locked u
WHERE m.message_id = u.message_id AND m.version = u.version
	AND m.status = 'sending' AND m.lease_expires_at <= now()
RETURNING m.message_id`

// HandBack moves stuck rows from sending to retrying in one round trip, each
// as a compare-and-set on its version (from Stuck) that also requires the
// lease to still be expired: the attempt is unchanged and the lease cleared,
// so the copy the reaper re-published is claimable. It returns the IDs whose
// compare-and-set was lost (another reaper handed back the row first, the
// re-published copy was already claimed, or the owner came back and extended
// its lease), counted like Record's. ids and versions are parallel; an ID
// that appears twice is written once and its later occurrences are lost.
func (s *Store) HandBack(ctx context.Context, ids []string, versions []int64) (lost []string, err error) {
	if len(ids) != len(versions) {
		return nil, fmt.Errorf("hand back: %d IDs but %d versions", len(ids), len(versions))
	}
	if len(ids) == 0 {
		return nil, nil
	}
	firstAt := make(map[string]int, len(ids))
	var (
		uids  []string
		uvers []int64
	)
	for i, id := range ids {
		if id == "" {
			return nil, fmt.Errorf("hand back: ID %d is empty", i)
		}
		if _, dup := firstAt[id]; dup {
			continue
		}
		firstAt[id] = i
		uids, uvers = append(uids, id), append(uvers, versions[i])
	}
	start := time.Now()
	won, err := s.updateReturningIDs(ctx, handBackSQL, uids, uvers)
	s.observe(ctx, opHandBack, start, err)
	if err != nil {
		return nil, fmt.Errorf("hand back %d messages: %w", len(uids), err)
	}
	for i, id := range ids {
		if !won[id] || firstAt[id] != i {
			lost = append(lost, id)
		}
	}
	s.noteLost(ctx, opHandBack, lost)
	return lost, nil
}

// Reset asks ResetForReplay to make one message deliverable again.
type Reset struct {
	// MessageID is the row's key. Required.
	MessageID string
	// PayloadHash is the hash of the replayed job (job.Hash): the replayed
	// record's claim must present it.
	PayloadHash []byte
	// Payload is the replayed record value, stored for the reaper (as the
	// row's record copy, which its terminal fate deletes); nil keeps the
	// stored copy, if any.
	Payload []byte
}

const resetForReplaySQL = `
WITH u AS (
	SELECT * FROM unnest($1::text[], $2::bytea[], $3::bytea[]) AS u(message_id, payload_hash, payload)
), locked AS MATERIALIZED (
	SELECT u.* FROM postline_messages m JOIN u ON m.message_id = u.message_id
	WHERE m.status IN ('failed', 'dead')
	ORDER BY m.message_id COLLATE "C"
	FOR UPDATE OF m
), upd AS (
	UPDATE postline_messages m SET
		status = 'pending',
		version = m.version + 1,
		attempt = 1,
		payload_hash = u.payload_hash,
		lease_owner = NULL,
		lease_expires_at = NULL,
		sent_at = NULL,
		first_seen = now(),
		replayed_at = now(),
		-- Another life of the mail: its events get IDs of their own
		-- (migration 0017).
		life = DEFAULT,
		confirm_by = NULL,
		confirmation = NULL,
		confirmed_at = NULL,
		updated_at = now()
	FROM locked u
	WHERE m.message_id = u.message_id AND m.status IN ('failed', 'dead')
	RETURNING m.message_id, u.payload, m.life
), kept AS (
	-- The replayed record's copy, for the reaper: the replay publishes the
	-- record after this reset, and if that fails nothing else will.
	INSERT INTO postline_message_records AS c (message_id, payload)
	SELECT upd.message_id, upd.payload FROM upd
	WHERE upd.payload IS NOT NULL
	ORDER BY upd.message_id COLLATE "C"
	ON CONFLICT (message_id) DO UPDATE SET payload = excluded.payload
), forget AS (
	-- A replay starts the mail's life again: its recipients are sent to
	-- afresh, and the rows of the attempt that failed would keep them
	-- from being recorded.
	DELETE FROM postline_recipients r USING upd WHERE r.message_id = upd.message_id
)
SELECT message_id, COALESCE(life, 0) FROM upd
UNION ALL
SELECT u.message_id, 0::bigint FROM u
WHERE NOT EXISTS (SELECT 1 FROM postline_messages m WHERE m.message_id = u.message_id)`

// ResetForReplay makes replayable messages deliverable again, in one round
// trip, and returns the IDs the caller may now publish, in input order.
//
// A row in failed or dead becomes pending with attempt 1, the given hash and
// payload, a cleared lease, first_seen and replayed_at set to now and its
// version bumped; error_class and last_error are kept, so the row still says
// what it was replayed from until the next fate overwrites them. Its
// recipient rows and confirmation are cleared: the replay sends to every
// recipient again. It gets a new life (Claim.Life), so the replay's events
// are not taken for copies of the first life's. An ID
// without a row is reported as reset and nothing is inserted: the replayed
// record's claim will insert it. A row in any other status is left alone and
// not reported: pending, sending or retrying rows are already on their way
// and sent rows were delivered, so replaying twice delivers once (the second
// replay finds the row pending or sent; a copy published anyway is deduped by
// the claim). An ID that appears twice is reset once, by its first entry.
func (s *Store) ResetForReplay(ctx context.Context, resets []Reset) (reset []string, err error) {
	reopened, err := s.Reopen(ctx, resets)
	if err != nil {
		return nil, err
	}
	for _, r := range reopened {
		reset = append(reset, r.MessageID)
	}
	return reset, nil
}

// Reopened is a message ResetForReplay made deliverable again, with the
// new life its events belong to.
type Reopened struct {
	MessageID string
	// Life is the row's new life (Claim.Life); 0 when the ID had no row:
	// the replayed record's claim inserts it with a life of its own.
	Life int64
}

// Reopen is ResetForReplay returning the new life of each reset row too,
// for a caller that writes events about the new life before the worker
// claims it (postctl dlq redrive's redriven events).
func (s *Store) Reopen(ctx context.Context, resets []Reset) ([]Reopened, error) {
	if len(resets) == 0 {
		return nil, nil
	}
	seen := make(map[string]bool, len(resets))
	var (
		ids              []string
		hashes, payloads [][]byte
	)
	for i, r := range resets {
		if r.MessageID == "" {
			return nil, fmt.Errorf("reset for replay: entry %d: empty message ID", i)
		}
		if len(r.PayloadHash) == 0 {
			return nil, fmt.Errorf("reset for replay %s: empty payload hash", r.MessageID)
		}
		if seen[r.MessageID] {
			continue
		}
		seen[r.MessageID] = true
		ids = append(ids, r.MessageID)
		hashes = append(hashes, r.PayloadHash)
		payloads = append(payloads, r.Payload)
	}
	start := time.Now()
	lives, err := s.reopenRoundTrip(ctx, ids, hashes, payloads)
	s.observe(ctx, opResetForReplay, start, err)
	if err != nil {
		return nil, fmt.Errorf("reset %d messages for replay: %w", len(ids), err)
	}
	var out []Reopened
	for _, id := range ids {
		if life, ok := lives[id]; ok {
			out = append(out, Reopened{MessageID: id, Life: life})
		}
	}
	return out, nil
}

func (s *Store) reopenRoundTrip(ctx context.Context, ids []string, hashes, payloads [][]byte) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, resetForReplaySQL, ids, hashes, payloads)
	if err != nil {
		return nil, err
	}
	lives := make(map[string]int64, len(ids))
	var (
		id   string
		life int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &life}, func() error {
		lives[id] = life
		return nil
	}); err != nil {
		return nil, err
	}
	return lives, nil
}
