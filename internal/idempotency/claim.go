package idempotency

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// ClaimRequest asks to claim one message before sending it.
type ClaimRequest struct {
	// MessageID is the row's key. Required.
	MessageID string
	// PayloadHash identifies the content: the same ID with another hash is a
	// conflict, not a duplicate.
	PayloadHash []byte
	// Attempt is the attempt this copy is for (the record's attempt
	// header); 1 for the first publish. It must match the attempt of an
	// existing row. When there is no row the copy is a first attempt
	// whatever it says: the row is inserted at attempt 1 and Claim.Attempt
	// reports 1, so a producer that sets the header cannot skip attempts or
	// start a job at its last one.
	Attempt int
	// Priority is stored on the row for reporting.
	Priority string
	// Tenant is stored on the row for reporting.
	Tenant string
	// EnqueuedAt is the Kafka record timestamp of the first publish; zero
	// stores NULL.
	EnqueuedAt time.Time

	// FirstSeen is the first publication (the first-seen header); zero
	// stores EnqueuedAt, or the database's now when that is zero too. It is
	// written when the row is inserted; a re-claim keeps the stored value.
	FirstSeen time.Time

	// Payload, Key and TraceHeaders are an optional copy of the record,
	// for a caller whose record Kafka will not redeliver: the reaper
	// re-publishes it when the row is stuck in sending. The worker passes
	// none (its record's offset is not committed before the fate is
	// recorded, so Kafka redelivers it after a crash), which keeps the
	// claim from writing the mail's body to Postgres. Payload is the record
	// value, byte for byte; nil stores no copy. Key is the record key (nil:
	// the reaper keys by MessageID). TraceHeaders are the record's W3C trace
	// context headers; only traceparent and tracestate are stored, any other
	// key is dropped, so credentials can never reach the table. The copy
	// goes to a side table (postline_message_records) when the claim wins;
	// a copy already stored is kept.
	Payload      []byte
	Key          []byte
	TraceHeaders map[string]string
}

// ClaimResult is what a claim decided for one request.
type ClaimResult int

// The claim results.
const (
	// Claimed means this worker holds the lease: send it.
	Claimed ClaimResult = iota + 1
	// Duplicate means the same payload is already terminal, or the same ID
	// with the same payload and attempt came earlier in this batch: skip.
	Duplicate
	// Conflict means the same ID with a different payload hash: do not send.
	Conflict
	// Busy means the row is leased by someone else (or by us for another
	// copy), or was claimable but taken concurrently: re-check at RetryAt.
	Busy
	// Stale means the attempt number does not match the row: an old copy,
	// skip.
	Stale
)

// String returns the result's name as used in the claims_total metric.
func (r ClaimResult) String() string {
	switch r {
	case Claimed:
		return "claimed"
	case Duplicate:
		return "duplicate"
	case Conflict:
		return "conflict"
	case Busy:
		return "busy"
	case Stale:
		return "stale"
	}
	return fmt.Sprintf("ClaimResult(%d)", int(r))
}

// Claim is the result of one ClaimRequest.
type Claim struct {
	// MessageID is the request's ID.
	MessageID string
	// Result says what to do with the message.
	Result ClaimResult
	// Version is the row version after the claim (Claimed): Record and
	// ExtendLease compare-and-set on it. For other results, the version seen.
	Version int64
	// Status is the row status as seen (sending when Claimed).
	Status Status
	// Attempt is the row's attempt: for Claimed, the attempt being made,
	// which the caller must use from then on (it differs from the
	// request's when the row was inserted, see ClaimRequest.Attempt). For
	// other results, the attempt seen; zero when no row was read.
	Attempt int
	// RetryAt is, for Busy, when to re-check: the lease expiry on the
	// database's clock, or the database's now when the row is free again.
	RetryAt time.Time
	// Life is, for Claimed, the life of the mail the claim belongs to: a
	// value drawn when the row was inserted and drawn again when a replay
	// re-opened it (ResetForReplay), so that the events of a replayed or
	// re-sent mail get IDs of their own (event.NewLifeID). 0 for a row
	// written before lives were recorded. Zero for other results.
	Life int64
}

// ClaimRow is the part of a row that decides a claim (see Unclaimed).
type ClaimRow struct {
	Status         Status
	Version        int64
	Attempt        int
	PayloadHash    []byte
	LeaseExpiresAt time.Time // zero when NULL
}

// claimInput is everything classify needs to decide one request.
type claimInput struct {
	Req ClaimRequest
	// First is the earlier request with the same ID in the batch; nil when
	// Req is the first occurrence.
	First *ClaimRequest
	// Claimed reports that the upsert took the lease for this ID (only ever
	// for the first occurrence), at ClaimedVersion, ClaimedAttempt and
	// ClaimedLife.
	Claimed        bool
	ClaimedVersion int64
	ClaimedAttempt int
	ClaimedLife    int64
	// Row is the row read back after the upsert; nil if there is none.
	Row *ClaimRow
	// Now is the database's clock during the claim.
	Now time.Time
}

// classify decides the result of one claim request. It is pure: the claim
// statement already took whichever leases could be taken, so classify only
// explains (Unclaimed) why the others were not.
func classify(in claimInput) Claim {
	if in.First == nil && in.Claimed {
		return Claim{MessageID: in.Req.MessageID, Result: Claimed, Status: StatusSending, Version: in.ClaimedVersion,
			Attempt: in.ClaimedAttempt, Life: in.ClaimedLife}
	}
	return Unclaimed(in.Req, in.First, in.Row, in.Now)
}

// Unclaimed explains why req was not claimed, for every request whose
// lease the claim statement did not take: first is the earlier request
// with the same ID in the batch (nil for the first occurrence), row the row
// as the batch's claims left it (nil for none) and now the database's
// clock. The order of the checks matters: content first (conflict), then
// terminal state (duplicate), then attempt (stale), then the lease (busy),
// except that the copy of the attempt after a live lease's waits for that
// lease. It is exported so that an in-memory stand-in
// (idempotencytest.Memory) answers as the Store does.
func Unclaimed(req ClaimRequest, first *ClaimRequest, row *ClaimRow, now time.Time) Claim {
	c := Claim{MessageID: req.MessageID}
	if row != nil {
		c.Status, c.Version, c.Attempt = row.Status, row.Version, row.Attempt
	}
	if first != nil {
		ref := first.PayloadHash
		if row != nil {
			ref = row.PayloadHash
		}
		if !bytes.Equal(req.PayloadHash, ref) {
			c.Result = Conflict
			return c
		}
		if bytes.Equal(req.PayloadHash, first.PayloadHash) && req.Attempt == first.Attempt {
			// A redelivered copy of an earlier entry: that entry carries
			// the fate for both.
			c.Result = Duplicate
			return c
		}
		// Same content, another attempt (or the first entry conflicted):
		// judge this copy on the row alone, but it cannot be claimed here.
	}
	switch {
	case row == nil:
		// The row vanished between the statements: look again.
		c.Result, c.RetryAt = Busy, now
	case !bytes.Equal(req.PayloadHash, row.PayloadHash):
		c.Result = Conflict
	case row.Status.Terminal():
		c.Result = Duplicate
	case req.Attempt == row.Attempt+1 && row.Status == StatusSending && row.LeaseExpiresAt.After(now):
		// The next attempt's copy overtook the fate of this one: a
		// sender publishes the retry copy before it records the row, and a
		// short delay tier can bring the copy back before that write lands.
		// Wait for the row, which the live lease says is coming; once the
		// lease lapses its owner is gone, its record is redelivered and
		// makes the attempt again, and this copy is stale.
		c.Result, c.RetryAt = Busy, row.LeaseExpiresAt
	case req.Attempt != row.Attempt:
		c.Result = Stale
	case row.LeaseExpiresAt.After(now):
		c.Result, c.RetryAt = Busy, row.LeaseExpiresAt
	default:
		// Claimable, yet not claimed by this statement: another worker
		// took it and handed it back concurrently, or this is a later copy in
		// the batch. Re-check right away.
		c.Result, c.RetryAt = Busy, now
	}
	return c
}

// claimSQL upserts the rows and takes their leases, then stores the record
// copies the caller passed (see ClaimRequest.Payload) for the rows it
// claimed, in the side table; an existing copy is kept.
const claimSQL = `
WITH u AS (
	SELECT * FROM unnest($1::text[], $2::bytea[], $3::int4[], $4::text[], $5::text[], $6::timestamptz[],
			$9::bytea[], $10::bytea[], $11::text[], $12::timestamptz[])
		WITH ORDINALITY
		AS u(message_id, payload_hash, attempt, priority, tenant, enqueued_at,
			payload, record_key, record_headers, first_seen, pos)
), claimed AS (
	-- created_at and updated_at take their columns' default, now(), as the
	-- fate's updated_at does (see recordSQL).
	INSERT INTO postline_messages AS m (
		message_id, status, version, attempt, payload_hash, lease_owner, lease_expires_at,
		priority, tenant, enqueued_at, first_seen)
	SELECT u.message_id, 'sending', 1,
		-- A new row is a first attempt whatever the copy says. For an existing
		-- row the proposed attempt is the copy's: the DO UPDATE below compares
		-- it (as excluded.attempt) with the row's.
		CASE WHEN e.message_id IS NULL THEN 1 ELSE u.attempt END,
		u.payload_hash, $7, now() + make_interval(secs => $8),
		NULLIF(u.priority, ''), NULLIF(u.tenant, ''), u.enqueued_at,
		COALESCE(u.first_seen, u.enqueued_at, now())
	FROM u
	LEFT JOIN postline_messages e ON e.message_id = u.message_id
	ORDER BY u.message_id COLLATE "C"
	ON CONFLICT (message_id) DO UPDATE SET
		status = 'sending',
		version = m.version + 1,
		-- A row left by a rejected record (dead at attempt 0: nothing was ever
		-- sent) is taken over by the valid job with its ID, as a first attempt:
		-- a producer that fixes a broken job and publishes it again, under the
		-- same Message-ID, gets it delivered, and garbage keyed with someone
		-- else's ID cannot block that job.
		payload_hash = CASE WHEN m.status = 'dead' THEN excluded.payload_hash ELSE m.payload_hash END,
		attempt = CASE WHEN m.status = 'dead' THEN 1 ELSE m.attempt END,
		-- The job's life starts with it (excluded.life is the column's
		-- default, drawn for the row the INSERT proposed).
		life = CASE WHEN m.status = 'dead' THEN excluded.life ELSE m.life END,
		error_class = CASE WHEN m.status = 'dead' THEN NULL ELSE m.error_class END,
		last_error = CASE WHEN m.status = 'dead' THEN NULL ELSE m.last_error END,
		lease_owner = excluded.lease_owner,
		lease_expires_at = excluded.lease_expires_at,
		priority = COALESCE(m.priority, excluded.priority),
		tenant = COALESCE(m.tenant, excluded.tenant),
		enqueued_at = COALESCE(m.enqueued_at, excluded.enqueued_at),
		first_seen = COALESCE(m.first_seen, excluded.first_seen),
		updated_at = excluded.updated_at
	WHERE (m.status IN ('pending', 'retrying', 'sending')
			AND m.payload_hash = excluded.payload_hash
			AND m.attempt = excluded.attempt
			AND (m.lease_expires_at IS NULL OR m.lease_expires_at <= now()))
		OR (m.status = 'dead' AND m.attempt = 0)
	RETURNING m.message_id, m.version, m.attempt, m.life
), kept AS (
	INSERT INTO postline_message_records (message_id, payload, record_key, record_headers)
	SELECT u.message_id, u.payload, u.record_key, NULLIF(u.record_headers, '')::jsonb
	FROM u JOIN claimed c ON c.message_id = u.message_id
	WHERE u.payload IS NOT NULL
	ORDER BY u.message_id COLLATE "C"
	ON CONFLICT (message_id) DO NOTHING
)
-- Positions in the ID column, not the IDs: nothing per mail to read back
-- but integers. The life was drawn by the column's default when the row was
-- inserted (see migration 0017); a row from before has none (0).
SELECT u.pos, c.version, c.attempt, COALESCE(c.life, 0) FROM claimed c JOIN u ON u.message_id = c.message_id`

const claimReadSQL = `
SELECT message_id, status, version, attempt, payload_hash, lease_expires_at
FROM postline_messages WHERE message_id = ANY($1::text[])`

// Claim claims a batch in one round trip and returns the results in input
// order.
//
// The same MessageID may appear several times in reqs: only the first
// occurrence can be Claimed. A later one is Conflict when its hash differs
// from the row's, Duplicate when it repeats the first occurrence's hash and
// attempt, and otherwise is judged on the row like any unclaimed request
// (Duplicate, Stale or Busy).
//
// A claim succeeds when no row exists (it is inserted as sending, version 1,
// attempt 1 whatever the request's attempt: Claim.Attempt says which), or the row is pending, retrying or sending with the same hash, the same
// attempt and no live lease (a sending row with an expired lease belongs to a
// crashed owner). Otherwise: a different hash is Conflict whatever the
// status, a terminal row is Duplicate, the copy of the next attempt of a row
// still sending under a live lease is Busy until RetryAt (the fate that
// moves the row to that attempt is on its way), any other attempt mismatch
// is Stale, and a live lease (anyone's, ours included) is Busy until
// RetryAt. Leases are
// measured on the database's clock.
//
// Whether a row exists, and so which attempt a new row gets, is read in the
// upsert's own snapshot: a row another claim inserts concurrently is found
// by the conflict check and judged like any existing row (its fresh lease
// makes this copy Busy or Stale), and a row the retention purge deletes at
// that very moment is re-inserted with the request's attempt, the one case
// where a copy's attempt can start a row (a duplicate arriving exactly as
// its Retention-old terminal row goes).
//
// The batch is an upsert that takes the leases and a clock query, sent
// together in one implicit transaction; the rows of the IDs it did not
// claim (and of IDs given twice) are read back in a second round trip, only
// when there are any; classification happens in Go.
// Rows are locked in byte order of the ID (COLLATE "C"), as by every other
// write of this package, so concurrent batches cannot deadlock.
func (s *Store) Claim(ctx context.Context, reqs []ClaimRequest) ([]Claim, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if err := ValidateClaims(reqs); err != nil {
		return nil, err
	}
	firstIdx := make(map[string]int, len(reqs))
	var reread []string // IDs given more than once: classify needs their rows
	// The columns are cut from one array per type, each with room for
	// every request.
	n := len(reqs)
	strs := make([]string, 4*n)
	byteCols := make([][]byte, 3*n)
	times := make([]pgtype.Timestamptz, 2*n)
	ids, priorities, tenants := strs[0:0:n], strs[n:n:2*n], strs[2*n:2*n:3*n]
	hashes := byteCols[0:0:n]
	attempts := make([]int32, 0, n)
	enqueued := times[0:0:n]
	rec := recordColumns{
		payloads: byteCols[n : n : 2*n],
		keys:     byteCols[2*n : 2*n : 3*n],
		headers:  strs[3*n : 3*n : 4*n],
		seen:     times[n : n : 2*n],
	}
	for i, r := range reqs {
		if _, dup := firstIdx[r.MessageID]; dup {
			reread = append(reread, r.MessageID)
			continue
		}
		firstIdx[r.MessageID] = i
		ids = append(ids, r.MessageID)
		hashes = append(hashes, nonNil(r.PayloadHash))
		attempts = append(attempts, int32(r.Attempt))
		priorities = append(priorities, r.Priority)
		tenants = append(tenants, r.Tenant)
		enqueued = append(enqueued, timestamptz(r.EnqueuedAt))
		hdrs, err := traceHeadersJSON(r.TraceHeaders)
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", r.MessageID, err)
		}
		rec.payloads = append(rec.payloads, r.Payload)
		rec.keys = append(rec.keys, r.Key)
		rec.headers = append(rec.headers, hdrs)
		rec.seen = append(rec.seen, timestamptz(r.FirstSeen))
	}

	start := time.Now()
	claimed, rows, now, err := s.claimRoundTrip(ctx, ids, hashes, attempts, priorities, tenants, enqueued, rec, reread)
	s.observe(ctx, opClaim, start, err)
	if err != nil {
		return nil, fmt.Errorf("claim %d messages: %w", len(ids), err)
	}

	out := make([]Claim, len(reqs))
	var counts [Stale + 1]int // per result, counted once per batch
	k := 0                    // ids holds the first occurrences in order: the k-th is at k
	for i, r := range reqs {
		in := claimInput{Req: r, Now: now}
		if fi := firstIdx[r.MessageID]; fi != i {
			first := reqs[fi]
			in.First = &first
		} else {
			if v := claimed[k]; v.ok {
				in.Claimed, in.ClaimedVersion, in.ClaimedAttempt, in.ClaimedLife = true, v.version, v.attempt, v.life
			}
			k++
		}
		if row, ok := rows[r.MessageID]; ok {
			in.Row = heapRow(row)
		}
		out[i] = classify(in)
		if r := out[i].Result; r >= Claimed && r <= Stale {
			counts[r]++
		} else {
			s.m.claims.WithLabelValues(r.String()).Inc()
		}
	}
	for r, n := range counts {
		if n > 0 {
			s.m.claims.WithLabelValues(ClaimResult(r).String()).Add(float64(n))
		}
	}
	return out, nil
}

// claimRoundTrip sends the upsert and the clock query as one batch: one
// round trip, one implicit transaction, one now(). The rows are read back
// only for what classify needs them for, the IDs the upsert did not claim
// and those given more than once (reread): a second round trip, only for
// batches that have any. A claimed ID needs no row, and most batches are
// all claimed: reading every row back sent every ID twice and decoded a
// row per mail for nothing. Each statement reads its own snapshot
// (READ COMMITTED) either way, so the rows are as current as the same
// transaction's read would be.
func (s *Store) claimRoundTrip(ctx context.Context, ids []string, hashes [][]byte, attempts []int32,
	priorities, tenants []string, enqueued []pgtype.Timestamptz, rec recordColumns, reread []string,
) (claimed []claimedRow, rows map[string]ClaimRow, now time.Time, err error) {
	b := &pgx.Batch{}
	// The columns claimSQL reads through NULLIF or COALESCE, and the
	// record copies the worker never passes, go padded (see padded).
	b.Queue(claimSQL, ids, hashes, attempts, padded(priorities), padded(tenants), padded(enqueued), s.cfg.Owner, s.leaseSeconds(),
		paddedBytes(rec.payloads), paddedBytes(rec.keys), padded(rec.headers), padded(rec.seen))
	b.Queue("SELECT now()")
	br := s.pool.SendBatch(ctx, b)
	claimed, now, err = readClaimed(br, len(ids))
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	for k, id := range ids {
		if !claimed[k].ok {
			reread = append(reread, id)
		}
	}
	if len(reread) == 0 {
		return claimed, nil, now, nil
	}
	if rows, err = s.readRows(ctx, reread); err != nil {
		return nil, nil, time.Time{}, err
	}
	return claimed, rows, now, nil
}

// readClaimed reads the upsert's claimed rows, by position in the n IDs,
// and the clock from br.
func readClaimed(br pgx.BatchResults, n int) ([]claimedRow, time.Time, error) {
	claimed := make([]claimedRow, n)
	res, err := br.Query()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("upsert: %w", err)
	}
	var (
		pos int64
		cr  claimedRow
		now time.Time
	)
	if _, err := pgx.ForEachRow(res, []any{&pos, &cr.version, &cr.attempt, &cr.life}, func() error {
		if pos < 1 || pos > int64(n) {
			return fmt.Errorf("returned position %d of %d", pos, n)
		}
		cr.ok = true
		claimed[pos-1] = cr
		return nil
	}); err != nil {
		return nil, time.Time{}, fmt.Errorf("upsert: %w", err)
	}
	if err := br.QueryRow().Scan(&now); err != nil {
		return nil, time.Time{}, fmt.Errorf("read clock: %w", err)
	}
	return claimed, now, nil
}

// readRows reads the rows of ids as claim classification sees them.
func (s *Store) readRows(ctx context.Context, ids []string) (map[string]ClaimRow, error) {
	res, err := s.pool.Query(ctx, claimReadSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("read rows: %w", err)
	}
	rows := make(map[string]ClaimRow, len(ids))
	var (
		id    string
		row   ClaimRow
		lease pgtype.Timestamptz
	)
	if _, err := pgx.ForEachRow(res, []any{&id, &row.Status, &row.Version, &row.Attempt, &row.PayloadHash, &lease}, func() error {
		row.LeaseExpiresAt = timeOf(lease)
		rows[id] = row
		row = ClaimRow{}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read rows: %w", err)
	}
	return rows, nil
}

// heapRow returns a pointer to a copy of row. A helper, so that only a
// request with a row pays the allocation: a variable whose address is
// taken in the loop moved to the heap for every request.
func heapRow(row ClaimRow) *ClaimRow { return &row }

// claimedRow is what the upsert returns for a row whose lease it took.
type claimedRow struct {
	version int64
	attempt int
	life    int64
	ok      bool // the upsert claimed the row
}

// recordColumns are the claim's optional copy of the Kafka record, one
// element per distinct message ID; nil payloads and keys store NULL, empty
// headers store NULL.
type recordColumns struct {
	payloads, keys [][]byte
	headers        []string
	seen           []pgtype.Timestamptz
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func timestamptz(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}
}

func timeOf(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time
}
