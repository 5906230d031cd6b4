package idempotency_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sync/errgroup"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
)

// migrated returns the URL and a pool of a fresh, migrated schema.
func migrated(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	url, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return url, pool
}

// openPool opens a pool of maxConns connections on url, closed at the end
// of the test (before NewSchema drops the schema).
func openPool(t *testing.T, url string, maxConns int32, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func newStore(t *testing.T, pool *pgxpool.Pool, owner string, lease time.Duration) (*idempotency.Store, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := idempotency.New(idempotency.Config{Owner: owner, Lease: lease}, pool, nil, reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, reg
}

func hash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func req(id, content string, attempt int) idempotency.ClaimRequest {
	return idempotency.ClaimRequest{MessageID: id, PayloadHash: hash(content), Attempt: attempt}
}

func claimOne(t *testing.T, s *idempotency.Store, r idempotency.ClaimRequest) idempotency.Claim {
	t.Helper()
	cs, err := s.Claim(t.Context(), []idempotency.ClaimRequest{r})
	if err != nil {
		t.Fatalf("Claim(%s): %v", r.MessageID, err)
	}
	if len(cs) != 1 || cs[0].MessageID != r.MessageID {
		t.Fatalf("Claim(%s) = %+v, want one claim for it", r.MessageID, cs)
	}
	return cs[0]
}

func wantResult(t *testing.T, c idempotency.Claim, want idempotency.ClaimResult) {
	t.Helper()
	if c.Result != want {
		t.Fatalf("claim %s: result %v (status %q, version %d), want %v", c.MessageID, c.Result, c.Status, c.Version, want)
	}
}

func get(t *testing.T, s *idempotency.Store, id string) idempotency.Row {
	t.Helper()
	row, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return row
}

func record(t *testing.T, s *idempotency.Store, outs ...idempotency.Fate) []string {
	t.Helper()
	lost, err := s.Record(t.Context(), outs)
	if err != nil {
		t.Fatalf("Record: %v", err)
	}
	return lost
}

// metricValue returns the counter value, or the histogram sample count, of
// the series of name whose labels include the given pairs.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue series
				}
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name && lp.GetValue() == value {
			return true
		}
	}
	return false
}

func TestFirstClaim(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, reg := newStore(t, pool, "worker-1", 0)
	enq := time.Date(2025, 6, 1, 12, 0, 0, 123456000, time.UTC)
	r := idempotency.ClaimRequest{
		MessageID: "<first@example.com>", PayloadHash: hash("body"), Attempt: 1,
		Priority: "urgent", Tenant: "acme", EnqueuedAt: enq,
	}
	c := claimOne(t, s, r)
	wantResult(t, c, idempotency.Claimed)
	if c.Version != 1 || c.Status != idempotency.StatusSending {
		t.Errorf("claim = %+v, want version 1, status sending", c)
	}
	row := get(t, s, r.MessageID)
	if row.Status != idempotency.StatusSending || row.Version != 1 || row.Attempt != 1 ||
		!bytes.Equal(row.PayloadHash, r.PayloadHash) || row.LeaseOwner != "worker-1" ||
		row.Priority != "urgent" || row.Tenant != "acme" || !row.EnqueuedAt.Equal(enq) ||
		row.Conflicts != 0 || !row.SentAt.IsZero() || row.Provider != "" {
		t.Errorf("row = %+v", row)
	}
	lease := row.LeaseExpiresAt.Sub(row.UpdatedAt)
	if lease != idempotency.DefaultLease {
		t.Errorf("lease = %v past updated_at, want the default %v", lease, idempotency.DefaultLease)
	}
	if got := metricValue(t, reg, "postline_idempotency_claims_total", "result", "claimed"); got != 1 {
		t.Errorf("claims_total{result=claimed} = %v, want 1", got)
	}
	if err := s.Ping(t.Context()); err != nil {
		t.Errorf("Ping: %v", err)
	}
	if _, err := s.Get(t.Context(), "<missing@example.com>"); !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("Get(missing) error = %v, want ErrNotFound", err)
	}
}

func TestDuplicateAfterSent(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, reg := newStore(t, pool, "worker-1", 0)
	r := req("<dup@example.com>", "body", 1)
	c := claimOne(t, s, r)
	wantResult(t, c, idempotency.Claimed)
	if lost := record(t, s, idempotency.Fate{MessageID: r.MessageID, Version: c.Version,
		Status: idempotency.StatusSent, Attempt: 1, Provider: "relay-a"}); len(lost) != 0 {
		t.Fatalf("Record lost %v", lost)
	}
	row := get(t, s, r.MessageID)
	if row.Status != idempotency.StatusSent || row.Version != 2 || row.SentAt.IsZero() ||
		row.LeaseOwner != "" || !row.LeaseExpiresAt.IsZero() || row.Provider != "relay-a" {
		t.Errorf("row after sent = %+v", row)
	}
	for _, attempt := range []int{1, 2} {
		again := claimOne(t, s, req(r.MessageID, "body", attempt))
		wantResult(t, again, idempotency.Duplicate)
		if again.Status != idempotency.StatusSent || again.Version != 2 {
			t.Errorf("duplicate claim = %+v, want status sent, version 2", again)
		}
	}
	if got := metricValue(t, reg, "postline_idempotency_claims_total", "result", "duplicate"); got != 2 {
		t.Errorf("claims_total{result=duplicate} = %v, want 2", got)
	}
	if row2 := get(t, s, r.MessageID); row2.Version != 2 {
		t.Errorf("duplicate claims changed the row: version %d", row2.Version)
	}
}

func TestConflictCounted(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, reg := newStore(t, pool, "worker-1", 0)
	id := "<conflict@example.com>"
	c := claimOne(t, s, req(id, "original", 1))
	wantResult(t, c, idempotency.Claimed)
	other := claimOne(t, s, req(id, "different", 1))
	wantResult(t, other, idempotency.Conflict)
	if other.Status != idempotency.StatusSending {
		t.Errorf("conflict status = %q, want sending", other.Status)
	}
	if got := metricValue(t, reg, "postline_idempotency_claims_total", "result", "conflict"); got != 1 {
		t.Errorf("claims_total{result=conflict} = %v, want 1", got)
	}
	if err := s.NoteConflicts(t.Context(), []string{id, "<no-row@example.com>", id}); err != nil {
		t.Fatalf("NoteConflicts: %v", err)
	}
	if err := s.NoteConflicts(t.Context(), []string{id}); err != nil {
		t.Fatalf("NoteConflicts: %v", err)
	}
	row := get(t, s, id)
	if row.Conflicts != 3 {
		t.Errorf("conflicts = %d, want 3", row.Conflicts)
	}
	// Counting conflicts must not break the owner's compare-and-set.
	if lost := record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusSent, Attempt: 1}); len(lost) != 0 {
		t.Errorf("Record after NoteConflicts lost %v", lost)
	}
	// A conflict stays a conflict on a terminal row.
	wantResult(t, claimOne(t, s, req(id, "different", 1)), idempotency.Conflict)
}

func TestSameIDTwiceInOneBatch(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	x, y := "<x@example.com>", "<y@example.com>"
	reqs := []idempotency.ClaimRequest{
		req(x, "x", 1),
		req(y, "y", 1),
		req(x, "x", 1),     // redelivered copy
		req(x, "other", 1), // same ID, other content
		req(y, "y", 1),
	}
	cs, err := s.Claim(t.Context(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	want := []idempotency.ClaimResult{idempotency.Claimed, idempotency.Claimed, idempotency.Duplicate, idempotency.Conflict, idempotency.Duplicate}
	for i := range want {
		if cs[i].MessageID != reqs[i].MessageID || cs[i].Result != want[i] {
			t.Errorf("claim %d = %s %v, want %s %v", i, cs[i].MessageID, cs[i].Result, reqs[i].MessageID, want[i])
		}
	}
	if row := get(t, s, x); row.Version != 1 || !bytes.Equal(row.PayloadHash, hash("x")) {
		t.Errorf("row x = version %d, want 1 with the first occurrence's hash", row.Version)
	}
}

func TestBusyUntilLeaseExpires(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	const lease = 300 * time.Millisecond
	a, regA := newStore(t, pool, "worker-a", lease)
	b, _ := newStore(t, pool, "worker-b", lease)
	r := req("<busy@example.com>", "body", 1)

	ca := claimOne(t, a, r)
	wantResult(t, ca, idempotency.Claimed)
	row := get(t, a, r.MessageID)

	cb := claimOne(t, b, r)
	wantResult(t, cb, idempotency.Busy)
	if !cb.RetryAt.Equal(row.LeaseExpiresAt) {
		t.Errorf("busy RetryAt = %v, want the lease expiry %v", cb.RetryAt, row.LeaseExpiresAt)
	}
	// Our own live lease makes another copy busy too.
	wantResult(t, claimOne(t, a, r), idempotency.Busy)

	// The owner "crashed": poll until b takes the expired lease over.
	deadline := time.Now().Add(10 * time.Second)
	for cb.Result != idempotency.Claimed {
		if time.Now().After(deadline) {
			t.Fatalf("still %v after the lease should have expired", cb.Result)
		}
		if cb.Result != idempotency.Busy {
			t.Fatalf("claim after lease = %v, want busy then claimed", cb.Result)
		}
		time.Sleep(50 * time.Millisecond) // poll interval, not the condition
		cb = claimOne(t, b, r)
	}
	if cb.Version != 2 {
		t.Errorf("takeover version = %d, want 2", cb.Version)
	}
	if row := get(t, b, r.MessageID); row.LeaseOwner != "worker-b" || row.Attempt != 1 {
		t.Errorf("row after takeover: owner %q attempt %d", row.LeaseOwner, row.Attempt)
	}

	// The old owner wakes up: its writes lose the compare-and-set.
	lost := record(t, a, idempotency.Fate{MessageID: r.MessageID, Version: ca.Version, Status: idempotency.StatusSent, Attempt: 1})
	if len(lost) != 1 || lost[0] != r.MessageID {
		t.Errorf("stale Record lost = %v, want [%s]", lost, r.MessageID)
	}
	if lost, err := a.ExtendLease(t.Context(), []string{r.MessageID}, []int64{ca.Version}); err != nil || len(lost) != 1 {
		t.Errorf("stale ExtendLease lost = %v, %v; want the ID", lost, err)
	}
	if got := metricValue(t, regA, "postline_idempotency_cas_conflicts_total"); got != 2 {
		t.Errorf("cas_conflicts_total = %v, want 2", got)
	}
	if lost := record(t, b, idempotency.Fate{MessageID: r.MessageID, Version: cb.Version, Status: idempotency.StatusSent, Attempt: 1}); len(lost) != 0 {
		t.Errorf("new owner's Record lost %v", lost)
	}
}

// TestRetryCopyOvertakingItsOutcome is the race of a short delay tier: the
// retry copy of attempt 2 is back from the scheduler while the row is still
// sending at attempt 1, because the sender publishes the copy before it
// records the fate. The copy waits for the row instead of being dropped as
// stale, and is claimed once the fate lands.
func TestRetryCopyOvertakingItsOutcome(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, reg := newStore(t, pool, "worker-1", time.Minute)
	id := "<overtaken@example.com>"
	first := claimOne(t, s, req(id, "body", 1))
	wantResult(t, first, idempotency.Claimed)
	lease := get(t, s, id).LeaseExpiresAt

	early := claimOne(t, s, req(id, "body", 2))
	wantResult(t, early, idempotency.Busy)
	if !early.RetryAt.Equal(lease) {
		t.Errorf("early copy RetryAt = %v, want the lease expiry %v", early.RetryAt, lease)
	}
	// Two attempts ahead is no copy a sender makes: stale, as before.
	wantResult(t, claimOne(t, s, req(id, "body", 3)), idempotency.Stale)

	if lost := record(t, s, idempotency.Fate{MessageID: id, Version: first.Version, Status: idempotency.StatusRetrying,
		Attempt: 2, Provider: "relay-a", ErrorClass: "transient", Error: "452 4.2.2 mailbox full"}); len(lost) != 0 {
		t.Fatalf("Record retrying lost %v", lost)
	}
	again := claimOne(t, s, req(id, "body", 2))
	wantResult(t, again, idempotency.Claimed)
	if again.Attempt != 2 {
		t.Errorf("claimed attempt = %d, want 2", again.Attempt)
	}
	if got := metricValue(t, reg, "postline_idempotency_claims_total", "result", "busy"); got != 1 {
		t.Errorf("claims_total{result=busy} = %v, want 1", got)
	}
}

// TestRetryCopyAfterItsOwnerDied: the copy of attempt 2 finds the row still
// sending at attempt 1 under a lapsed lease. The owner died between
// publishing the copy and recording the fate; its record is redelivered
// and makes attempt 1 again, so the copy is stale rather than waiting for a
// write that never comes.
func TestRetryCopyAfterItsOwnerDied(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", time.Second)
	id := "<orphaned@example.com>"
	wantResult(t, claimOne(t, s, req(id, "body", 1)), idempotency.Claimed)
	lease := get(t, s, id).LeaseExpiresAt
	c := claimOne(t, s, req(id, "body", 2))
	wantResult(t, c, idempotency.Busy) // the lease is still live
	for c.Result == idempotency.Busy {
		if !c.RetryAt.Equal(lease) {
			t.Fatalf("busy copy RetryAt = %v, want the lease expiry %v", c.RetryAt, lease)
		}
		if time.Until(lease) < -10*time.Second {
			t.Fatal("copy still busy long after the lease lapsed")
		}
		time.Sleep(50 * time.Millisecond) // poll interval, not the condition
		c = claimOne(t, s, req(id, "body", 2))
	}
	wantResult(t, c, idempotency.Stale)
	// The redelivered attempt 1 takes the row over.
	wantResult(t, claimOne(t, s, req(id, "body", 1)), idempotency.Claimed)
}

func TestStaleAttemptAndRetryReclaim(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, reg := newStore(t, pool, "worker-1", 0)
	id := "<retry@example.com>"
	c := claimOne(t, s, req(id, "body", 1))
	wantResult(t, c, idempotency.Claimed)
	if lost := record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusRetrying,
		Attempt: 2, Provider: "relay-a", ErrorClass: "transient", Error: "421 4.4.2 timeout"}); len(lost) != 0 {
		t.Fatalf("Record retrying lost %v", lost)
	}
	row := get(t, s, id)
	if row.Status != idempotency.StatusRetrying || row.Attempt != 2 || row.Version != 2 || row.LeaseOwner != "" ||
		!row.LeaseExpiresAt.IsZero() || row.ErrorClass != "transient" || row.LastError != "421 4.4.2 timeout" {
		t.Fatalf("row after retrying = %+v", row)
	}
	for _, attempt := range []int{1, 3} {
		stale := claimOne(t, s, req(id, "body", attempt))
		wantResult(t, stale, idempotency.Stale)
		if stale.Status != idempotency.StatusRetrying {
			t.Errorf("stale status = %q, want retrying", stale.Status)
		}
	}
	if got := metricValue(t, reg, "postline_idempotency_claims_total", "result", "stale"); got != 2 {
		t.Errorf("claims_total{result=stale} = %v, want 2", got)
	}
	re := claimOne(t, s, req(id, "body", 2))
	wantResult(t, re, idempotency.Claimed)
	if re.Version != 3 {
		t.Errorf("re-claim version = %d, want 3", re.Version)
	}
	// A stale copy of attempt 1 arriving while attempt 2 is leased is still stale.
	wantResult(t, claimOne(t, s, req(id, "body", 1)), idempotency.Stale)
	if lost := record(t, s, idempotency.Fate{MessageID: id, Version: re.Version, Status: idempotency.StatusFailed,
		ErrorClass: "permanent", Error: strings.Repeat("5", 5000)}); len(lost) != 0 {
		t.Fatalf("Record failed lost %v", lost)
	}
	row = get(t, s, id)
	if row.Status != idempotency.StatusFailed || row.Attempt != 2 || len(row.LastError) != idempotency.MaxErrorBytes ||
		row.Provider != "relay-a" || !row.SentAt.IsZero() {
		t.Errorf("row after failed: status %q attempt %d error %d bytes provider %q sent_at %v",
			row.Status, row.Attempt, len(row.LastError), row.Provider, row.SentAt)
	}
}

func TestRecordCASLost(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, reg := newStore(t, pool, "worker-1", 0)
	cs, err := s.Claim(t.Context(), []idempotency.ClaimRequest{req("<a@x>", "a", 1), req("<b@x>", "b", 1)})
	if err != nil {
		t.Fatal(err)
	}
	lost := record(t, s,
		idempotency.Fate{MessageID: "<a@x>", Version: cs[0].Version + 1, Status: idempotency.StatusSent}, // moved
		idempotency.Fate{MessageID: "<b@x>", Version: cs[1].Version, Status: idempotency.StatusSent},
		idempotency.Fate{MessageID: "<b@x>", Version: cs[1].Version, Status: idempotency.StatusFailed}, // twice
		idempotency.Fate{MessageID: "<none@x>", Version: 1, Status: idempotency.StatusSent},            // no row
	)
	want := []string{"<a@x>", "<b@x>", "<none@x>"}
	if strings.Join(lost, " ") != strings.Join(want, " ") {
		t.Errorf("lost = %v, want %v", lost, want)
	}
	if got := metricValue(t, reg, "postline_idempotency_cas_conflicts_total"); got != 3 {
		t.Errorf("cas_conflicts_total = %v, want 3", got)
	}
	if row := get(t, s, "<a@x>"); row.Status != idempotency.StatusSending || row.Version != 1 {
		t.Errorf("row a changed by a lost CAS: %+v", row)
	}
	if row := get(t, s, "<b@x>"); row.Status != idempotency.StatusSent {
		t.Errorf("row b = %q, want the first fate (sent)", row.Status)
	}
	if _, err := s.Record(t.Context(), []idempotency.Fate{{MessageID: "<a@x>", Version: 1, Status: idempotency.StatusSending}}); err == nil {
		t.Error("Record accepted status sending")
	}
}

func TestExtendLease(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 2*time.Second)
	other, _ := newStore(t, pool, "worker-2", 2*time.Second)
	c := claimOne(t, s, req("<long@x>", "body", 1))
	before := get(t, s, c.MessageID)
	lost, err := s.ExtendLease(t.Context(), []string{c.MessageID}, []int64{c.Version})
	if err != nil || len(lost) != 0 {
		t.Fatalf("ExtendLease = %v, %v", lost, err)
	}
	after := get(t, s, c.MessageID)
	if !after.LeaseExpiresAt.After(before.LeaseExpiresAt) || after.Version != before.Version {
		t.Errorf("lease %v -> %v, version %d -> %d; want a later lease, same version",
			before.LeaseExpiresAt, after.LeaseExpiresAt, before.Version, after.Version)
	}
	if lost, err := other.ExtendLease(t.Context(), []string{c.MessageID}, []int64{c.Version}); err != nil || len(lost) != 1 {
		t.Errorf("ExtendLease by another owner = %v, %v; want lost", lost, err)
	}
	if _, err := s.ExtendLease(t.Context(), []string{"a", "b"}, []int64{1}); err == nil {
		t.Error("ExtendLease accepted mismatched slices")
	}
}

func TestRecordRejected(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	sent := "<sent@x>"
	c := claimOne(t, s, req(sent, "body", 1))
	record(t, s, idempotency.Fate{MessageID: sent, Version: c.Version, Status: idempotency.StatusSent, Attempt: 1})
	enq := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	err := s.RecordRejected(t.Context(), []idempotency.Rejection{
		{MessageID: sent, PayloadHash: hash("evil"), Reason: "invalid_address", Error: "bad"},
		{MessageID: "<bad@x>", Reason: "header_injection", Error: "CR in Subject\x00", EnqueuedAt: enq},
		{MessageID: "<bad@x>", Reason: "again"},
		{MessageID: "", Reason: "undecodable"},
	})
	if err != nil {
		t.Fatalf("RecordRejected: %v", err)
	}
	if row := get(t, s, sent); row.Status != idempotency.StatusSent || row.ErrorClass != "" || !bytes.Equal(row.PayloadHash, hash("body")) {
		t.Errorf("RecordRejected overwrote the sent row: %+v", row)
	}
	bad := get(t, s, "<bad@x>")
	if bad.Status != idempotency.StatusDead || bad.ErrorClass != "header_injection" || bad.LastError != "CR in Subject" ||
		bad.Attempt != 0 || len(bad.PayloadHash) != 0 || !bad.EnqueuedAt.Equal(enq) {
		t.Errorf("rejected row = %+v", bad)
	}
	// A valid job published later under the rejected record's ID takes the
	// row over as its first attempt: nothing was ever sent for the ID, and
	// garbage keyed with someone else's Message-ID must not block that job.
	c = claimOne(t, s, req("<bad@x>", "body", 1))
	wantResult(t, c, idempotency.Claimed)
	if row := get(t, s, "<bad@x>"); row.Status != idempotency.StatusSending || row.Attempt != 1 || c.Attempt != 1 ||
		!bytes.Equal(row.PayloadHash, hash("body")) || row.ErrorClass != "" || row.LastError != "" {
		t.Errorf("row after a valid job took over a rejected one: %+v (claim attempt %d)", row, c.Attempt)
	}
	// From then on it is that job's row: another payload is a conflict.
	wantResult(t, claimOne(t, s, req("<bad@x>", "other", 1)), idempotency.Conflict)
	record(t, s, idempotency.Fate{MessageID: "<bad@x>", Version: c.Version, Status: idempotency.StatusSent, Attempt: 1})

	counts, err := s.CountByStatus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := map[idempotency.Status]int64{idempotency.StatusSent: 2}
	for _, st := range idempotency.Statuses {
		if counts[st] != want[st] {
			t.Errorf("count[%s] = %d, want %d", st, counts[st], want[st])
		}
	}
}

func TestConcurrentClaimers(t *testing.T) {
	t.Parallel()
	url, _ := migrated(t)
	const workers, ids = 8, 200
	pool := openPool(t, url, workers, nil)
	stores := make([]*idempotency.Store, workers)
	for w := range stores {
		stores[w], _ = newStore(t, pool, fmt.Sprintf("worker-%d", w), time.Minute)
	}
	reqs := make([]idempotency.ClaimRequest, ids)
	for i := range reqs {
		reqs[i] = req(fmt.Sprintf("<m%03d@x>", i), fmt.Sprint(i), 1)
	}

	// claimAll has every worker claim the whole batch at once, each in its
	// own order, and returns the winner of each ID.
	claimAll := func(round string) map[string]int {
		t.Helper()
		results := make([][]idempotency.Claim, workers)
		start := make(chan struct{})
		var g errgroup.Group
		for w := range workers {
			mine := append([]idempotency.ClaimRequest(nil), reqs...)
			rand.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
			g.Go(func() error {
				<-start
				cs, err := stores[w].Claim(t.Context(), mine)
				results[w] = cs
				return err
			})
		}
		close(start)
		if err := g.Wait(); err != nil {
			t.Fatalf("%s: Claim: %v", round, err)
		}
		winner := make(map[string]int)
		for w, cs := range results {
			for _, c := range cs {
				switch c.Result {
				case idempotency.Claimed:
					if prev, dup := winner[c.MessageID]; dup {
						t.Errorf("%s: %s claimed by workers %d and %d", round, c.MessageID, prev, w)
					}
					winner[c.MessageID] = w
				case idempotency.Busy:
				default:
					t.Errorf("%s: worker %d got %v for %s, want claimed or busy", round, w, c.Result, c.MessageID)
				}
			}
		}
		if len(winner) != ids {
			t.Fatalf("%s: %d of %d IDs claimed, want all exactly once", round, len(winner), ids)
		}
		return winner
	}

	// Round 1 races on INSERT; round 2 races on the conditional UPDATE of
	// retrying rows.
	winner := claimAll("insert race")
	var outs []idempotency.Fate
	for i := range reqs {
		reqs[i].Attempt = 2
		outs = append(outs, idempotency.Fate{MessageID: reqs[i].MessageID, Version: 1, Status: idempotency.StatusRetrying, Attempt: 2})
	}
	// Each worker records its own winners; all in one go via any store is
	// equivalent for the CAS (version 1).
	if lost := record(t, stores[winner[reqs[0].MessageID]], outs...); len(lost) != 0 {
		t.Fatalf("Record retrying lost %d", len(lost))
	}
	claimAll("update race")
}

type roundTripCounter struct {
	queries, batches, batchQueries atomic.Int64
}

func (c *roundTripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}
func (c *roundTripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *roundTripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.batches.Add(1)
	return ctx
}
func (c *roundTripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.batchQueries.Add(1)
}
func (c *roundTripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func TestBatchOfThousandIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	url, _ := migrated(t)
	tracer := &roundTripCounter{}
	pool := openPool(t, url, 2, tracer)
	s, reg := newStore(t, pool, "worker-1", 0)
	reqs := make([]idempotency.ClaimRequest, 1000)
	for i := range reqs {
		reqs[i] = req(fmt.Sprintf("<bulk-%04d@x>", i), fmt.Sprint(i), 1)
	}
	if err := pool.Ping(t.Context()); err != nil { // connect outside the count
		t.Fatal(err)
	}
	tracer.queries.Store(0)

	cs, err := s.Claim(t.Context(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if q, b := tracer.queries.Load(), tracer.batches.Load(); q != 0 || b != 1 {
		t.Errorf("Claim of 1000 made %d queries and %d batches, want 0 and 1", q, b)
	}
	if got := metricValue(t, reg, "postline_idempotency_round_trip_seconds", "op", "claim"); got != 1 {
		t.Errorf("round trips for claim = %v, want 1", got)
	}
	outs := make([]idempotency.Fate, len(cs))
	for i, c := range cs {
		if c.Result != idempotency.Claimed || c.MessageID != reqs[i].MessageID {
			t.Fatalf("claim %d = %+v, want claimed %s", i, c, reqs[i].MessageID)
		}
		outs[i] = idempotency.Fate{MessageID: c.MessageID, Version: c.Version, Status: idempotency.StatusSent, Attempt: 1}
	}
	before := tracer.queries.Load()
	if lost := record(t, s, outs...); len(lost) != 0 {
		t.Fatalf("Record lost %d", len(lost))
	}
	if got := tracer.queries.Load() - before; got != 1 {
		t.Errorf("Record of 1000 made %d queries, want 1", got)
	}
	counts, err := s.CountByStatus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if counts[idempotency.StatusSent] != 1000 {
		t.Errorf("sent rows = %d, want 1000", counts[idempotency.StatusSent])
	}
}

func TestClaimRejectsBadRequests(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	for _, r := range []idempotency.ClaimRequest{{MessageID: "", Attempt: 1}, {MessageID: "<a@x>", Attempt: 0}} {
		if _, err := s.Claim(t.Context(), []idempotency.ClaimRequest{r}); err == nil {
			t.Errorf("Claim(%+v) succeeded, want an error", r)
		}
	}
	if cs, err := s.Claim(t.Context(), nil); err != nil || cs != nil {
		t.Errorf("Claim(nil) = %v, %v", cs, err)
	}
}

// TestMixedConcurrentTraffic has workers claim, extend, hand back and note
// conflicts on overlapping IDs in random orders: no deadlock (an error), never
// two holders of one ID, and every version bump accounted for.
func TestMixedConcurrentTraffic(t *testing.T) {
	t.Parallel()
	url, _ := migrated(t)
	const workers, ids, rounds = 6, 50, 25
	pool := openPool(t, url, workers, nil)
	reqs := make([]idempotency.ClaimRequest, ids)
	for i := range reqs {
		reqs[i] = req(fmt.Sprintf("<mix%02d@x>", i), fmt.Sprint(i), 1)
	}
	var (
		mu       sync.Mutex
		holder   = make(map[string]int)
		claimed  = make(map[string]int64) // successful claims per ID
		recorded = make(map[string]int64) // won records per ID
	)
	var g errgroup.Group
	for w := range workers {
		s, _ := newStore(t, pool, fmt.Sprintf("worker-%d", w), time.Minute)
		g.Go(func() error {
			for range rounds {
				mine := append([]idempotency.ClaimRequest(nil), reqs...)
				rand.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
				cs, err := s.Claim(t.Context(), mine)
				if err != nil {
					return fmt.Errorf("worker %d: claim: %w", w, err)
				}
				var outs []idempotency.Fate
				var held []string
				var versions []int64
				mu.Lock()
				for _, c := range cs {
					if c.Result != idempotency.Claimed {
						continue
					}
					if other, ok := holder[c.MessageID]; ok {
						mu.Unlock()
						return fmt.Errorf("worker %d claimed %s held by worker %d", w, c.MessageID, other)
					}
					holder[c.MessageID] = w
					claimed[c.MessageID]++
					held = append(held, c.MessageID)
					versions = append(versions, c.Version)
					outs = append(outs, idempotency.Fate{MessageID: c.MessageID, Version: c.Version, Status: idempotency.StatusRetrying, Attempt: 1})
				}
				mu.Unlock()
				conflicts := make([]string, 0, ids/2)
				for _, r := range mine[:ids/2] {
					conflicts = append(conflicts, r.MessageID)
				}
				if err := s.NoteConflicts(t.Context(), conflicts); err != nil {
					return fmt.Errorf("worker %d: note conflicts: %w", w, err)
				}
				if lost, err := s.ExtendLease(t.Context(), held, versions); err != nil || len(lost) != 0 {
					return fmt.Errorf("worker %d: extend lease: lost %v, %w", w, lost, err)
				}
				rand.Shuffle(len(outs), func(i, j int) { outs[i], outs[j] = outs[j], outs[i] })
				mu.Lock()
				for _, o := range outs {
					delete(holder, o.MessageID) // handed back once Record commits
				}
				mu.Unlock()
				lost, err := s.Record(t.Context(), outs)
				if err != nil {
					return fmt.Errorf("worker %d: record: %w", w, err)
				}
				if len(lost) != 0 {
					return fmt.Errorf("worker %d: record lost %v while holding the lease", w, lost)
				}
				mu.Lock()
				for _, o := range outs {
					recorded[o.MessageID]++
				}
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	s, _ := newStore(t, pool, "checker", 0)
	var total int64
	for _, r := range reqs {
		row := get(t, s, r.MessageID)
		if want := claimed[r.MessageID] + recorded[r.MessageID]; row.Version != want {
			t.Errorf("%s: version %d, want %d claims + records", r.MessageID, row.Version, want)
		}
		total += claimed[r.MessageID]
	}
	if total < ids {
		t.Errorf("only %d claims in total", total)
	}
}

// TestRecordSentAtIsTheRelaysReply: a fate's At (the relay's 250, taken by
// the worker) is the row's sent_at and its accepted recipients' accepted_at,
// however late the batch is written; without one the database's now()
// stands in.
func TestRecordSentAtIsTheRelaysReply(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	at := time.Now().Add(-3 * time.Second).Truncate(time.Microsecond)
	for _, tt := range []struct {
		id     string
		at     time.Time
		wantAt func(sent time.Time) bool
	}{
		{id: "<at-given@example.com>", at: at, wantAt: func(sent time.Time) bool { return sent.Equal(at) }},
		{id: "<at-zero@example.com>", wantAt: func(sent time.Time) bool { return sent.After(at.Add(2 * time.Second)) }},
	} {
		c := claimOne(t, s, req(tt.id, "body", 1))
		record(t, s, idempotency.Fate{MessageID: tt.id, Version: c.Version, Status: idempotency.StatusSent, Attempt: 1,
			Provider: "relay-a", At: tt.at, Recipients: []idempotency.RecipientFate{
				rcpt(0, "a@example.com", idempotency.RecipientAccepted)}})
		row := get(t, s, tt.id)
		if !tt.wantAt(row.SentAt) {
			t.Errorf("%s: sent_at = %s, want the fate's At %s (zero: now)", tt.id, row.SentAt, tt.at)
		}
		rs, err := s.Recipients(t.Context(), []string{tt.id})
		if err != nil || len(rs[tt.id]) != 1 {
			t.Fatalf("%s: recipients = %+v, %v", tt.id, rs, err)
		}
		if got := rs[tt.id][0].AcceptedAt; !got.Equal(row.SentAt) {
			t.Errorf("%s: accepted_at = %s, want sent_at %s", tt.id, got, row.SentAt)
		}
	}
}
