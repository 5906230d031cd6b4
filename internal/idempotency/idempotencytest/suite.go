package idempotencytest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/returnpath"
)

// ClaimStore is what a worker needs of the claim store: claim a batch of
// jobs before sending them, record their fates, keep the leases of the
// jobs in hand alive, store rejected input and count conflicts. Each call
// is one batch; results are in input order.
type ClaimStore interface {
	Claim(ctx context.Context, reqs []idempotency.ClaimRequest) ([]idempotency.Claim, error)
	Record(ctx context.Context, outs []idempotency.Fate) (lost []string, err error)
	ExtendLease(ctx context.Context, ids []string, versions []int64) (lost []string, err error)
	RecordRejected(ctx context.Context, rejs []idempotency.Rejection) error
	NoteConflicts(ctx context.Context, ids []string) error
}

// ReportStore is what the applier of delivery reports needs of the store:
// find the recipient a report names, move it on by compare-and-set with
// the outbox entry of what the move owes, and drain the outbox.
type ReportStore interface {
	RecipientsByRef(ctx context.Context, ref []byte, idx int) ([]idempotency.Recipient, error)
	RecipientByAddress(ctx context.Context, messageID, address string) (idempotency.Recipient, bool, error)
	MessageExists(ctx context.Context, messageID string) (bool, error)
	Resolve(ctx context.Context, res []idempotency.Resolution) (applied []bool, settled map[string]string, err error)
	Outbox(ctx context.Context, minAge time.Duration, limit int) ([]idempotency.OutboxEntry, error)
	OutboxDone(ctx context.Context, eventIDs []string) error
}

// Store is the claim store as the suite checks it: the worker's side and
// the report applier's.
type Store interface {
	ClaimStore
	ReportStore
}

// Opener opens stores on one claim table: each is a worker named owner
// whose claims hold for lease. Stores of one Opener see each other's rows.
type Opener func(owner string, lease time.Duration) Store

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
	{"the record writes the recipients, found by reference and address", recipientsWritten},
	{"what an earlier attempt decided for a recipient stays", earlierAttemptStays},
	{"resolve is a compare-and-set on the state and the life", resolveCompareAndSet},
	{"resolve writes the outbox entry of what it moved, once", resolveOutbox},
	{"a mail is settled once none of its recipients is open", settle},
	{"bad recipients and resolutions are refused", badRecipients},
}

// suite is one check's view of the table.
type suite struct {
	t      *testing.T
	open   Opener
	prefix string
}

// id names a row of this check.
func (s *suite) id(name string) string { return s.prefix + name + "@suite>" }

func (s *suite) store(owner string, lease time.Duration) Store {
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

func (s *suite) record(st ClaimStore, outs ...idempotency.Fate) []string {
	s.t.Helper()
	lost, err := st.Record(s.t.Context(), outs)
	if err != nil {
		s.t.Fatalf("Record: %v", err)
	}
	return lost
}

func (s *suite) recordWon(st ClaimStore, outs ...idempotency.Fate) {
	s.t.Helper()
	if lost := s.record(st, outs...); len(lost) != 0 {
		s.t.Fatalf("Record lost %v", lost)
	}
}

func fate(c idempotency.Claim, status idempotency.Status, attempt int) idempotency.Fate {
	return idempotency.Fate{MessageID: c.MessageID, Version: c.Version, Status: status, Attempt: attempt}
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
	s.recordWon(st, fate(c, idempotency.StatusRetrying, c.Attempt+1))
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
		s.recordWon(st, fate(c, status, 1))
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
	s.recordWon(st, fate(c, idempotency.StatusRetrying, 2))
	s.want(st, req(id, "different", 2), idempotency.Conflict)
	c = s.want(st, req(id, "original", 2), idempotency.Claimed)
	s.recordWon(st, fate(c, idempotency.StatusSent, 2))
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
	if lost := s.record(a, fate(ca, idempotency.StatusSent, 1)); !slices.Equal(lost, []string{r.MessageID}) {
		t.Errorf("stale Record lost %v, want [%s]", lost, r.MessageID)
	}
	if lost, err := a.ExtendLease(t.Context(), []string{r.MessageID}, []int64{ca.Version}); err != nil || len(lost) != 1 {
		t.Errorf("stale ExtendLease = %v, %v; want the ID lost", lost, err)
	}
	s.recordWon(b, fate(cb, idempotency.StatusSent, 1))
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
	s.recordWon(st, fate(first, idempotency.StatusRetrying, 2))
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
	s.recordWon(st, fate(c, idempotency.StatusRetrying, 2))
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
		idempotency.Fate{MessageID: a, Version: cs[0].Version + 1, Status: idempotency.StatusSent}, // moved
		idempotency.Fate{MessageID: b, Version: cs[1].Version, Status: idempotency.StatusSent},
		idempotency.Fate{MessageID: b, Version: cs[1].Version, Status: idempotency.StatusFailed}, // twice
		idempotency.Fate{MessageID: none, Version: 1, Status: idempotency.StatusSent},            // no row
	)
	if want := []string{a, b, none}; !slices.Equal(lost, want) {
		t.Errorf("lost = %v, want %v", lost, want)
	}
	// a is unchanged (still ours, leased); b took its first fate.
	if c := s.want(st, req(a, "a", 1), idempotency.Busy); c.Version != 1 || c.Status != idempotency.StatusSending {
		t.Errorf("row a after a lost compare-and-set = %+v, want sending at version 1", c)
	}
	if c := s.want(st, req(b, "b", 1), idempotency.Duplicate); c.Status != idempotency.StatusSent {
		t.Errorf("row b = %q, want the first fate (sent)", c.Status)
	}
	// A terminal row takes no second fate at the old version.
	if lost := s.record(st, idempotency.Fate{MessageID: b, Version: cs[1].Version, Status: idempotency.StatusFailed}); len(lost) != 1 {
		t.Errorf("second fate at the claim's version lost %v, want [%s]", lost, b)
	}
}

func recordKeepsTheAttempt(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	id := s.id("keep")
	c := s.want(st, req(id, "body", 1), idempotency.Claimed)
	s.recordWon(st, fate(c, idempotency.StatusRetrying, 3))
	c = s.want(st, req(id, "body", 3), idempotency.Claimed)
	s.recordWon(st, fate(c, idempotency.StatusFailed, 0))
	if dup := s.want(st, req(id, "body", 3), idempotency.Duplicate); dup.Attempt != 3 || dup.Status != idempotency.StatusFailed {
		t.Errorf("row after a fate without attempt = %+v, want failed at attempt 3", dup)
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
	// The claim's version is still good for the fate.
	s.recordWon(owner, fate(c, idempotency.StatusSent, 1))
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
	s.recordWon(st, fate(c, idempotency.StatusSent, 1))
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
	s.recordWon(st, fate(c, idempotency.StatusSent, 1))
	s.want(st, req(bad, "body", 1), idempotency.Duplicate)

	// A rejection of an ID being sent does not touch the claim.
	id := s.id("sending")
	c = s.want(st, req(id, "body", 1), idempotency.Claimed)
	if err := st.RecordRejected(t.Context(), []idempotency.Rejection{{MessageID: id, Reason: "late"}}); err != nil {
		t.Fatal(err)
	}
	s.recordWon(st, fate(c, idempotency.StatusSent, 1))
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
	s.recordWon(st, fate(c, idempotency.StatusSent, 1))
}

func lives(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	id := s.id("life")
	c := s.want(st, req(id, "a", 1), idempotency.Claimed)
	first := c.Life
	if first == 0 {
		t.Fatal("a new row's claim has life 0, want one drawn for it")
	}
	s.recordWon(st, fate(c, idempotency.StatusRetrying, 2))
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
	for _, bad := range []idempotency.Fate{
		{MessageID: "", Version: 1, Status: idempotency.StatusSent},
		{MessageID: good.MessageID, Version: 1, Status: idempotency.StatusSending},
		{MessageID: good.MessageID, Version: 1, Status: idempotency.StatusPending},
		{MessageID: good.MessageID, Version: 1, Status: idempotency.StatusRetrying, Attempt: 0},
		{MessageID: good.MessageID, Version: 1, Status: idempotency.StatusSent, Attempt: -1},
	} {
		ok := idempotency.Fate{MessageID: s.id("other"), Version: 1, Status: idempotency.StatusSent}
		if _, err := st.Record(t.Context(), []idempotency.Fate{ok, bad}); err == nil {
			t.Errorf("Record(%+v) succeeded, want an error", bad)
		}
	}
	// The claim is untouched by the refused fates.
	s.recordWon(st, idempotency.Fate{MessageID: good.MessageID, Version: 1, Status: idempotency.StatusSent, Attempt: 1})
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

func rcpt(idx int, state idempotency.RecipientState) idempotency.RecipientFate {
	return idempotency.RecipientFate{Index: idx, Address: fmt.Sprintf("R%d@Example.com", idx), State: state,
		Attempt: 1, Provider: "relay-a", Source: "smtp"}
}

// sent claims id and records it sent to rcpts, to be confirmed within an
// hour when confirm, and returns the claim.
func (s *suite) sent(st Store, id string, confirm bool, rcpts ...idempotency.RecipientFate) idempotency.Claim {
	s.t.Helper()
	c := s.want(st, req(id, "body", 1), idempotency.Claimed)
	o := fate(c, idempotency.StatusSent, 1)
	o.Stream, o.Recipients = "bulk", rcpts
	if confirm {
		o.ConfirmBy = time.Now().Add(time.Hour)
	}
	s.recordWon(st, o)
	return c
}

func (s *suite) byRef(st Store, id string, idx int) idempotency.Recipient {
	s.t.Helper()
	ref := returnpath.RefOf(id)
	list, err := st.RecipientsByRef(s.t.Context(), ref[:], idx)
	if err != nil {
		s.t.Fatalf("RecipientsByRef(%s, %d): %v", id, idx, err)
	}
	if len(list) != 1 || list[0].MessageID != id || list[0].Index != idx {
		s.t.Fatalf("RecipientsByRef(%s, %d) = %+v, want that one recipient", id, idx, list)
	}
	return list[0]
}

func (s *suite) resolve(st Store, res ...idempotency.Resolution) ([]bool, map[string]string) {
	s.t.Helper()
	applied, settled, err := st.Resolve(s.t.Context(), res)
	if err != nil {
		s.t.Fatalf("Resolve: %v", err)
	}
	if len(applied) != len(res) {
		s.t.Fatalf("Resolve of %d = %d results", len(res), len(applied))
	}
	return applied, settled
}

func move(c idempotency.Claim, idx int, from, to idempotency.RecipientState) idempotency.Resolution {
	return idempotency.Resolution{MessageID: c.MessageID, Index: idx, Life: c.Life, From: from, To: to, Source: "dsn"}
}

func recipientsWritten(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	id := s.id("mail")
	bounced := rcpt(1, idempotency.RecipientBounced)
	bounced.BounceType, bounced.Status, bounced.Code, bounced.Diagnostic = "hard", "5.1.1", 550, "no such user"
	c := s.sent(st, id, true, rcpt(0, idempotency.RecipientAccepted), bounced)
	r := s.byRef(st, id, 0)
	if r.State != idempotency.RecipientAccepted || r.Address != "R0@Example.com" || r.Attempt != 1 || r.Provider != "relay-a" ||
		r.AcceptedAt.IsZero() || !r.ResolvedAt.IsZero() || r.Stream != "bulk" || r.Life != c.Life ||
		time.Until(r.ConfirmBy) < 59*time.Minute || r.Confirmation != "" {
		t.Errorf("accepted recipient = %+v", r)
	}
	r = s.byRef(st, id, 1)
	if r.State != idempotency.RecipientBounced || r.BounceType != "hard" || r.Status != "5.1.1" || r.Code != 550 ||
		r.Diagnostic != "no such user" || r.Source != "smtp" || r.ResolvedAt.IsZero() || !r.AcceptedAt.IsZero() {
		t.Errorf("bounced recipient = %+v", r)
	}
	recipientLookups(t, st, id)
	claimedMailHasNoRecipients(t, s, st)
}

// recipientLookups checks the lookups of mail id's recipients by
// return-path reference and by address.
func recipientLookups(t *testing.T, st Store, id string) {
	ref := returnpath.RefOf(id)
	if list, err := st.RecipientsByRef(t.Context(), ref[:], 2); err != nil || len(list) != 0 {
		t.Errorf("RecipientsByRef of an index the mail lacks = %+v, %v; want none", list, err)
	}
	got, ok, err := st.RecipientByAddress(t.Context(), id, "r1@EXAMPLE.COM")
	if err != nil || !ok || got.Index != 1 {
		t.Errorf("RecipientByAddress in another case = %+v, %v, %v; want recipient 1", got, ok, err)
	}
	if _, ok, err := st.RecipientByAddress(t.Context(), id, "nobody@example.com"); err != nil || ok {
		t.Errorf("RecipientByAddress of a stranger = %v, %v; want none", ok, err)
	}
}

// claimedMailHasNoRecipients checks that a mail claimed and not yet
// recorded exists, with no recipients.
func claimedMailHasNoRecipients(t *testing.T, s *suite, st Store) {
	claimed := s.id("claimed")
	s.want(st, req(claimed, "body", 1), idempotency.Claimed)
	for want, id := range map[bool]string{true: claimed, false: s.id("never")} {
		if got, err := st.MessageExists(t.Context(), id); err != nil || got != want {
			t.Errorf("MessageExists(%s) = %v, %v; want %v", id, got, err, want)
		}
	}
	if _, ok, err := st.RecipientByAddress(t.Context(), claimed, "R0@Example.com"); err != nil || ok {
		t.Errorf("RecipientByAddress of a mail not recorded = %v, %v; want none", ok, err)
	}
}

func earlierAttemptStays(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	id := s.id("two")
	c := s.want(st, req(id, "body", 1), idempotency.Claimed)
	o := fate(c, idempotency.StatusRetrying, 2)
	o.Recipients = []idempotency.RecipientFate{rcpt(0, idempotency.RecipientAccepted), rcpt(1, idempotency.RecipientPending)}
	s.recordWon(st, o)
	c = s.want(st, req(id, "body", 2), idempotency.Claimed)
	second := rcpt(0, idempotency.RecipientBounced)
	second.Attempt = 2
	last := rcpt(1, idempotency.RecipientAccepted)
	last.Attempt = 2
	o = fate(c, idempotency.StatusSent, 2)
	o.Recipients = []idempotency.RecipientFate{second, last}
	s.recordWon(st, o)
	if r := s.byRef(st, id, 0); r.State != idempotency.RecipientAccepted || r.Attempt != 1 {
		t.Errorf("recipient 0 = %s at attempt %d, want the first attempt's accepted", r.State, r.Attempt)
	}
	if r := s.byRef(st, id, 1); r.State != idempotency.RecipientAccepted || r.Attempt != 2 {
		t.Errorf("recipient 1 = %s at attempt %d, want the second attempt's accepted", r.State, r.Attempt)
	}
}

func resolveCompareAndSet(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	id := s.id("cas")
	c := s.sent(st, id, true, rcpt(0, idempotency.RecipientAccepted), rcpt(1, idempotency.RecipientAccepted),
		rcpt(2, idempotency.RecipientAccepted), rcpt(3, idempotency.RecipientAccepted))
	other := c
	other.Life = c.Life + 1
	unchecked := c
	unchecked.Life = 0
	bounce := move(c, 1, idempotency.RecipientAccepted, idempotency.RecipientBounced)
	bounce.BounceType, bounce.Status, bounce.Code, bounce.Diagnostic = "hard", "5.1.1", 550, "no such user"
	applied, _ := s.resolve(st,
		move(c, 0, idempotency.RecipientAccepted, idempotency.RecipientDelivered),
		move(other, 2, idempotency.RecipientAccepted, idempotency.RecipientDelivered),    // another life
		move(c, 0, idempotency.RecipientAccepted, idempotency.RecipientBounced),          // the same recipient again
		move(c, 5, idempotency.RecipientAccepted, idempotency.RecipientDelivered),        // no such recipient
		move(unchecked, 3, idempotency.RecipientDelivered, idempotency.RecipientBounced), // decided on a state it is not in
		bounce,
	)
	if want := []bool{true, false, false, false, false, true}; !slices.Equal(applied, want) {
		t.Errorf("applied = %v, want %v", applied, want)
	}
	r := s.byRef(st, id, 0)
	if r.State != idempotency.RecipientDelivered || r.Source != "dsn" || r.ResolvedAt.IsZero() {
		t.Errorf("recipient 0 = %+v, want delivered by the dsn", r)
	}
	if r := s.byRef(st, id, 1); r.State != idempotency.RecipientBounced || r.BounceType != "hard" || r.Code != 550 {
		t.Errorf("recipient 1 = %+v, want bounced hard with 550", r)
	}
	if r := s.byRef(st, id, 2); r.State != idempotency.RecipientAccepted {
		t.Errorf("recipient 2 = %s, want accepted: the resolution was of another life", r.State)
	}
	if r := s.byRef(st, id, 3); r.State != idempotency.RecipientAccepted {
		t.Errorf("recipient 3 = %s, want accepted: the resolution was decided on delivered", r.State)
	}
	// A decision made on a state that is gone moves nothing; without a
	// life the compare-and-set is on the state alone.
	applied, _ = s.resolve(st, move(c, 0, idempotency.RecipientAccepted, idempotency.RecipientBounced),
		move(unchecked, 2, idempotency.RecipientAccepted, idempotency.RecipientDelivered))
	if !slices.Equal(applied, []bool{false, true}) {
		t.Errorf("applied = %v, want [false true]", applied)
	}
}

func resolveOutbox(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	c := s.sent(st, s.id("owed"), false, rcpt(0, idempotency.RecipientAccepted), rcpt(1, idempotency.RecipientAccepted))
	e1, e2, e3 := s.id("event-1"), s.id("event-2"), s.id("event-3")
	withEntry := func(r idempotency.Resolution, eventID, body string) idempotency.Resolution {
		r.EventID, r.Effect = eventID, []byte(body)
		return r
	}
	applied, _ := s.resolve(st,
		withEntry(move(c, 0, idempotency.RecipientAccepted, idempotency.RecipientDelivered), e1, "first"),
		withEntry(move(c, 1, idempotency.RecipientDelivered, idempotency.RecipientBounced), e2, "lost"), // lost: accepted
		move(c, 1, idempotency.RecipientAccepted, idempotency.RecipientBounced),                         // no entry owed
	)
	if !slices.Equal(applied, []bool{true, false, false}) {
		t.Fatalf("applied = %v, want [true false false]: the third repeats the second's recipient", applied)
	}
	applied, _ = s.resolve(st,
		withEntry(move(c, 0, idempotency.RecipientDelivered, idempotency.RecipientComplained), e1, "again"), // the ID is taken
		withEntry(move(c, 1, idempotency.RecipientAccepted, idempotency.RecipientBounced), e3, "third"),
	)
	if !slices.Equal(applied, []bool{true, true}) {
		t.Fatalf("applied = %v, want both", applied)
	}
	time.Sleep(20 * time.Millisecond) // the entries are older than now
	mine := func(minAge time.Duration) map[string]string {
		t.Helper()
		list, err := st.Outbox(t.Context(), minAge, 1000)
		if err != nil {
			t.Fatalf("Outbox(%v): %v", minAge, err)
		}
		out := map[string]string{}
		for _, e := range list {
			if strings.HasPrefix(e.EventID, s.prefix) {
				if e.MessageID != c.MessageID || e.CreatedAt.IsZero() {
					t.Errorf("entry %+v, want of %s with its time", e, c.MessageID)
				}
				out[e.EventID] = string(e.Body)
			}
		}
		return out
	}
	if got := mine(0); len(got) != 2 || got[e1] != "first" || got[e3] != "third" {
		t.Errorf("outbox = %v, want %s (first, written once) and %s (third)", got, e1, e3)
	}
	if got := mine(time.Hour); len(got) != 0 {
		t.Errorf("outbox older than an hour = %v, want none", got)
	}
	if err := st.OutboxDone(t.Context(), []string{e1, s.id("no-entry")}); err != nil {
		t.Fatalf("OutboxDone: %v", err)
	}
	if got := mine(0); len(got) != 1 || got[e3] != "third" {
		t.Errorf("outbox after OutboxDone = %v, want only %s", got, e3)
	}
	if _, err := st.Outbox(t.Context(), -time.Second, 10); err == nil {
		t.Error("Outbox accepted a negative age")
	}
	if err := st.OutboxDone(t.Context(), nil); err != nil {
		t.Errorf("OutboxDone(nil) = %v", err)
	}
}

func settle(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	two := s.sent(st, s.id("two"), true, rcpt(0, idempotency.RecipientAccepted), rcpt(1, idempotency.RecipientAccepted))
	_, settled := s.resolve(st, move(two, 0, idempotency.RecipientAccepted, idempotency.RecipientDelivered))
	if len(settled) != 0 {
		t.Errorf("settled %v with a recipient still accepted, want nothing", settled)
	}
	_, settled = s.resolve(st, move(two, 1, idempotency.RecipientAccepted, idempotency.RecipientBounced))
	if want := map[string]string{two.MessageID: "confirmed"}; !maps.Equal(settled, want) {
		t.Errorf("settled %v, want %v: a recipient was delivered", settled, want)
	}
	if r := s.byRef(st, two.MessageID, 0); r.Confirmation != "confirmed" {
		t.Errorf("confirmation = %q, want confirmed", r.Confirmation)
	}
	// Settled once: a later complaint changes the recipient, not the mail.
	_, settled = s.resolve(st, move(two, 0, idempotency.RecipientDelivered, idempotency.RecipientComplained))
	if len(settled) != 0 {
		t.Errorf("settled %v again, want nothing", settled)
	}

	gone := s.sent(st, s.id("gone"), true, rcpt(0, idempotency.RecipientAccepted))
	if _, settled = s.resolve(st, move(gone, 0, idempotency.RecipientAccepted, idempotency.RecipientBounced)); !maps.Equal(settled, map[string]string{gone.MessageID: "cancelled"}) {
		t.Errorf("settled %v, want %s cancelled: nothing was delivered", settled, gone.MessageID)
	}

	// The record settles a mail it leaves with no recipient open; a mail
	// no relay took (no window) is never settled.
	done := s.sent(st, s.id("done"), true, rcpt(0, idempotency.RecipientBounced), rcpt(1, idempotency.RecipientSuppressed))
	if r := s.byRef(st, done.MessageID, 0); r.Confirmation != "cancelled" {
		t.Errorf("confirmation of a mail recorded with every recipient refused = %q, want cancelled", r.Confirmation)
	}
	never := s.sent(st, s.id("never"), false, rcpt(0, idempotency.RecipientAccepted))
	if _, settled = s.resolve(st, move(never, 0, idempotency.RecipientAccepted, idempotency.RecipientDelivered)); len(settled) != 0 {
		t.Errorf("settled %v, want nothing for a mail without a window", settled)
	}
}

func badRecipients(t *testing.T, s *suite) {
	st := s.store("w", longLease)
	c := s.want(st, req(s.id("bad"), "body", 1), idempotency.Claimed)
	for _, bad := range []idempotency.RecipientFate{
		{Index: -1, Address: "a@example.com", State: idempotency.RecipientAccepted},
		{Index: 100, Address: "a@example.com", State: idempotency.RecipientAccepted},
		{Index: 0, Address: "", State: idempotency.RecipientAccepted},
		{Index: 0, Address: "a@example.com", State: "lost"},
	} {
		o := fate(c, idempotency.StatusSent, 1)
		o.Recipients = []idempotency.RecipientFate{bad}
		if _, err := st.Record(t.Context(), []idempotency.Fate{o}); err == nil {
			t.Errorf("Record of recipient %+v succeeded, want an error", bad)
		}
	}
	s.recordWon(st, fate(c, idempotency.StatusSent, 1)) // still at the claim's version
	for _, bad := range []idempotency.Resolution{
		{MessageID: c.MessageID, Index: 100, From: idempotency.RecipientAccepted, To: idempotency.RecipientDelivered},
		{MessageID: c.MessageID, Index: 0, From: "sent", To: idempotency.RecipientDelivered},
		{MessageID: c.MessageID, Index: 0, From: idempotency.RecipientAccepted, To: ""},
	} {
		if _, _, err := st.Resolve(t.Context(), []idempotency.Resolution{bad}); err == nil {
			t.Errorf("Resolve(%+v) succeeded, want an error", bad)
		}
	}
	if applied, settled, err := st.Resolve(t.Context(), nil); err != nil || applied != nil || len(settled) != 0 {
		t.Errorf("Resolve(nil) = %v, %v, %v; want nothing", applied, settled, err)
	}
}
