package idempotency

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Fate is what became of one claimed message in one attempt, as its row records it.
type Fate struct {
	// MessageID is the row's key.
	MessageID string
	// Version is the version returned by Claim: the write is a
	// compare-and-set on it.
	Version int64
	// Status is sent, failed, dead, or retrying (handed back for a later
	// re-claim; the lease is cleared).
	Status Status
	// Attempt is the attempt to store: for retrying, the attempt the next
	// claim must present. Zero keeps the row's attempt.
	Attempt int
	// Provider is the relay that handled the message, if any; empty keeps
	// the row's provider.
	Provider string
	// ErrorClass is the failure class (transient, throttled, permanent,
	// auth, unknown); empty clears it.
	ErrorClass string
	// Error is the failure text; it is stored truncated to MaxErrorBytes.
	Error string

	// Recipients are the recipients whose state this attempt decided
	// (see RecipientFate); rows of recipients a previous attempt or a
	// report already moved past pending are left as they are.
	Recipients []RecipientFate
	// Stream is the job's stream (transactional or bulk); empty keeps the
	// row's.
	Stream string
	// Metadata is the job's metadata, kept for the events of later
	// reports; nil keeps the row's.
	Metadata map[string]string
	// ConfirmBy is when the mail must have been confirmed: set when the
	// relay took it for at least one recipient. The first one written
	// stays. Zero keeps the row's.
	ConfirmBy time.Time
	// Template, TemplateVersion and TemplateWhy say which template version
	// rendered a template job and why; an empty Template keeps the row's.
	Template        string
	TemplateVersion int
	TemplateWhy     string
	// At is when the attempt ended: for sent, the relay's 250, stored as
	// the row's sent_at and its accepted recipients' accepted_at (a batch
	// of fates may be written milliseconds after its sends). Zero takes the
	// database's now().
	At time.Time
}

// Rejection is a job that failed decoding or validation.
type Rejection struct {
	// MessageID is the row's key; rejections without one are not stored.
	MessageID string
	// PayloadHash identifies the content; nil stores an empty hash.
	PayloadHash []byte
	// Reason is the machine-readable rejection reason (stored as
	// error_class).
	Reason string
	// Error is the human-readable detail, truncated to MaxErrorBytes.
	Error string
	// EnqueuedAt is the Kafka record timestamp; zero stores NULL.
	EnqueuedAt time.Time
}

const recordSQL = `
WITH u AS (
	SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::int4[], $5::text[], $6::text[], $7::text[],
			$8::text[], $9::text[], $10::timestamptz[], $11::text[], $12::int4[], $13::text[], $26::timestamptz[])
		WITH ORDINALITY
		AS u(message_id, version, status, attempt, provider, error_class, last_error, stream, metadata, confirm_by,
			template, template_version, template_why, at, pos)
), locked AS MATERIALIZED (
	-- The rows, locked in key order, each with its fate. The update
	-- reads the fates from here, not from u: a join of two of this
	-- statement's own row sets has no index, and in the generic plan,
	-- which guesses 10 rows for an unnest, PostgreSQL nests it, scanning
	-- one set once per row of the other (a batch of 256 cost 65,000 row
	-- comparisons). Joined to the table by key it is an index lookup.
	SELECT u.* FROM postline_messages m JOIN u ON m.message_id = u.message_id
	WHERE m.version = u.version
	ORDER BY m.message_id COLLATE "C"
	FOR UPDATE OF m
), upd AS (
	UPDATE postline_messages m SET
		status = u.status,
		version = m.version + 1,
		attempt = CASE WHEN u.attempt > 0 THEN u.attempt ELSE m.attempt END,
		lease_owner = NULL,
		lease_expires_at = NULL,
		provider = COALESCE(NULLIF(u.provider, ''), m.provider),
		error_class = NULLIF(u.error_class, ''),
		last_error = NULLIF(u.last_error, ''),
		sent_at = CASE WHEN u.status = 'sent' THEN COALESCE(u.at, now()) ELSE m.sent_at END,
		stream = COALESCE(NULLIF(u.stream, ''), m.stream),
		metadata = COALESCE(NULLIF(u.metadata, '')::jsonb, m.metadata),
		confirm_by = COALESCE(m.confirm_by, u.confirm_by),
		template = COALESCE(NULLIF(u.template, ''), m.template),
		template_version = CASE WHEN u.template <> '' THEN u.template_version ELSE m.template_version END,
		template_why = CASE WHEN u.template <> '' THEN NULLIF(u.template_why, '') ELSE m.template_why END,
		-- The column's default, now(): the retention's clock starts from
		-- the row's timestamps as the defaults write them, so a benchmark
		-- can shift them without a trigger per row (bench/soak's aging).
		updated_at = DEFAULT
	FROM locked u
	WHERE m.message_id = u.message_id AND m.version = u.version
	RETURNING m.message_id, m.status, m.confirm_by, u.at, u.pos
), forget AS (
	-- A terminal row no longer needs its record copy, if it has one:
	-- nothing re-publishes it (a replay brings its own copy), and the body
	-- must not outlive the send.
	DELETE FROM postline_message_records c USING upd
	WHERE c.message_id = upd.message_id AND upd.status IN ('sent', 'failed', 'dead', 'suppressed')
), r AS (
	-- A recipient names its mail by its position in u (see recipientColumns),
	-- and only mails whose compare-and-set this statement won get theirs.
	SELECT upd.message_id, upd.confirm_by, upd.at, r.idx, r.address, r.state, r.attempt, r.provider, r.bounce_type,
		r.status, r.code, r.diagnostic, r.rule, r.source
	FROM unnest($14::int4[], $15::int2[], $16::text[], $17::text[], $18::int4[], $19::text[], $20::text[],
			$21::text[], $22::int4[], $23::text[], $24::text[], $25::text[])
		AS r(pos, idx, address, state, attempt, provider, bounce_type, status, code, diagnostic, rule, source)
	JOIN upd ON upd.pos = r.pos
), ins AS (
	-- Only over recipients still pending: what an earlier attempt or a
	-- report decided stands.
	-- An accepted recipient carries its mail's confirm_by, for the
	-- confirmation sweep (see migration 0011).
	INSERT INTO postline_recipients AS p (message_id, idx, ref, address, state, attempt, provider,
		bounce_type, status, code, diagnostic, rule, source, accepted_at, resolved_at, confirm_by, updated_at)
	SELECT r.message_id, r.idx, ` + refSQL + `, r.address, r.state, r.attempt, NULLIF(r.provider, ''),
		NULLIF(r.bounce_type, ''), NULLIF(r.status, ''), NULLIF(r.code, 0), NULLIF(r.diagnostic, ''),
		NULLIF(r.rule, ''), NULLIF(r.source, ''),
		CASE WHEN r.state = 'accepted' THEN COALESCE(r.at, now()) END,
		CASE WHEN r.state NOT IN ('pending', 'accepted') THEN now() END,
		CASE WHEN r.state = 'accepted' THEN r.confirm_by END,
		now()
	FROM r
	ORDER BY r.message_id, r.idx
	ON CONFLICT (message_id, idx) DO UPDATE SET
		state = excluded.state, attempt = excluded.attempt, provider = excluded.provider,
		bounce_type = excluded.bounce_type, status = excluded.status, code = excluded.code,
		diagnostic = excluded.diagnostic, rule = excluded.rule, source = excluded.source,
		accepted_at = excluded.accepted_at, resolved_at = excluded.resolved_at,
		confirm_by = excluded.confirm_by, updated_at = now()
	WHERE p.state = 'pending'
)
SELECT pos FROM upd`

// Record writes a batch of fates in one round trip, each as a
// compare-and-set on its version: the version is bumped, the lease cleared,
// and sent_at set for sent. A terminal fate (sent, failed, dead, suppressed)
// also deletes the row's record copy, if it has one, in the same statement; the payload hash stays,
// so duplicates are still recognised until the row is purged (Purge). It returns the IDs whose compare-and-set was lost
// (the row changed under us, for example after our lease expired and another
// worker claimed it): they are counted in cas_conflicts_total, logged at
// debug, and otherwise harmless. When an ID appears twice only its first
// fate is written; the others are reported lost.
func (s *Store) Record(ctx context.Context, outs []Fate) (lost []string, err error) {
	if len(outs) == 0 {
		return nil, nil
	}
	if err := ValidateFates(outs); err != nil {
		return nil, err
	}
	firstAt := make(map[string]int, len(outs))
	// The columns are cut from one array per type, each with room for
	// every fate: a handful of allocations per batch, not a growing
	// slice per column.
	n := len(outs)
	strs := make([]string, 9*n)
	col := func(k int) []string { return strs[k*n : k*n : (k+1)*n] }
	ints := make([]int32, 2*n)
	var (
		ids, statuses, providers, classes, errs = col(0), col(1), col(2), col(3), col(4)
		streams, metadata, templates, whys      = col(5), col(6), col(7), col(8)
		templateVersions                        = ints[0:0:n]
		attempts                                = ints[n : n : 2*n]
		versions                                = make([]int64, 0, n)
		confirmBy                               = make([]pgtype.Timestamptz, 0, n)
		ats                                     = make([]pgtype.Timestamptz, 0, n)
		nRcpts                                  int
	)
	for _, o := range outs {
		nRcpts += len(o.Recipients)
	}
	rcpts := newRecipientColumns(nRcpts)
	for i, o := range outs {
		if _, dup := firstAt[o.MessageID]; dup {
			continue
		}
		firstAt[o.MessageID] = i
		ids = append(ids, o.MessageID)
		versions = append(versions, o.Version)
		statuses = append(statuses, string(o.Status))
		attempts = append(attempts, int32(o.Attempt))
		providers = append(providers, cleanText(o.Provider, MaxErrorBytes))
		classes = append(classes, cleanText(o.ErrorClass, MaxErrorBytes))
		errs = append(errs, cleanText(o.Error, MaxErrorBytes))
		streams = append(streams, o.Stream)
		metadata = append(metadata, metadataJSON(o.Metadata))
		confirmBy = append(confirmBy, timestamptz(o.ConfirmBy))
		ats = append(ats, timestamptz(o.At))
		templates = append(templates, cleanText(o.Template, 128))
		templateVersions = append(templateVersions, int32(min(max(o.TemplateVersion, 0), math.MaxInt32)))
		whys = append(whys, cleanText(o.TemplateWhy, MaxErrorBytes))
		rcpts.add(len(ids), o.Recipients)
	}

	start := time.Now()
	// The columns recordSQL reads through NULLIF, COALESCE or CASE go
	// padded; a template version only counts with its template.
	if templates = padded(templates); len(templates) == 0 {
		templateVersions = templateVersions[:0:0]
	}
	args := append([]any{ids, versions, statuses, padded(attempts), padded(providers), padded(classes), padded(errs),
		padded(streams), padded(metadata), padded(confirmBy), nonNilStrings(templates), nonNilInt32(templateVersions),
		padded(whys)}, rcpts.args()...)
	args = append(args, padded(ats))
	// The statement returns the positions (in ids) of the rows it wrote,
	// not their IDs: no string and map entry per mail to read them back.
	var won []bool
	if !rcpts.resolves {
		var rows pgx.Rows
		if rows, err = s.pool.Query(ctx, recordSQL, args...); err == nil {
			won, err = collectPositions(rows, len(ids))
		}
	} else {
		b := &pgx.Batch{}
		b.Queue(recordSQL, args...).Query(func(rows pgx.Rows) (err error) {
			won, err = collectPositions(rows, len(ids))
			return err
		})
		// One round trip, one implicit transaction: the settling sees the
		// recipients just written. A batch that only accepts recipients or
		// leaves them pending settles nothing and goes without it.
		b.Queue(settleSQL, ids).Exec(func(pgconn.CommandTag) error { return nil })
		err = s.pool.SendBatch(ctx, b).Close()
	}
	s.observe(ctx, opRecord, start, err)
	if err != nil {
		return nil, fmt.Errorf("record %d fates: %w", len(ids), err)
	}
	// Every input ID not written lost its compare-and-set, duplicates
	// included. ids holds the first occurrences in order: the k-th one is
	// at position k.
	k := 0
	for i, o := range outs {
		if firstAt[o.MessageID] != i {
			lost = append(lost, o.MessageID)
			continue
		}
		if !won[k] {
			lost = append(lost, o.MessageID)
		}
		k++
	}
	s.noteLost(ctx, opRecord, lost)
	return lost, nil
}

const extendLeaseSQL = `
WITH u AS (
	SELECT * FROM unnest($1::text[], $2::int8[]) AS u(message_id, version)
), locked AS MATERIALIZED (
	-- The version alone picks the rows to lock (a row at the version of
	-- our claim is ours): a filter on the status or the owner here would
	-- make the planner of a table not yet analyzed expect one row, scan
	-- the table and nest u inside it.
	SELECT u.* FROM postline_messages m JOIN u ON m.message_id = u.message_id
	WHERE m.version = u.version
	ORDER BY m.message_id COLLATE "C"
	FOR UPDATE OF m
)
UPDATE postline_messages m SET lease_expires_at = now() + make_interval(secs => $4)
FROM locked u
WHERE m.message_id = u.message_id AND m.version = u.version
	AND m.status = 'sending' AND m.lease_owner = $3
RETURNING m.message_id`

// ExtendLease pushes the lease expiry of rows this store claimed to one Lease
// from the database's now, in one round trip; the version is not bumped, so
// the Claim's version stays valid for Record (a LeaseKeeper calls it for
// every job held). An expired lease nobody took over is extended too: the
// row is still ours, and the reaper's HandBack, which requires an expired
// lease, then loses. It returns the IDs that are no
// longer ours at that version (lost, counted like Record's). ids and versions
// are parallel.
func (s *Store) ExtendLease(ctx context.Context, ids []string, versions []int64) (lost []string, err error) {
	won, lost, err := s.setByVersion(ctx, "extend lease", opExtendLease, extendLeaseSQL, ids, versions,
		s.cfg.Owner, s.leaseSeconds())
	if err != nil {
		return nil, err
	}
	s.m.extensions.Add(float64(len(won)))
	s.noteLost(ctx, opExtendLease, lost)
	return lost, nil
}

// setByVersion runs sql, a compare-and-set of the rows ids at versions ($1
// and $2, parallel; args follow from $3) that returns the IDs it won, as one
// round trip of op; what names the call in errors. It returns the IDs won
// and, in input order, those lost. No IDs make no round trip.
func (s *Store) setByVersion(ctx context.Context, what, op, sql string, ids []string, versions []int64,
	args ...any) (won map[string]bool, lost []string, err error) {
	if len(ids) != len(versions) {
		return nil, nil, fmt.Errorf("%s: %d IDs but %d versions", what, len(ids), len(versions))
	}
	if len(ids) == 0 {
		return nil, nil, nil
	}
	start := time.Now()
	won, err = s.updateReturningIDs(ctx, sql, append([]any{ids, versions}, args...)...)
	s.observe(ctx, op, start, err)
	if err != nil {
		return nil, nil, fmt.Errorf("%s of %d messages: %w", what, len(ids), err)
	}
	for _, id := range ids {
		if !won[id] {
			lost = append(lost, id)
		}
	}
	return won, lost, nil
}

// updateReturningIDs runs a statement returning message IDs and collects
// them.
func (s *Store) updateReturningIDs(ctx context.Context, sql string, args ...any) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return collectIDs(rows)
}

// collectPositions reads rows of one 1-based position each, of n, into
// which were returned.
func collectPositions(rows pgx.Rows, n int) ([]bool, error) {
	won := make([]bool, n)
	var pos int64
	if _, err := pgx.ForEachRow(rows, []any{&pos}, func() error {
		if pos < 1 || pos > int64(n) {
			return fmt.Errorf("returned position %d of %d", pos, n)
		}
		won[pos-1] = true
		return nil
	}); err != nil {
		return nil, err
	}
	return won, nil
}

// collectIDs reads rows of one message ID each.
func collectIDs(rows pgx.Rows) (map[string]bool, error) {
	won := make(map[string]bool)
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		won[id] = true
		return nil
	}); err != nil {
		return nil, err
	}
	return won, nil
}

const recordRejectedSQL = `
INSERT INTO postline_messages (
	message_id, status, version, attempt, payload_hash, error_class, last_error,
	enqueued_at, created_at, updated_at)
SELECT u.message_id, 'dead', 1, 0, u.payload_hash, NULLIF(u.reason, ''), NULLIF(u.error, ''),
	u.enqueued_at, now(), now()
FROM unnest($1::text[], $2::bytea[], $3::text[], $4::text[], $5::timestamptz[])
	AS u(message_id, payload_hash, reason, error, enqueued_at)
ORDER BY u.message_id COLLATE "C"
ON CONFLICT (message_id) DO NOTHING`

// RecordRejected stores bad input as dead rows (attempt 0, the reason as
// error_class) in one round trip, so that a rejected job has a queryable
// terminal state. An existing row for the ID is left alone. Rejections
// without a MessageID are skipped: there is no key to store them under.
func (s *Store) RecordRejected(ctx context.Context, rejs []Rejection) error {
	seen := make(map[string]bool, len(rejs))
	var (
		ids, reasons, errs []string
		hashes             [][]byte
		enqueued           []pgtype.Timestamptz
	)
	for _, r := range rejs {
		if r.MessageID == "" || seen[r.MessageID] {
			continue
		}
		seen[r.MessageID] = true
		ids = append(ids, r.MessageID)
		hashes = append(hashes, nonNil(r.PayloadHash))
		reasons = append(reasons, cleanText(r.Reason, MaxErrorBytes))
		errs = append(errs, cleanText(r.Error, MaxErrorBytes))
		enqueued = append(enqueued, timestamptz(r.EnqueuedAt))
	}
	if len(ids) == 0 {
		return nil
	}
	start := time.Now()
	_, err := s.pool.Exec(ctx, recordRejectedSQL, ids, hashes, reasons, errs, enqueued)
	s.observe(ctx, opRecordRejected, start, err)
	if err != nil {
		return fmt.Errorf("record %d rejections: %w", len(ids), err)
	}
	return nil
}

const noteConflictsSQL = `
WITH c AS (
	SELECT message_id, count(*)::int4 AS n FROM unnest($1::text[]) AS u(message_id) GROUP BY message_id
), locked AS MATERIALIZED (
	SELECT c.* FROM postline_messages m JOIN c ON m.message_id = c.message_id
	ORDER BY m.message_id COLLATE "C"
	FOR UPDATE OF m
)
UPDATE postline_messages m SET conflicts = m.conflicts + c.n
FROM locked c
WHERE m.message_id = c.message_id`

// NoteConflicts adds one to the conflicts counter of each row per occurrence
// of its ID in ids, in one round trip. It changes neither the version nor the
// status, so it never breaks the owner's compare-and-set. IDs without a row
// are ignored.
func (s *Store) NoteConflicts(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	start := time.Now()
	_, err := s.pool.Exec(ctx, noteConflictsSQL, ids)
	s.observe(ctx, opNoteConflicts, start, err)
	if err != nil {
		return fmt.Errorf("note %d conflicts: %w", len(ids), err)
	}
	return nil
}

// padded returns col, or none of it when every element is the zero value:
// unnest pads a shorter array with NULLs, and the statements read a NULL
// in these columns as they read the zero value (NULLIF against the empty
// string or 0, COALESCE, CASE WHEN x > 0), so a column left empty by the
// whole batch (error texts, templates, bounce details of sent mail) is not
// sent and encoded a row at a time. Only for such columns: a column whose
// zero value is stored as is (an attempt, a hash) must be sent whole.
func padded[T comparable](col []T) []T {
	var zero T
	for _, v := range col {
		if v != zero {
			return col
		}
	}
	return col[:0:0]
}

// paddedBytes is padded for a nullable bytea column: only a column of
// nils (NULLs) is left out; an empty non-nil value is not NULL.
func paddedBytes(col [][]byte) [][]byte {
	for _, v := range col {
		if v != nil {
			return col
		}
	}
	return col[:0:0]
}

// cleanText makes s storable as PostgreSQL text of at most maxBytes bytes:
// invalid UTF-8 is replaced, NUL bytes (which text rejects) are dropped, and
// the cut falls on a rune boundary.
func cleanText(s string, maxBytes int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) <= maxBytes {
		return s
	}
	cut := maxBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
