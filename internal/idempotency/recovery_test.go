package idempotency_test

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/postline/postline/internal/idempotency"
)

func TestClaimStoresRecord(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	seen := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	enq := seen.Add(time.Minute)
	trace := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "k=v"}

	r := req("<rec@x>", "body", 1)
	r.Payload, r.Key, r.FirstSeen, r.EnqueuedAt = []byte(`{"v":1}`), []byte("<rec@x>"), seen, enq
	r.TraceHeaders = map[string]string{"authorization": "Bearer s3cret", "traceparent": trace["traceparent"], "tracestate": "k=v"}
	c := claimOne(t, s, r)
	wantResult(t, c, idempotency.Claimed)
	row := get(t, s, r.MessageID)
	if !bytes.Equal(row.Payload, r.Payload) || !bytes.Equal(row.RecordKey, r.Key) ||
		!maps.Equal(row.TraceHeaders, trace) || !row.FirstSeen.Equal(seen) || !row.ReplayedAt.IsZero() {
		t.Fatalf("row = %+v, want the record stored with trace headers %v only", row, trace)
	}

	// A re-claim keeps what the insert stored.
	record(t, s, idempotency.Fate{MessageID: r.MessageID, Version: c.Version, Status: idempotency.StatusRetrying, Attempt: 2})
	r2 := req(r.MessageID, "body", 2)
	r2.Payload, r2.FirstSeen = []byte(`{"other":1}`), seen.Add(time.Hour)
	wantResult(t, claimOne(t, s, r2), idempotency.Claimed)
	if row := get(t, s, r.MessageID); !bytes.Equal(row.Payload, r.Payload) || !row.FirstSeen.Equal(seen) {
		t.Errorf("re-claim changed the stored record: payload %q, first seen %v", row.Payload, row.FirstSeen)
	}

	// first_seen falls back to the record timestamp, then to now; the
	// other columns stay NULL.
	tests := []struct {
		name string
		req  idempotency.ClaimRequest
		want func(time.Time) bool
	}{
		{"enqueued at", idempotency.ClaimRequest{MessageID: "<enq@x>", PayloadHash: hash("b"), Attempt: 1, EnqueuedAt: enq},
			func(got time.Time) bool { return got.Equal(enq) }},
		{"database now", idempotency.ClaimRequest{MessageID: "<now@x>", PayloadHash: hash("b"), Attempt: 1},
			func(got time.Time) bool { return time.Since(got).Abs() < time.Minute }},
	}
	for _, tt := range tests {
		wantResult(t, claimOne(t, s, tt.req), idempotency.Claimed)
		row := get(t, s, tt.req.MessageID)
		if !tt.want(row.FirstSeen) || row.Payload != nil || row.RecordKey != nil || row.TraceHeaders != nil {
			t.Errorf("%s: row = %+v", tt.name, row)
		}
	}
}

// stuckIDs polls Stuck until it returns want (in order) or a deadline
// passes: leases of 1ms expire on the database's clock right after the claim.
func stuckIDs(t *testing.T, s *idempotency.Store, grace time.Duration, limit int, want ...string) []idempotency.Stuck {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := s.Stuck(t.Context(), grace, limit)
		if err != nil {
			t.Fatalf("Stuck: %v", err)
		}
		ids := make([]string, len(got))
		for i, st := range got {
			ids[i] = st.MessageID
		}
		if slices.Equal(ids, want) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("Stuck(%v, %d) = %v, want %v", grace, limit, ids, want)
		}
	}
}

func TestStuck(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	crashed, _ := newStore(t, pool, "crashed", time.Millisecond)
	live, _ := newStore(t, pool, "live", time.Hour)
	seen := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	withRecord := func(id string, attempt int) idempotency.ClaimRequest {
		r := req(id, "body", attempt)
		r.Payload, r.Key, r.FirstSeen = []byte("value of "+id), []byte("key of "+id), seen
		r.TraceHeaders = map[string]string{"traceparent": "tp-" + id}
		return r
	}

	old := claimOne(t, crashed, withRecord("<old@x>", 1))
	wantResult(t, old, idempotency.Claimed)
	// The second row is claimed later, so its lease expires later.
	stuckIDs(t, crashed, 0, 10, "<old@x>")
	newer := withRecord("<newer@x>", 1)
	wantResult(t, claimOne(t, crashed, newer), idempotency.Claimed)
	// Neither a live lease, nor a terminal row, nor a row without payload is stuck.
	wantResult(t, claimOne(t, live, withRecord("<live@x>", 1)), idempotency.Claimed)
	sent := claimOne(t, crashed, withRecord("<sent@x>", 1))
	record(t, crashed, idempotency.Fate{MessageID: "<sent@x>", Version: sent.Version, Status: idempotency.StatusSent})
	wantResult(t, claimOne(t, crashed, req("<nopayload@x>", "body", 1)), idempotency.Claimed)

	got := stuckIDs(t, crashed, 0, 10, "<old@x>", "<newer@x>")
	st := got[0]
	if st.Version != old.Version || st.Attempt != 1 || string(st.Payload) != "value of <old@x>" ||
		string(st.Key) != "key of <old@x>" || st.TraceHeaders["traceparent"] != "tp-<old@x>" ||
		!st.FirstSeen.Equal(seen) || st.LeaseOwner != "crashed" || st.LeaseExpiresAt.IsZero() {
		t.Errorf("stuck row = %+v", st)
	}
	stuckIDs(t, crashed, 0, 1, "<old@x>")
	stuckIDs(t, crashed, time.Hour, 10)

	for _, bad := range []struct {
		grace time.Duration
		limit int
	}{{-time.Second, 1}, {0, 0}} {
		if _, err := crashed.Stuck(t.Context(), bad.grace, bad.limit); err == nil {
			t.Errorf("Stuck(%v, %d) succeeded, want an error", bad.grace, bad.limit)
		}
	}
}

func TestHandBack(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	crashed, reg := newStore(t, pool, "crashed", time.Millisecond)
	live, _ := newStore(t, pool, "live", time.Hour)

	r := req("<stuck@x>", "body", 3)
	r.Payload = []byte("v")
	claimAt(t, crashed, r)
	st := stuckIDs(t, crashed, 0, 10, r.MessageID)[0]
	lr := req("<live@x>", "body", 1)
	lc := claimOne(t, live, lr)

	lost, err := crashed.HandBack(t.Context(), []string{r.MessageID, lr.MessageID, "<none@x>"}, []int64{st.Version, lc.Version, 1})
	if err != nil {
		t.Fatalf("HandBack: %v", err)
	}
	if !slices.Equal(lost, []string{lr.MessageID, "<none@x>"}) {
		t.Errorf("HandBack lost %v, want the live row and the missing one", lost)
	}
	row := get(t, crashed, r.MessageID)
	if row.Status != idempotency.StatusRetrying || row.Attempt != 3 || row.Version != st.Version+1 ||
		row.LeaseOwner != "" || !row.LeaseExpiresAt.IsZero() {
		t.Errorf("handed back row = %+v, want retrying, attempt 3, version %d, no lease", row, st.Version+1)
	}
	if row := get(t, live, lr.MessageID); row.Status != idempotency.StatusSending || row.LeaseOwner != "live" {
		t.Errorf("HandBack took a live lease: %+v", row)
	}
	// A second reaper with the same snapshot loses.
	lost, err = crashed.HandBack(t.Context(), []string{r.MessageID}, []int64{st.Version})
	if err != nil || !slices.Equal(lost, []string{r.MessageID}) {
		t.Errorf("second HandBack = %v, %v; want it lost", lost, err)
	}
	if got := metricValue(t, reg, "postline_idempotency_cas_conflicts_total"); got != 3 {
		t.Errorf("cas_conflicts_total = %v, want 3", got)
	}
	// The re-published copy (same attempt) claims the handed-back row.
	wantResult(t, claimOne(t, live, req(r.MessageID, "body", 3)), idempotency.Claimed)

	if _, err := crashed.HandBack(t.Context(), []string{"a"}, nil); err == nil {
		t.Error("HandBack with mismatched slices succeeded")
	}
}

func TestResetForReplay(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", time.Hour)
	ctx := t.Context()

	// setup puts the row of id in the status under test.
	type setup func(ctx context.Context, id string)
	claimThen := func(st idempotency.Status) setup {
		return func(_ context.Context, id string) {
			c := claimOne(t, s, req(id, "old body", 1))
			wantResult(t, c, idempotency.Claimed)
			if st == idempotency.StatusSending {
				return
			}
			attempt := 0
			if st == idempotency.StatusRetrying {
				attempt = 2
			}
			record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: st, Attempt: attempt,
				ErrorClass: "permanent", Error: "550 5.1.1 no such user"})
		}
	}
	tests := []struct {
		name      string
		setup     setup
		wantReset bool
		want      idempotency.Status // after the reset; "" = no row
	}{
		{"failed", claimThen(idempotency.StatusFailed), true, idempotency.StatusPending},
		{"dead", claimThen(idempotency.StatusDead), true, idempotency.StatusPending},
		{"dead by rejection", func(ctx context.Context, id string) {
			if err := s.RecordRejected(ctx, []idempotency.Rejection{{MessageID: id, Reason: "invalid_address"}}); err != nil {
				t.Fatal(err)
			}
		}, true, idempotency.StatusPending},
		{"no row", func(context.Context, string) {}, true, ""},
		{"sent", claimThen(idempotency.StatusSent), false, idempotency.StatusSent},
		{"retrying", claimThen(idempotency.StatusRetrying), false, idempotency.StatusRetrying},
		{"sending", claimThen(idempotency.StatusSending), false, idempotency.StatusSending},
	}
	var resets []idempotency.Reset
	before := map[string]idempotency.Row{}
	for _, tt := range tests {
		id := "<" + tt.name + "@x>"
		tt.setup(ctx, id)
		if row, err := s.Get(ctx, id); err == nil {
			before[id] = row
		}
		resets = append(resets, idempotency.Reset{MessageID: id, PayloadHash: hash("new body"), Payload: []byte("new value")})
	}
	// The same ID twice is reset once.
	resets = append(resets, idempotency.Reset{MessageID: "<failed@x>", PayloadHash: hash("other"), Payload: []byte("other")})
	reset, err := s.ResetForReplay(ctx, resets)
	if err != nil {
		t.Fatalf("ResetForReplay: %v", err)
	}
	for _, tt := range tests {
		id := "<" + tt.name + "@x>"
		if got := slices.Contains(reset, id); got != tt.wantReset {
			t.Errorf("%s: reported reset = %v, want %v", tt.name, got, tt.wantReset)
		}
		row, err := s.Get(ctx, id)
		if tt.want == "" {
			if err == nil {
				t.Errorf("%s: a row was inserted: %+v", tt.name, row)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		old := before[id]
		if !tt.wantReset {
			if row.Version != old.Version || row.Status != tt.want {
				t.Errorf("%s: row changed: %+v", tt.name, row)
			}
			continue
		}
		if row.Status != idempotency.StatusPending || row.Attempt != 1 || row.Version != old.Version+1 ||
			!bytes.Equal(row.PayloadHash, hash("new body")) || string(row.Payload) != "new value" ||
			row.ReplayedAt.IsZero() || row.FirstSeen.IsZero() || row.ErrorClass != old.ErrorClass ||
			row.LeaseOwner != "" || !row.SentAt.IsZero() {
			t.Errorf("%s: reset row = %+v (before %+v)", tt.name, row, old)
		}
	}

	// Replaying again changes nothing: the rows are pending now.
	again, err := s.ResetForReplay(ctx, resets[:3])
	if err != nil || len(again) != 0 {
		t.Errorf("second ResetForReplay = %v, %v; want nothing reset", again, err)
	}
	// The replayed record (attempt 1, new hash) claims the pending row; the
	// old payload conflicts.
	wantResult(t, claimOne(t, s, req("<failed@x>", "old body", 1)), idempotency.Conflict)
	wantResult(t, claimOne(t, s, req("<failed@x>", "new body", 1)), idempotency.Claimed)
	wantResult(t, claimOne(t, s, req("<dead@x>", "new body", 2)), idempotency.Stale)

	for _, bad := range [][]idempotency.Reset{{{PayloadHash: hash("x")}}, {{MessageID: "<a@x>"}}} {
		if _, err := s.ResetForReplay(ctx, bad); err == nil {
			t.Errorf("ResetForReplay(%+v) succeeded, want an error", bad)
		}
	}
}
