package idempotency_test

import (
	"slices"
	"testing"
	"time"

	"github.com/postline/postline/internal/idempotency"
)

// seedAudit writes, through the real claim and record paths, one row in
// each situation an audit tells apart, and returns the store's reader.
//
//	sent@x      sent by relay-a
//	failed@x    failed permanently
//	retrying@x  handed back for attempt 2, first seen a minute ago
//	old@x       retrying, first seen 3 days ago (past the default max age)
//	stuck@x     sending under a lease that expired at once (past any grace)
//	live@x      sending under a live lease
func seedAudit(t *testing.T) *idempotency.Reader {
	t.Helper()
	_, pool := migrated(t)
	ctx := t.Context()
	longLease, _ := newStore(t, pool, "worker-long", time.Hour)
	shortLease, _ := newStore(t, pool, "worker-short", time.Millisecond)

	now := time.Now()
	first := func(id string, seen time.Time) idempotency.ClaimRequest {
		r := req(id, "body of "+id, 1)
		r.FirstSeen, r.Payload = seen, []byte(`{"message_id":"`+id+`"}`)
		return r
	}
	claims, err := longLease.Claim(ctx, []idempotency.ClaimRequest{
		first("sent@x", now.Add(-time.Minute)), first("failed@x", now.Add(-time.Minute)),
		first("retrying@x", now.Add(-time.Minute)), first("old@x", now.Add(-72*time.Hour)),
		first("live@x", now.Add(-time.Minute)),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		wantResult(t, c, idempotency.Claimed)
	}
	record(t, longLease,
		idempotency.Fate{MessageID: "sent@x", Version: claims[0].Version, Status: idempotency.StatusSent, Provider: "relay-a"},
		idempotency.Fate{MessageID: "failed@x", Version: claims[1].Version, Status: idempotency.StatusFailed,
			Provider: "relay-a", ErrorClass: "permanent", Error: "550 5.1.1 no such user"},
		idempotency.Fate{MessageID: "retrying@x", Version: claims[2].Version, Status: idempotency.StatusRetrying,
			Attempt: 2, ErrorClass: "transient", Error: "421 try later"},
		idempotency.Fate{MessageID: "old@x", Version: claims[3].Version, Status: idempotency.StatusRetrying,
			Attempt: 2, ErrorClass: "throttled"},
	)
	wantResult(t, claimOne(t, shortLease, first("stuck@x", now.Add(-2*time.Minute))), idempotency.Claimed)

	reader, err := idempotency.NewReader(pool)
	if err != nil {
		t.Fatal(err)
	}
	return reader
}

func TestReaderLookup(t *testing.T) {
	reader := seedAudit(t)
	got, err := reader.Lookup(t.Context(), []string{"live@x", "nope@x", "sent@x", "live@x", "", "also-nope@x"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range got.Rows {
		ids = append(ids, r.MessageID)
	}
	if !slices.Equal(ids, []string{"live@x", "sent@x"}) || !slices.Equal(got.Missing, []string{"nope@x", "also-nope@x"}) {
		t.Fatalf("rows %v, missing %v", ids, got.Missing)
	}
	if d := time.Since(got.At); d < -time.Minute || d > time.Minute {
		t.Errorf("At = %v, not the database's now", got.At)
	}
	live, sent := got.Rows[0], got.Rows[1]
	if live.Status != idempotency.StatusSending || live.LeaseOwner != "worker-long" || !live.LeaseExpiresAt.After(got.At) ||
		live.Attempt != 1 || len(live.Payload) == 0 || live.FirstSeen.IsZero() {
		t.Errorf("live row %+v", live)
	}
	if sent.Status != idempotency.StatusSent || sent.Provider != "relay-a" || sent.SentAt.IsZero() || sent.LeaseOwner != "" {
		t.Errorf("sent row %+v", sent)
	}

	empty, err := reader.Lookup(t.Context(), nil)
	if err != nil || len(empty.Rows)+len(empty.Missing) != 0 || empty.At.IsZero() {
		t.Errorf("Lookup(nil) = %+v, %v", empty, err)
	}
}

func TestReaderMissing(t *testing.T) {
	reader := seedAudit(t)
	got, err := reader.Missing(t.Context(), []string{"a@x", "sent@x", "b@x", "a@x", "stuck@x"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"a@x", "b@x"}) {
		t.Fatalf("Missing = %v, want [a@x b@x]", got)
	}
}

func TestReaderAudit(t *testing.T) {
	reader := seedAudit(t)
	tests := []struct {
		name       string
		opts       idempotency.AuditOptions
		wantStuck  []string
		wantTooOld []string
	}{
		{"defaults", idempotency.AuditOptions{}, nil, []string{"old@x"}},
		{"short grace finds the expired lease", idempotency.AuditOptions{LeaseGrace: time.Nanosecond}, []string{"stuck@x"}, []string{"old@x"}},
		{"short max age finds every row in flight", idempotency.AuditOptions{LeaseGrace: time.Nanosecond, MaxAge: time.Second},
			[]string{"stuck@x"}, []string{"old@x", "stuck@x", "live@x", "retrying@x"}},
		{"limit lists fewer but counts all", idempotency.AuditOptions{MaxAge: time.Second, Limit: 1}, nil, []string{"old@x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := reader.Audit(t.Context(), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			wantCounts := map[idempotency.Status]int64{"pending": 0, "sending": 2, "retrying": 2, "sent": 1, "failed": 1, "dead": 0}
			for st, n := range wantCounts {
				if rep.Counts[st] != n {
					t.Errorf("count of %s = %d, want %d", st, rep.Counts[st], n)
				}
			}
			if rep.Total() != 6 || rep.InFlightCount() != 4 {
				t.Errorf("total %d, in flight %d", rep.Total(), rep.InFlightCount())
			}
			if rep.Oldest == nil || rep.Oldest.MessageID != "old@x" || rep.Oldest.Age < 71*time.Hour || rep.Oldest.Status != idempotency.StatusRetrying {
				t.Errorf("oldest %+v", rep.Oldest)
			}
			if got := inFlightIDs(rep.Stuck); !slices.Equal(got, tt.wantStuck) {
				t.Errorf("stuck %v, want %v", got, tt.wantStuck)
			}
			if got := inFlightIDs(rep.TooOld); !slices.Equal(got, tt.wantTooOld) {
				t.Errorf("too old %v, want %v", got, tt.wantTooOld)
			}
			if tt.opts.Limit == 1 && rep.TooOldCount != 4 {
				t.Errorf("too old count %d with limit 1, want 4", rep.TooOldCount)
			}
			if tt.opts.Limit == 0 && (rep.StuckCount != int64(len(tt.wantStuck)) || rep.TooOldCount != int64(len(tt.wantTooOld))) {
				t.Errorf("counts stuck %d, too old %d", rep.StuckCount, rep.TooOldCount)
			}
			for _, s := range rep.Stuck {
				if s.LeaseOwner != "worker-short" || s.PastLease <= 0 || s.Status != idempotency.StatusSending {
					t.Errorf("stuck row %+v", s)
				}
			}
		})
	}
}

func TestReaderAuditEmptyTable(t *testing.T) {
	_, pool := migrated(t)
	reader, err := idempotency.NewReader(pool)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := reader.Audit(t.Context(), idempotency.AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total() != 0 || rep.Oldest != nil || len(rep.Counts) != len(idempotency.Statuses) || rep.At.IsZero() {
		t.Fatalf("audit of an empty table: %+v", rep)
	}
}

func inFlightIDs(rows []idempotency.InFlight) []string {
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.MessageID)
	}
	return ids
}
