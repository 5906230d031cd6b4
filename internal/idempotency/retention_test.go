package idempotency_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/idempotency"
)

// TestTerminalOutcomeClearsPayload checks that recording sent, failed or
// dead drops the record copy (body, key, trace headers) in the same
// statement, keeping the hash (so duplicates are still recognised), while
// retrying keeps it for the reaper.
func TestTerminalOutcomeClearsPayload(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", time.Hour)
	withBody := func(id string) idempotency.ClaimRequest {
		r := req(id, "body of "+id, 1)
		r.Payload, r.Key = []byte(`{"text":"secret body of `+id+`"}`), []byte(id)
		r.TraceHeaders = map[string]string{"traceparent": "tp-" + id}
		return r
	}
	ids := []string{"<sent@x>", "<failed@x>", "<dead@x>", "<retrying@x>"}
	statuses := []idempotency.Status{idempotency.StatusSent, idempotency.StatusFailed, idempotency.StatusDead, idempotency.StatusRetrying}
	var outs []idempotency.Fate
	for i, id := range ids {
		c := claimOne(t, s, withBody(id))
		wantResult(t, c, idempotency.Claimed)
		outs = append(outs, idempotency.Fate{MessageID: id, Version: c.Version, Status: statuses[i], Attempt: 2})
	}
	if lost := record(t, s, outs...); len(lost) != 0 {
		t.Fatalf("Record lost %v", lost)
	}
	for i, id := range ids {
		row := get(t, s, id)
		terminal := statuses[i].Terminal()
		cleared := row.Payload == nil && row.RecordKey == nil && row.TraceHeaders == nil
		kept := len(row.Payload) > 0 && string(row.RecordKey) == id && row.TraceHeaders["traceparent"] == "tp-"+id
		if terminal && !cleared || !terminal && !kept {
			t.Errorf("%s (%s): record copy %q, key %q, headers %v; want it cleared only for a terminal fate",
				id, row.Status, row.Payload, row.RecordKey, row.TraceHeaders)
		}
		if !bytes.Equal(row.PayloadHash, hash("body of "+id)) {
			t.Errorf("%s: hash lost: %+v", id, row)
		}
	}
	// The hash still dedupes: a redelivered copy of the sent job is a
	// duplicate, one with another body a conflict.
	wantResult(t, claimOne(t, s, req("<sent@x>", "body of <sent@x>", 1)), idempotency.Duplicate)
	wantResult(t, claimOne(t, s, req("<sent@x>", "other body", 1)), idempotency.Conflict)
	// A stuck retrying row can still be re-published: its payload stayed.
	if row := get(t, s, "<retrying@x>"); len(row.Payload) == 0 {
		t.Error("retrying row lost its payload")
	}
}

// TestPurge checks the retention: only terminal rows whose fate is
// older than the retention go, at most limit per statement, oldest first;
// in-flight rows stay whatever their age; a purged row's recipients and
// record copy go with it.
func TestPurge(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, reg := newStore(t, pool, "worker-1", time.Hour)
	ctx := t.Context()
	terminal := map[string]idempotency.Status{"<old-sent@x>": idempotency.StatusSent, "<old-failed@x>": idempotency.StatusFailed,
		"<old-dead@x>": idempotency.StatusDead, "<new-sent@x>": idempotency.StatusSent, "<old-retrying@x>": idempotency.StatusRetrying}
	rcptState := map[idempotency.Status]idempotency.RecipientState{idempotency.StatusSent: idempotency.RecipientAccepted,
		idempotency.StatusFailed: idempotency.RecipientFailed, idempotency.StatusDead: idempotency.RecipientDead,
		idempotency.StatusRetrying: idempotency.RecipientPending}
	for id, st := range terminal {
		c := claimOne(t, s, req(id, "b", 1))
		record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: st, Attempt: 1,
			Recipients: []idempotency.RecipientFate{rcpt(0, "r@example.com", rcptState[st])}})
	}
	wantResult(t, claimOne(t, s, req("<old-sending@x>", "b", 1)), idempotency.Claimed)
	// Age every row but one; the oldest is old-dead. A row is never
	// younger than its fate.
	if _, err := pool.Exec(ctx, `UPDATE postline_messages SET updated_at = now() - interval '40 days',
		created_at = now() - interval '41 days' WHERE message_id LIKE '<old-%'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE postline_messages SET updated_at = now() - interval '50 days',
		created_at = now() - interval '51 days' WHERE message_id = '<old-dead@x>'`); err != nil {
		t.Fatal(err)
	}
	// An old row whose fate is recent stays: its created_at passes the
	// index's cut-off, its updated_at does not.
	c := claimOne(t, s, req("<old-recent@x>", "b", 1))
	record(t, s, idempotency.Fate{MessageID: "<old-recent@x>", Version: c.Version, Status: idempotency.StatusSent})
	if _, err := pool.Exec(ctx, `UPDATE postline_messages SET created_at = now() - interval '60 days' WHERE message_id = '<old-recent@x>'`); err != nil {
		t.Fatal(err)
	}
	// Record copies: one a caller left on a terminal row, which goes with
	// the row, and one of a row in flight, which stays.
	if _, err := pool.Exec(ctx, `INSERT INTO postline_message_records (message_id, payload)
		VALUES ('<old-failed@x>', 'x'), ('<old-sending@x>', 'y')
		ON CONFLICT (message_id) DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	const retention = 30 * 24 * time.Hour

	n, err := s.Purge(ctx, retention, 1)
	if err != nil || n != 1 {
		t.Fatalf("Purge(limit 1) = %d, %v; want 1", n, err)
	}
	if _, err := s.Get(ctx, "<old-dead@x>"); err == nil {
		t.Error("the oldest terminal row was not the first purged")
	}
	if n, err = s.Purge(ctx, retention, 1000); err != nil || n != 2 {
		t.Fatalf("Purge = %d, %v; want the 2 other old terminal rows", n, err)
	}
	if n, err = s.Purge(ctx, retention, 1000); err != nil || n != 0 {
		t.Errorf("Purge again = %d, %v; want nothing left", n, err)
	}
	var left []string
	rows, err := pool.Query(ctx, `SELECT message_id FROM postline_messages ORDER BY message_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		left = append(left, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"<new-sent@x>", "<old-recent@x>", "<old-retrying@x>", "<old-sending@x>"}; !slices.Equal(left, want) {
		t.Errorf("rows left = %v, want %v (recent or in flight)", left, want)
	}
	var withRecipients []string
	if err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT message_id ORDER BY message_id), '{}') FROM postline_recipients`).
		Scan(&withRecipients); err != nil {
		t.Fatal(err)
	}
	if want := []string{"<new-sent@x>", "<old-retrying@x>"}; !slices.Equal(withRecipients, want) {
		t.Errorf("recipients left of %v, want %v (those of the rows left)", withRecipients, want)
	}
	var withCopies []string
	if err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(message_id ORDER BY message_id), '{}') FROM postline_message_records`).
		Scan(&withCopies); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(withCopies, "<old-sending@x>") || slices.Contains(withCopies, "<old-failed@x>") {
		t.Errorf("record copies left of %v, want the row in flight's and not the purged row's", withCopies)
	}
	// A purged ID is new again: its next copy is claimed and delivered.
	wantResult(t, claimOne(t, s, req("<old-sent@x>", "b", 1)), idempotency.Claimed)

	if got := metricValue(t, reg, "postline_idempotency_round_trip_seconds", "op", "purge"); got != 3 {
		t.Errorf("purge round trips = %v, want 3", got)
	}
	for _, bad := range []struct {
		age   time.Duration
		limit int
	}{{0, 1}, {time.Hour, 0}} {
		if _, err := s.Purge(ctx, bad.age, bad.limit); err == nil {
			t.Errorf("Purge(%v, %d) succeeded, want an error", bad.age, bad.limit)
		}
	}
}

// TestStuckRequiresTheLeaseExpiredPastGrace checks the reaper's query: a
// row whose lease expired less than grace ago is its owner's still (a lease
// keeper may be about to extend it), and a live lease is never stuck.
func TestStuckRequiresTheLeaseExpiredPastGrace(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", time.Hour)
	ctx := t.Context()
	for _, id := range []string{"<live@x>", "<recent@x>", "<long@x>"} {
		r := req(id, "b", 1)
		r.Payload = []byte("v")
		wantResult(t, claimOne(t, s, r), idempotency.Claimed)
	}
	for id, expired := range map[string]string{"<recent@x>": "5 seconds", "<long@x>": "5 minutes"} {
		if _, err := pool.Exec(ctx, `UPDATE postline_messages SET lease_expires_at = now() - $2::interval WHERE message_id = $1`, id, expired); err != nil {
			t.Fatal(err)
		}
	}
	stuckIDs(t, s, time.Minute, 10, "<long@x>")
	stuckIDs(t, s, time.Second, 10, "<long@x>", "<recent@x>")
	stuckIDs(t, s, time.Hour, 10)
}

// TestConcurrentPurgesShareTheRows checks that purges running at once (one
// per worker's reaper) delete every due row exactly once between them,
// without an error: they take turns.
func TestConcurrentPurgesShareTheRows(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", time.Hour)
	ctx := t.Context()
	const rows = 300
	reqs := make([]idempotency.ClaimRequest, rows)
	for i := range reqs {
		reqs[i] = req(fmt.Sprintf("<due-%d@x>", i), "b", 1)
	}
	cs, err := s.Claim(ctx, reqs)
	if err != nil || len(cs) != rows {
		t.Fatalf("Claim = %d claims, %v; want %d", len(cs), err, rows)
	}
	outs := make([]idempotency.Fate, rows)
	for i, c := range cs {
		outs[i] = idempotency.Fate{MessageID: c.MessageID, Version: c.Version, Status: idempotency.StatusSent, Attempt: 1}
	}
	record(t, s, outs...)
	if _, err := pool.Exec(ctx, `UPDATE postline_messages SET updated_at = now() - interval '2 hours',
		created_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	const purges, limit = 4, 7
	var wg sync.WaitGroup
	deleted := make([]int, purges)
	errs := make([]error, purges)
	for p := range purges {
		wg.Go(func() {
			for {
				n, err := s.Purge(ctx, time.Hour, limit)
				deleted[p] += n
				if err != nil || n == 0 {
					errs[p] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var total int
	for _, n := range deleted {
		total += n
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM postline_messages`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if total != rows || left != 0 {
		t.Fatalf("the purges deleted %v rows, %d in all, %d left; want %d in all, none left", deleted, total, left, rows)
	}
}

// TestPurgesTakeTurns checks that a purge waits while another holds the
// purge's turn of its schema (the reaper of another worker in the middle of
// a statement), runs once the turn is free, and that the turn is per
// schema: a purge of another schema does not wait.
func TestPurgesTakeTurns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// The turn's key, as Purge takes it: the table's OID and 1.
	const turn = `SELECT pg_advisory_xact_lock('postline_messages'::regclass::oid::int, 1)`
	dueRow := func(s *idempotency.Store, pool *pgxpool.Pool, id string) {
		c := claimOne(t, s, req(id, "b", 1))
		record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusSent, Attempt: 1})
		if _, err := pool.Exec(ctx, `UPDATE postline_messages SET updated_at = now() - interval '2 hours',
			created_at = now() - interval '2 hours'`); err != nil {
			t.Fatal(err)
		}
	}
	_, poolA := migrated(t)
	a, _ := newStore(t, poolA, "worker-1", time.Hour)
	dueRow(a, poolA, "<a@x>")
	_, poolB := migrated(t)
	b, _ := newStore(t, poolB, "worker-1", time.Hour)
	dueRow(b, poolB, "<b@x>")

	holder, err := poolA.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, turn); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Purge(ctx, time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("Purge of another schema while the turn is held = %d, %v; want 1 without waiting", n, err)
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := a.Purge(ctx, time.Hour, 10)
		done <- result{n, err}
	}()
	// The purge waits on the turn: its lock shows in pg_locks, not granted.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		if err := poolA.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
			AND classid = 'postline_messages'::regclass::oid AND objid = 1 AND objsubid = 2 AND NOT granted)`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("Purge = %d, %v while another held the turn; want it to wait", r.n, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the purge never waited for the turn")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.n != 1 {
		t.Fatalf("Purge once the turn was free = %d, %v; want 1", r.n, r.err)
	}
}
