package idempotency_test

import (
	"testing"

	"github.com/postline/postline/internal/idempotency"
)

// TestProducerAttemptHeaderWithoutRow is the regression test of a producer
// setting the attempt header: a copy that says attempt 5 for a Message-ID
// without a row is a first attempt. The row starts at attempt 1 and the
// claim reports 1, so the job keeps all its attempts.
func TestProducerAttemptHeaderWithoutRow(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	const id = "<producer-attempt@example.com>"

	c := claimOne(t, s, req(id, "body", 5))
	wantResult(t, c, idempotency.Claimed)
	if c.Attempt != 1 || c.Version != 1 {
		t.Errorf("claim = %+v, want attempt 1 version 1", c)
	}
	if row := get(t, s, id); row.Attempt != 1 || row.Status != idempotency.StatusSending {
		t.Fatalf("row = status %s attempt %d, want sending attempt 1", row.Status, row.Attempt)
	}

	// The job goes on at attempt 2 after a retryable failure: the copy of
	// attempt 2 claims it, the redelivered producer copy (5) is stale.
	if lost := record(t, s, idempotency.Fate{MessageID: id, Version: c.Version,
		Status: idempotency.StatusRetrying, Attempt: c.Attempt + 1}); len(lost) != 0 {
		t.Fatalf("Record lost %v", lost)
	}
	stale := claimOne(t, s, req(id, "body", 5))
	wantResult(t, stale, idempotency.Stale)
	if stale.Attempt != 2 {
		t.Errorf("stale claim attempt = %d, want the row's 2", stale.Attempt)
	}
	again := claimOne(t, s, req(id, "body", 2))
	wantResult(t, again, idempotency.Claimed)
	if again.Attempt != 2 {
		t.Errorf("re-claim attempt = %d, want 2", again.Attempt)
	}
}

// TestExistingRowAttemptMismatchStaysStale checks that the first-attempt
// rule is only for new rows: with a row, a copy of another attempt is an old
// (or forged) copy and is dropped, leaving the row alone.
func TestExistingRowAttemptMismatchStaysStale(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	const id = "<existing-attempt@example.com>"
	c := claimOne(t, s, req(id, "body", 1))
	if lost := record(t, s, idempotency.Fate{MessageID: id, Version: c.Version,
		Status: idempotency.StatusRetrying, Attempt: 1}); len(lost) != 0 {
		t.Fatalf("Record lost %v", lost)
	}
	before := get(t, s, id)
	for _, attempt := range []int{2, 5} {
		wantResult(t, claimOne(t, s, req(id, "body", attempt)), idempotency.Stale)
	}
	if after := get(t, s, id); after.Version != before.Version || after.Attempt != 1 || after.Status != idempotency.StatusRetrying {
		t.Errorf("row after stale claims = %+v, want it unchanged (%+v)", after, before)
	}
}

// TestBatchInsertsEveryNewRowAtAttemptOne checks the rule across a batch
// mixing new rows with forged attempts and an existing row.
func TestBatchInsertsEveryNewRowAtAttemptOne(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	c := claimOne(t, s, req("<old@x>", "body", 1))
	if lost := record(t, s, idempotency.Fate{MessageID: "<old@x>", Version: c.Version,
		Status: idempotency.StatusRetrying, Attempt: 3}); len(lost) != 0 {
		t.Fatalf("Record lost %v", lost)
	}
	claims, err := s.Claim(t.Context(), []idempotency.ClaimRequest{
		req("<a@x>", "a", 7), req("<old@x>", "body", 3), req("<b@x>", "b", 1), req("<a@x>", "a", 7),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		res     idempotency.ClaimResult
		attempt int
	}{{idempotency.Claimed, 1}, {idempotency.Claimed, 3}, {idempotency.Claimed, 1}, {idempotency.Duplicate, 1}}
	for i, w := range want {
		if claims[i].Result != w.res || claims[i].Attempt != w.attempt {
			t.Errorf("claim %d (%s) = %v attempt %d, want %v attempt %d", i, claims[i].MessageID,
				claims[i].Result, claims[i].Attempt, w.res, w.attempt)
		}
	}
	for id, attempt := range map[string]int{"<a@x>": 1, "<old@x>": 3, "<b@x>": 1} {
		if row := get(t, s, id); row.Attempt != attempt {
			t.Errorf("row %s attempt = %d, want %d", id, row.Attempt, attempt)
		}
	}
}

// claimAt claims r at r.Attempt the way a real job gets there: a new row
// starts at attempt 1, so it is claimed at 1 and handed back as retrying at
// r.Attempt first.
func claimAt(t *testing.T, s *idempotency.Store, r idempotency.ClaimRequest) idempotency.Claim {
	t.Helper()
	if r.Attempt > 1 {
		first := r
		first.Attempt = 1
		c := claimOne(t, s, first)
		wantResult(t, c, idempotency.Claimed)
		if lost := record(t, s, idempotency.Fate{MessageID: r.MessageID, Version: c.Version,
			Status: idempotency.StatusRetrying, Attempt: r.Attempt}); len(lost) != 0 {
			t.Fatalf("Record lost %v", lost)
		}
	}
	c := claimOne(t, s, r)
	wantResult(t, c, idempotency.Claimed)
	if c.Attempt != r.Attempt {
		t.Fatalf("claim of %s at attempt %d = attempt %d", r.MessageID, r.Attempt, c.Attempt)
	}
	return c
}
