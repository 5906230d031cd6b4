package idempotencytest

import (
	"context"
	"crypto/sha256"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/idempotency"
)

// ClaimStore is what a worker needs of the claim store: claim a batch of
// jobs before sending them, record their outcomes, keep the leases of the
// jobs in hand alive, store rejected input and count conflicts. Each call
// is one batch; results are in input order.
type ClaimStore interface {
	Claim(ctx context.Context, reqs []idempotency.ClaimRequest) ([]idempotency.Claim, error)
	Record(ctx context.Context, outs []idempotency.Outcome) (lost []string, err error)
	ExtendLease(ctx context.Context, ids []string, versions []int64) (lost []string, err error)
	RecordRejected(ctx context.Context, rejs []idempotency.Rejection) error
	NoteConflicts(ctx context.Context, ids []string) error
}

// Opener opens stores on one claim table: each is a worker named owner
// whose claims hold for lease. Stores of one Opener see each other's rows.
type Opener func(owner string, lease time.Duration) ClaimStore

// The leases the suite works with: long enough that a live lease cannot
// lapse during a check on a loaded machine, short enough to wait out.
const (
	longLease  = time.Minute
	shortLease = 400 * time.Millisecond
)

// Run checks the claim store's rules against the stores that newTable
// opens. It calls newTable once, for an empty table; the checks run in
// parallel on it, each on Message-IDs of its own.
func Run(t *testing.T, newTable func(t *testing.T) Opener) {
	open := newTable(t)
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, &suite{t: t, open: open, prefix: "<" + strings.ReplaceAll(c.name, " ", "-") + "-"})
		})
	}
}

var checks = []struct {
	name string
	run  func(t *testing.T, s *suite)
}{
	{"a new row is claimed as attempt 1 whatever the copy says", newRowAtAttemptOne},
	{"every new row of a batch starts at attempt 1", batchOfNewRows},
	{"a terminal row is a duplicate", duplicateAfterTerminal},
	{"another payload is a conflict whatever the state", conflict},
	{"the same ID twice in a batch", sameIDTwiceInABatch},
	{"a live lease is busy until it expires, then taken over", busyUntilTheLeaseExpires},
	{"the next attempt waits for a live lease", nextAttemptWaitsForTheLease},
	{"the next attempt is stale once the lease lapsed", nextAttemptAfterTheOwnerDied},
	{"another attempt is stale, the row's attempt re-claims", staleAttemptAndReclaim},
	{"record is a compare-and-set on the version", recordCompareAndSet},
	{"record keeps the attempt when given none", recordKeepsTheAttempt},
	{"extending a lease keeps the version and holds the row", extendLease},
	{"only the owner extends its lease", extendLeaseOwner},
	{"a rejected record's row is taken over by a valid job", recordRejected},
	{"noting conflicts does not break the owner's compare-and-set", noteConflicts},
	{"a mail keeps its life across attempts", lives},
	{"bad requests are refused whole", badRequests},
	{"empty batches", emptyBatches},
}

// suite is one check's view of the table.
type suite struct {
	t      *testing.T
	open   Opener
	prefix string
}

// id names a row of this check.
func (s *suite) id(name string) string { return s.prefix + name + "@suite>" }

func (s *suite) store(owner string, lease time.Duration) ClaimStore {
	return s.open(s.prefix+owner, lease)
}

func hash(content string) []byte {
	h := sha256.Sum256([]byte(content))
	return h[:]
}

func req(id, content string, attempt int) idempotency.ClaimRequest {
	return idempotency.ClaimRequest{MessageID: id, PayloadHash: hash(content), Attempt: attempt}
}

func (s *suite) claim(st ClaimStore, reqs ...idempotency.ClaimRequest) []idempotency.Claim {
	s.t.Helper()
	cs, err := st.Claim(s.t.Context(), reqs)
	if err != nil {
		s.t.Fatalf("Claim: %v", err)
	}
	if len(cs) != len(reqs) {
		s.t.Fatalf("Claim of %d requests = %d claims", len(reqs), len(cs))
	}
	for i := range cs {
		if cs[i].MessageID != reqs[i].MessageID {
			s.t.Fatalf("claim %d is for %s, want %s (input order)", i, cs[i].MessageID, reqs[i].MessageID)
		}
	}
	return cs
}

// want claims r and checks the result.
func (s *suite) want(st ClaimStore, r idempotency.ClaimRequest, want idempotency.ClaimResult) idempotency.Claim {
	s.t.Helper()
	c := s.claim(st, r)[0]
	if c.Result != want {
		s.t.Fatalf("claim %s attempt %d: %v (status %q, version %d, attempt %d), want %v",
			r.MessageID, r.Attempt, c.Result, c.Status, c.Version, c.Attempt, want)
	}
	return c
}

func (s *suite) record(st ClaimStore, outs ...idempotency.Outcome) []string {
	s.t.Helper()
	lost, err := st.Record(s.t.Context(), outs)
	if err != nil {
		s.t.Fatalf("Record: %v", err)
	}
	return lost
}

func (s *suite) recordWon(st ClaimStore, outs ...idempotency.Outcome) {
	s.t.Helper()
	if lost := s.record(st, outs...); len(lost) != 0 {
		s.t.Fatalf("Record lost %v", lost)
	}
}

func outcome(c idempotency.Claim, status idempotency.Status, attempt int) idempotency.Outcome {
	return idempotency.Outcome{MessageID: c.MessageID, Version: c.Version, Status: status, Attempt: attempt}
}

// until claims r every few milliseconds while the result is busy, for at
// most wait, and returns the first other result.
func (s *suite) until(st ClaimStore, r idempotency.ClaimRequest, wait time.Duration) idempotency.Claim {
	s.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		c := s.claim(st, r)[0]
		if c.Result != idempotency.Busy || time.Now().After(deadline) {
			return c
		}
		time.Sleep(20 * time.Millisecond) // poll interval, not the condition
	}
}

func newRowAtAttemptOne(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	c := s.want(st, req(s.id("forged"), "body", 5), idempotency.Claimed)
	if c.Attempt != 1 || c.Version != 1 || c.Status != idempotency.StatusSending {
		t.Errorf("claim = %+v, want sending, version 1, attempt 1", c)
	}
	// The job goes on at attempt 2: that copy claims it, the producer's
	// copy (5) is stale.
	s.recordWon(st, outcome(c, idempotency.StatusRetrying, c.Attempt+1))
	if stale := s.want(st, req(c.MessageID, "body", 5), idempotency.Stale); stale.Attempt != 2 || stale.Status != idempotency.StatusRetrying {
		t.Errorf("stale claim = %+v, want the row's attempt 2, retrying", stale)
	}
	if again := s.want(st, req(c.MessageID, "body", 2), idempotency.Claimed); again.Attempt != 2 || again.Version != 3 {
		t.Errorf("re-claim = %+v, want attempt 2, version 3", again)
	}
}

func batchOfNewRows(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	reqs := []idempotency.ClaimRequest{req(s.id("a"), "a", 1), req(s.id("b"), "b", 3), req(s.id("c"), "c", 7)}
	for i, c := range s.claim(st, reqs...) {
		if c.Result != idempotency.Claimed || c.Attempt != 1 || c.Version != 1 {
			t.Errorf("claim %d = %+v, want claimed at attempt 1, version 1", i, c)
		}
	}
}

func duplicateAfterTerminal(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	for _, status := range []idempotency.Status{idempotency.StatusSent, idempotency.StatusFailed,
		idempotency.StatusDead, idempotency.StatusSuppressed} {
		id := s.id(string(status))
		c := s.want(st, req(id, "body", 1), idempotency.Claimed)
		s.recordWon(st, outcome(c, status, 1))
		for _, attempt := range []int{1, 2} {
			dup := s.want(st, req(id, "body", attempt), idempotency.Duplicate)
			if dup.Status != status || dup.Version != 2 || dup.Attempt != 1 {
				t.Errorf("duplicate of a %s row = %+v, want status %s, version 2, attempt 1", status, dup, status)
			}
		}
		// A duplicate changes nothing: another store still finds version 2.
		if dup := s.want(s.store("other", longLease), req(id, "body", 1), idempotency.Duplicate); dup.Version != 2 {
			t.Errorf("duplicates moved the %s row to version %d", status, dup.Version)
		}
	}
}

func conflict(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	id := s.id("x")
	c := s.want(st, req(id, "original", 1), idempotency.Claimed)
	if other := s.want(st, req(id, "different", 1), idempotency.Conflict); other.Status != idempotency.StatusSending {
		t.Errorf("conflict under a lease = %+v, want status sending", other)
	}
	s.recordWon(st, outcome(c, idempotency.StatusRetrying, 2))
	s.want(st, req(id, "different", 2), idempotency.Conflict)
	c = s.want(st, req(id, "original", 2), idempotency.Claimed)
	s.recordWon(st, outcome(c, idempotency.StatusSent, 2))
	s.want(st, req(id, "different", 2), idempotency.Conflict)
}

func sameIDTwiceInABatch(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	x, y := s.id("x"), s.id("y")
	reqs := []idempotency.ClaimRequest{
		req(x, "x", 1),
		req(y, "y", 1),
		req(x, "x", 1),     // redelivered copy
		req(x, "other", 1), // same ID, other content
		req(y, "y", 1),
	}
	want := []idempotency.ClaimResult{idempotency.Claimed, idempotency.Claimed, idempotency.Duplicate, idempotency.Conflict, idempotency.Duplicate}
	for i, c := range s.claim(st, reqs...) {
		if c.Result != want[i] {
			t.Errorf("claim %d (%s) = %v, want %v", i, c.MessageID, c.Result, want[i])
		}
	}
	// The row is the first occurrence's.
	s.want(st, req(x, "other", 1), idempotency.Conflict)
	if c := s.want(st, req(x, "x", 1), idempotency.Busy); c.Version != 1 {
		t.Errorf("row x at version %d, want 1", c.Version)
	}
	// A later copy of another attempt is judged on the row, never claimed.
	cs := s.claim(st, req(s.id("z"), "z", 1), req(s.id("z"), "z", 2))
	if cs[0].Result != idempotency.Claimed || cs[1].Result == idempotency.Claimed {
		t.Errorf("claims of z at attempts 1 and 2 in one batch = %v, %v; want claimed, then not", cs[0].Result, cs[1].Result)
	}
}

func busyUntilTheLeaseExpires(t *testing.T, s *suite) {
	a, b := s.store("a", shortLease), s.store("b", shortLease)
	r := req(s.id("busy"), "body", 1)
	start := time.Now()
	ca := s.want(a, r, idempotency.Claimed)
	cb := s.want(b, r, idempotency.Busy)
	if cb.RetryAt.Before(start.Add(shortLease-time.Second)) || cb.RetryAt.After(time.Now().Add(shortLease+time.Second)) {
		t.Errorf("busy RetryAt = %v, want the lease's expiry, about %v after %v", cb.RetryAt, shortLease, start)
	}
	if cb.Status != idempotency.StatusSending || cb.Version != 1 {
		t.Errorf("busy claim = %+v, want the row seen: sending, version 1", cb)
	}
	// Our own live lease makes another copy busy too.
	s.want(a, r, idempotency.Busy)

	// The owner "crashed": b takes the expired lease over.
	cb = s.until(b, r, 10*time.Second)
	if cb.Result != idempotency.Claimed || cb.Version != 2 || cb.Attempt != 1 {
		t.Fatalf("claim after the lease = %+v, want claimed at version 2, attempt 1", cb)
	}
	// The old owner wakes up: its writes lose the compare-and-set.
	if lost := s.record(a, outcome(ca, idempotency.StatusSent, 1)); !slices.Equal(lost, []string{r.MessageID}) {
		t.Errorf("stale Record lost %v, want [%s]", lost, r.MessageID)
	}
	if lost, err := a.ExtendLease(t.Context(), []string{r.MessageID}, []int64{ca.Version}); err != nil || len(lost) != 1 {
		t.Errorf("stale ExtendLease = %v, %v; want the ID lost", lost, err)
	}
	s.recordWon(b, outcome(cb, idempotency.StatusSent, 1))
}

func nextAttemptWaitsForTheLease(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	id := s.id("overtaken")
	first := s.want(st, req(id, "body", 1), idempotency.Claimed)
	early := s.want(st, req(id, "body", 2), idempotency.Busy)
	if time.Until(early.RetryAt) < longLease/2 {
		t.Errorf("early copy RetryAt = %v, want the lease's expiry, about %v ahead", early.RetryAt, longLease)
	}
	// Two attempts ahead is no copy a sender makes: stale.
	s.want(st, req(id, "body", 3), idempotency.Stale)
	s.recordWon(st, outcome(first, idempotency.StatusRetrying, 2))
	if again := s.want(st, req(id, "body", 2), idempotency.Claimed); again.Attempt != 2 {
		t.Errorf("claimed attempt = %d, want 2", again.Attempt)
	}
}

func nextAttemptAfterTheOwnerDied(t *testing.T, s *suite) {
	st := s.store("w", shortLease)
	id := s.id("orphaned")
	s.want(st, req(id, "body", 1), idempotency.Claimed)
	s.want(st, req(id, "body", 2), idempotency.Busy) // the lease is still live
	if c := s.until(st, req(id, "body", 2), 10*time.Second); c.Result != idempotency.Stale {
		t.Fatalf("copy of attempt 2 after the lease lapsed = %v, want stale", c.Result)
	}
	// The redelivered attempt 1 takes the row over.
	s.want(st, req(id, "body", 1), idempotency.Claimed)
}

func staleAttemptAndReclaim(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	id := s.id("retry")
	c := s.want(st, req(id, "body", 1), idempotency.Claimed)
	s.recordWon(st, outcome(c, idempotency.StatusRetrying, 2))
	for _, attempt := range []int{1, 3} {
		if stale := s.want(st, req(id, "body", attempt), idempotency.Stale); stale.Status != idempotency.StatusRetrying || stale.Attempt != 2 {
			t.Errorf("stale claim = %+v, want retrying at attempt 2", stale)
		}
	}
	re := s.want(st, req(id, "body", 2), idempotency.Claimed)
	if re.Version != 3 || re.Attempt != 2 {
		t.Errorf("re-claim = %+v, want version 3, attempt 2", re)
	}
	// A stale copy of attempt 1 arriving while attempt 2 is leased is still stale.
	s.want(st, req(id, "body", 1), idempotency.Stale)
}

func recordCompareAndSet(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	a, b, none := s.id("a"), s.id("b"), s.id("none")
	cs := s.claim(st, req(a, "a", 1), req(b, "b", 1))
	lost := s.record(st,
		idempotency.Outcome{MessageID: a, Version: cs[0].Version + 1, Status: idempotency.StatusSent}, // moved
		idempotency.Outcome{MessageID: b, Version: cs[1].Version, Status: idempotency.StatusSent},
		idempotency.Outcome{MessageID: b, Version: cs[1].Version, Status: idempotency.StatusFailed}, // twice
		idempotency.Outcome{MessageID: none, Version: 1, Status: idempotency.StatusSent},            // no row
	)
	if want := []string{a, b, none}; !slices.Equal(lost, want) {
		t.Errorf("lost = %v, want %v", lost, want)
	}
	// a is unchanged (still ours, leased); b took its first outcome.
	if c := s.want(st, req(a, "a", 1), idempotency.Busy); c.Version != 1 || c.Status != idempotency.StatusSending {
		t.Errorf("row a after a lost compare-and-set = %+v, want sending at version 1", c)
	}
	if c := s.want(st, req(b, "b", 1), idempotency.Duplicate); c.Status != idempotency.StatusSent {
		t.Errorf("row b = %q, want the first outcome (sent)", c.Status)
	}
	// A terminal row takes no second outcome at the old version.
	if lost := s.record(st, idempotency.Outcome{MessageID: b, Version: cs[1].Version, Status: idempotency.StatusFailed}); len(lost) != 1 {
		t.Errorf("second outcome at the claim's version lost %v, want [%s]", lost, b)
	}
}

func recordKeepsTheAttempt(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	id := s.id("keep")
	c := s.want(st, req(id, "body", 1), idempotency.Claimed)
	s.recordWon(st, outcome(c, idempotency.StatusRetrying, 3))
	c = s.want(st, req(id, "body", 3), idempotency.Claimed)
	s.recordWon(st, outcome(c, idempotency.StatusFailed, 0))
	if dup := s.want(st, req(id, "body", 3), idempotency.Duplicate); dup.Attempt != 3 || dup.Status != idempotency.StatusFailed {
		t.Errorf("row after an outcome without attempt = %+v, want failed at attempt 3", dup)
	}
}

func extendLease(t *testing.T, s *suite) {
	owner, other := s.store("owner", shortLease), s.store("other", shortLease)
	id := s.id("long")
	c := s.want(owner, req(id, "body", 1), idempotency.Claimed)
	// Keep the lease alive past three of its lengths; the other worker
	// finds the row busy all along.
	for end := time.Now().Add(3 * shortLease); time.Now().Before(end); time.Sleep(shortLease / 4) {
		if lost, err := owner.ExtendLease(t.Context(), []string{id}, []int64{c.Version}); err != nil || len(lost) != 0 {
			t.Fatalf("ExtendLease = %v, %v", lost, err)
		}
		if busy := s.want(other, req(id, "body", 1), idempotency.Busy); busy.Version != c.Version {
			t.Fatalf("busy row at version %d, want the claim's %d: extending must not bump it", busy.Version, c.Version)
		}
	}
	// The claim's version is still good for the outcome.
	s.recordWon(owner, outcome(c, idempotency.StatusSent, 1))
	if lost, err := owner.ExtendLease(t.Context(), []string{id}, []int64{c.Version}); err != nil || len(lost) != 1 {
		t.Errorf("ExtendLease of a recorded row = %v, %v; want it lost", lost, err)
	}
	if _, err := owner.ExtendLease(t.Context(), []string{"a", "b"}, []int64{1}); err == nil {
		t.Error("ExtendLease accepted mismatched slices")
	}

	// An expired lease nobody took over is still ours to extend.
	id = s.id("lapsed")
	c = s.want(owner, req(id, "body", 1), idempotency.Claimed)
	time.Sleep(shortLease + 100*time.Millisecond)
	if lost, err := owner.ExtendLease(t.Context(), []string{id}, []int64{c.Version}); err != nil || len(lost) != 0 {
		t.Fatalf("ExtendLease of a lapsed lease = %v, %v; want it extended", lost, err)
	}
	s.want(other, req(id, "body", 1), idempotency.Busy)
}

func extendLeaseOwner(t *testing.T, s *suite) {
	owner, other := s.store("owner", longLease), s.store("other", longLease)
	id := s.id("mine")
	c := s.want(owner, req(id, "body", 1), idempotency.Claimed)
	if lost, err := other.ExtendLease(t.Context(), []string{id}, []int64{c.Version}); err != nil || !slices.Equal(lost, []string{id}) {
		t.Errorf("ExtendLease by another owner = %v, %v; want it lost", lost, err)
	}
	if lost, err := owner.ExtendLease(t.Context(), []string{id, s.id("none")}, []int64{c.Version + 1, 1}); err != nil || len(lost) != 2 {
		t.Errorf("ExtendLease at another version and of no row = %v, %v; want both lost", lost, err)
	}
}

func recordRejected(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	sent, bad := s.id("sent"), s.id("bad")
	c := s.want(st, req(sent, "body", 1), idempotency.Claimed)
	s.recordWon(st, outcome(c, idempotency.StatusSent, 1))
	err := st.RecordRejected(t.Context(), []idempotency.Rejection{
		{MessageID: sent, PayloadHash: hash("evil"), Reason: "invalid_address", Error: "bad"},
		{MessageID: bad, Reason: "header_injection", Error: "CR in Subject"},
		{MessageID: bad, Reason: "again"},
		{MessageID: "", Reason: "undecodable"},
	})
	if err != nil {
		t.Fatalf("RecordRejected: %v", err)
	}
	// An existing row is left alone.
	if dup := s.want(st, req(sent, "body", 1), idempotency.Duplicate); dup.Status != idempotency.StatusSent || dup.Version != 2 {
		t.Errorf("RecordRejected changed the sent row: %+v", dup)
	}
	// A valid job published later under the rejected record's ID takes
	// the row over as its first attempt, whatever its payload.
	c = s.want(st, req(bad, "body", 4), idempotency.Claimed)
	if c.Attempt != 1 || c.Status != idempotency.StatusSending {
		t.Errorf("claim of a rejected row = %+v, want sending at attempt 1", c)
	}
	// From then on it is that job's row.
	s.want(st, req(bad, "other", 1), idempotency.Conflict)
	s.recordWon(st, outcome(c, idempotency.StatusSent, 1))
	s.want(st, req(bad, "body", 1), idempotency.Duplicate)

	// A rejection of an ID being sent does not touch the claim.
	id := s.id("sending")
	c = s.want(st, req(id, "body", 1), idempotency.Claimed)
	if err := st.RecordRejected(t.Context(), []idempotency.Rejection{{MessageID: id, Reason: "late"}}); err != nil {
		t.Fatal(err)
	}
	s.recordWon(st, outcome(c, idempotency.StatusSent, 1))
}

func noteConflicts(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	id := s.id("noted")
	c := s.want(st, req(id, "original", 1), idempotency.Claimed)
	s.want(st, req(id, "different", 1), idempotency.Conflict)
	if err := st.NoteConflicts(t.Context(), []string{id, s.id("no-row"), id}); err != nil {
		t.Fatalf("NoteConflicts: %v", err)
	}
	if busy := s.want(st, req(id, "original", 1), idempotency.Busy); busy.Version != c.Version {
		t.Errorf("NoteConflicts moved the version from %d to %d", c.Version, busy.Version)
	}
	s.recordWon(st, outcome(c, idempotency.StatusSent, 1))
}

func lives(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	id := s.id("life")
	c := s.want(st, req(id, "a", 1), idempotency.Claimed)
	first := c.Life
	if first == 0 {
		t.Fatal("a new row's claim has life 0, want one drawn for it")
	}
	s.recordWon(st, outcome(c, idempotency.StatusRetrying, 2))
	if c = s.want(st, req(id, "a", 2), idempotency.Claimed); c.Life != first {
		t.Errorf("the retry's claim has life %d, want the first attempt's %d", c.Life, first)
	}
	if busy := s.want(st, req(id, "a", 2), idempotency.Busy); busy.Life != 0 {
		t.Errorf("a busy claim has life %d, want 0 (only claims carry it)", busy.Life)
	}
	if other := s.want(st, req(s.id("other"), "a", 1), idempotency.Claimed); other.Life == 0 || other.Life == first {
		t.Errorf("another mail's life = %d, want one of its own (not %d)", other.Life, first)
	}
	// A valid job taking over a rejected row starts a life of its own.
	bad := s.id("rejected")
	if err := st.RecordRejected(t.Context(), []idempotency.Rejection{{MessageID: bad, Reason: "invalid"}}); err != nil {
		t.Fatal(err)
	}
	if c := s.want(st, req(bad, "a", 1), idempotency.Claimed); c.Life == 0 {
		t.Error("the claim taking over a rejected row has life 0")
	}
}

func badRequests(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	good := req(s.id("good"), "body", 1)
	for _, bad := range []idempotency.ClaimRequest{{MessageID: "", Attempt: 1}, {MessageID: s.id("zero"), Attempt: 0}} {
		if _, err := st.Claim(t.Context(), []idempotency.ClaimRequest{good, bad}); err == nil {
			t.Errorf("Claim(%+v) succeeded, want an error", bad)
		}
	}
	// Nothing of a refused batch was claimed.
	s.want(st, good, idempotency.Claimed)
	for _, bad := range []idempotency.Outcome{
		{MessageID: "", Version: 1, Status: idempotency.StatusSent},
		{MessageID: good.MessageID, Version: 1, Status: idempotency.StatusSending},
		{MessageID: good.MessageID, Version: 1, Status: idempotency.StatusPending},
		{MessageID: good.MessageID, Version: 1, Status: idempotency.StatusRetrying, Attempt: 0},
		{MessageID: good.MessageID, Version: 1, Status: idempotency.StatusSent, Attempt: -1},
	} {
		ok := idempotency.Outcome{MessageID: s.id("other"), Version: 1, Status: idempotency.StatusSent}
		if _, err := st.Record(t.Context(), []idempotency.Outcome{ok, bad}); err == nil {
			t.Errorf("Record(%+v) succeeded, want an error", bad)
		}
	}
	// The claim is untouched by the refused outcomes.
	s.recordWon(st, idempotency.Outcome{MessageID: good.MessageID, Version: 1, Status: idempotency.StatusSent, Attempt: 1})
}

func emptyBatches(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	if cs, err := st.Claim(t.Context(), nil); err != nil || cs != nil {
		t.Errorf("Claim(nil) = %v, %v; want nothing", cs, err)
	}
	if lost, err := st.Record(t.Context(), nil); err != nil || lost != nil {
		t.Errorf("Record(nil) = %v, %v; want nothing", lost, err)
	}
	if lost, err := st.ExtendLease(t.Context(), nil, nil); err != nil || lost != nil {
		t.Errorf("ExtendLease(nil) = %v, %v; want nothing", lost, err)
	}
	if err := st.RecordRejected(t.Context(), nil); err != nil {
		t.Errorf("RecordRejected(nil) = %v", err)
	}
	if err := st.NoteConflicts(t.Context(), nil); err != nil {
		t.Errorf("NoteConflicts(nil) = %v", err)
	}
}
