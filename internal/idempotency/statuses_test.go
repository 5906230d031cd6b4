package idempotency_test

import (
	"maps"
	"testing"
	"time"

	"github.com/postline/postline/internal/idempotency"
)

// TestStatusesAndReopen reads rows' statuses without changing them, then
// reopens them: only failed and dead rows (and IDs without one) reopen, each
// with a new life, and reopening again reopens nothing.
func TestStatusesAndReopen(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", time.Hour)
	ctx := t.Context()
	fates := map[string]idempotency.Status{"<f@x>": idempotency.StatusFailed, "<d@x>": idempotency.StatusDead, "<s@x>": idempotency.StatusSent}
	lives := map[string]int64{}
	for id, st := range fates {
		c := claimOne(t, s, req(id, "body", 1))
		wantResult(t, c, idempotency.Claimed)
		lives[id] = c.Life
		record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: st, Attempt: 1, ErrorClass: "permanent"})
	}
	ids := []string{"<f@x>", "<d@x>", "<s@x>", "<none@x>"}
	got, err := s.Statuses(ctx, ids)
	if err != nil || !maps.Equal(got, fates) {
		t.Fatalf("Statuses = %v, %v; want %v", got, err, fates)
	}
	if got, err := s.Statuses(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("Statuses(nil) = %v, %v", got, err)
	}
	for _, st := range idempotency.Statuses {
		if want := st == idempotency.StatusFailed || st == idempotency.StatusDead; st.Replayable() != want {
			t.Errorf("%s.Replayable() = %v, want %v", st, !want, want)
		}
	}
	if again, _ := s.Statuses(ctx, ids); !maps.Equal(again, fates) {
		t.Errorf("Statuses changed rows: %v", again)
	}

	var resets []idempotency.Reset
	for _, id := range ids {
		resets = append(resets, idempotency.Reset{MessageID: id, PayloadHash: hash("body")})
	}
	reopened, err := s.Reopen(ctx, resets)
	if err != nil {
		t.Fatal(err)
	}
	if len(reopened) != 3 || reopened[0].MessageID != "<f@x>" || reopened[1].MessageID != "<d@x>" || reopened[2].MessageID != "<none@x>" {
		t.Fatalf("Reopen = %+v, want <f@x>, <d@x>, <none@x> in input order", reopened)
	}
	for _, r := range reopened[:2] {
		if r.Life == 0 || r.Life == lives[r.MessageID] {
			t.Errorf("%s reopened with life %d (before: %d), want a new one", r.MessageID, r.Life, lives[r.MessageID])
		}
	}
	if reopened[2].Life != 0 {
		t.Errorf("an ID without a row reopened with life %d, want 0", reopened[2].Life)
	}
	if again, err := s.Reopen(ctx, resets); err != nil || len(again) != 1 || again[0].MessageID != "<none@x>" {
		t.Errorf("second Reopen = %+v, %v; want only the ID without a row", again, err)
	}
	if got, _ := s.Statuses(ctx, ids[:2]); got["<f@x>"] != idempotency.StatusPending || got["<d@x>"] != idempotency.StatusPending {
		t.Errorf("after Reopen: %v, want pending", got)
	}
}
