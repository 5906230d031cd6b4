package idempotency_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/idempotency"
)

// TestStatusTransitionsAreHOT checks that the common transitions of a row,
// sending -> sent and sending -> retrying, are HOT updates: no index covers
// a column they change (migration 0011), and the pages leave room for the
// new versions. A HOT update writes no index entry, which is most of what an
// update costs.
//
// The rows go through the store in batches, as the worker sends them, with
// the fates the worker records (a recipient taken by the relay and a
// confirmation window for sent, a deferred recipient for retrying).
//
// The later updates of a retried row (claimed again, its lease extended,
// sent) are HOT too when its page has room again, which needs the versions
// the first update left dead to be pruned; a long transaction anywhere in
// the database holds that back, so they are counted and logged, not
// required.
func TestStatusTransitionsAreHOT(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", time.Hour)
	ctx := t.Context()

	const batches, perBatch = 4, 256 // the worker's default batch size
	var first, later int64
	type held struct {
		id      string
		version int64
	}
	var retried []held
	now := time.Now()
	for b := range batches {
		reqs := make([]idempotency.ClaimRequest, perBatch)
		for i := range reqs {
			reqs[i] = workerClaim(fmt.Sprintf("<hot-%d-%d@x>", b, i), 1, now, false)
		}
		versions := claimAll(t, s, reqs)
		// One row in four fails transiently; the others are sent.
		outs := make([]idempotency.Fate, len(reqs))
		for i, r := range reqs {
			if i%4 == 0 {
				outs[i] = testFate(r.MessageID, versions[i], idempotency.StatusRetrying, 2)
				retried = append(retried, held{r.MessageID, versions[i] + 1})
			} else {
				outs[i] = testFate(r.MessageID, versions[i], idempotency.StatusSent, 0)
			}
		}
		recordAll(t, s, outs...)
		first += int64(len(outs))
	}
	upd, hot := updateCounts(t, pool, first)
	t.Logf("first transitions: %d of %d updates HOT; %s", hot, upd, rowSizes(t, pool))
	if upd != first || hot != upd {
		t.Errorf("sending -> sent or retrying: %d of %d updates of postline_messages were HOT (want %d, all)", hot, upd, first)
	}

	// Attempt 2 of the retried rows: claimed, its lease extended, sent.
	reqs := make([]idempotency.ClaimRequest, len(retried))
	ids := make([]string, len(retried))
	for i, r := range retried {
		reqs[i], ids[i] = workerClaim(r.id, 2, now, false), r.id
	}
	versions := claimAll(t, s, reqs)
	if lost, err := s.ExtendLease(ctx, ids, versions); err != nil || len(lost) > 0 {
		t.Fatalf("ExtendLease: %v (%d lost)", err, len(lost))
	}
	outs := make([]idempotency.Fate, len(ids))
	for i, id := range ids {
		outs[i] = testFate(id, versions[i], idempotency.StatusSent, 0)
	}
	recordAll(t, s, outs...)
	later = 3 * int64(len(ids))
	upd2, hot2 := updateCounts(t, pool, first+later)
	if upd2 != first+later {
		t.Fatalf("pg_stat_user_tables counts %d updates of postline_messages, want %d", upd2, first+later)
	}
	t.Logf("attempt 2 (claim, extend, sent): %d of %d updates HOT", hot2-hot, later)
}

// testFate is the fate the worker records for a row: see benchRecord.
func testFate(id string, version int64, st idempotency.Status, attempt int) idempotency.Fate {
	o := idempotency.Fate{MessageID: id, Version: version, Status: st, Attempt: attempt,
		Provider: "relay-a", Stream: "transactional", Metadata: map[string]string{"order": "42"}}
	rcpt := idempotency.RecipientFate{Index: 0, Address: "a@example.net", State: idempotency.RecipientAccepted,
		Attempt: max(attempt-1, 1), Provider: "relay-a", Source: "smtp"}
	if st == idempotency.StatusRetrying {
		rcpt.State, rcpt.Code, rcpt.Status = idempotency.RecipientPending, 451, "4.3.0"
		o.ErrorClass, o.Error = "transient", "451 4.3.0 try later"
	} else {
		o.ConfirmBy = time.Now().Add(24 * time.Hour)
	}
	o.Recipients = []idempotency.RecipientFate{rcpt}
	return o
}

func claimAll(t *testing.T, s *idempotency.Store, reqs []idempotency.ClaimRequest) []int64 {
	t.Helper()
	cs, err := s.Claim(t.Context(), reqs)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	versions := make([]int64, len(cs))
	for i, c := range cs {
		wantResult(t, c, idempotency.Claimed)
		versions[i] = c.Version
	}
	return versions
}

func recordAll(t *testing.T, s *idempotency.Store, outs ...idempotency.Fate) {
	t.Helper()
	if lost := record(t, s, outs...); len(lost) > 0 {
		t.Fatalf("Record lost %v", lost)
	}
}

// rowSizes describes the table for the log: rows, pages and the average
// row size, which decide how many new versions fit on a page.
func rowSizes(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	var (
		rows, pages int64
		avg         float64
	)
	if err := pool.QueryRow(context.Background(), `SELECT count(*), avg(pg_column_size(m.*)),
		pg_relation_size('postline_messages') / current_setting('block_size')::int8
		FROM postline_messages m`).Scan(&rows, &avg, &pages); err != nil {
		tb.Fatalf("row sizes: %v", err)
	}
	return fmt.Sprintf("%d rows on %d pages, %.0f bytes each on average", rows, pages, avg)
}
