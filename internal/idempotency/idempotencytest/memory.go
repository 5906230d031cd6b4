package idempotencytest

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/postline/postline/internal/idempotency"
)

// MemoryOwner and the lease of idempotency.DefaultLease are what NewMemory's
// store claims with.
const MemoryOwner = "memory"

// Memory is an in-memory claim table with a store on it: the same rules as
// the PostgreSQL store (Run checks both), measured on the local clock. Open
// gives other workers' stores on the same table. It is safe for concurrent
// use.
type Memory struct {
	t     *table
	owner string
	lease time.Duration
}

// MemoryRow is a row of a Memory table as a test sees or seeds it.
type MemoryRow struct {
	MessageID   string
	Status      idempotency.Status
	PayloadHash []byte
	Version     int64
	Attempt     int
	Life        int64
	// LeaseOwner and LeaseExpiresAt are the lease; zero when there is none.
	LeaseOwner     string
	LeaseExpiresAt time.Time
	// Conflicts counts NoteConflicts calls naming the row.
	Conflicts int
	// Outcomes are the outcomes recorded on the row, in order.
	Outcomes []idempotency.Outcome
}

type table struct {
	mu   sync.Mutex
	rows map[string]*MemoryRow
}

// NewMemory returns an empty table and a store on it for MemoryOwner with
// idempotency.DefaultLease.
func NewMemory() *Memory {
	return &Memory{t: &table{rows: map[string]*MemoryRow{}}, owner: MemoryOwner, lease: idempotency.DefaultLease}
}

// Open returns a store on m's table for another worker, owner, whose claims
// hold for lease.
func (m *Memory) Open(owner string, lease time.Duration) *Memory {
	return &Memory{t: m.t, owner: owner, lease: lease}
}

// Row returns a copy of the row of id, and whether there is one.
func (m *Memory) Row(id string) (MemoryRow, bool) {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	r, ok := m.t.rows[id]
	if !ok {
		return MemoryRow{}, false
	}
	c := *r
	c.PayloadHash, c.Outcomes = slices.Clone(r.PayloadHash), slices.Clone(r.Outcomes)
	return c, true
}

// Put stores row as it is, replacing any row of its ID: the state an
// earlier attempt, another worker or an older release left.
func (m *Memory) Put(row MemoryRow) {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	row.PayloadHash, row.Outcomes = slices.Clone(row.PayloadHash), slices.Clone(row.Outcomes)
	m.t.rows[row.MessageID] = &row
}

// newLife draws a mail's life as the table's column default does: in
// [1, 2^53].
func newLife() int64 { return 1 + rand.Int64N(1<<53-1) }

func (r *MemoryRow) leased(now time.Time) bool {
	return !r.LeaseExpiresAt.IsZero() && r.LeaseExpiresAt.After(now)
}

func (r *MemoryRow) claimable(q idempotency.ClaimRequest, now time.Time) bool {
	switch r.Status {
	case idempotency.StatusPending, idempotency.StatusRetrying, idempotency.StatusSending:
		return bytes.Equal(r.PayloadHash, q.PayloadHash) && r.Attempt == q.Attempt && !r.leased(now)
	}
	// A rejected record's row (dead at attempt 0: nothing was ever sent)
	// is taken over by the valid job with its ID.
	return r.Status == idempotency.StatusDead && r.Attempt == 0
}

// Claim claims a batch as idempotency.Store.Claim does: the first
// occurrence of each ID takes the lease when it can, then every request is
// classified on the rows as they are after the batch's own claims.
func (m *Memory) Claim(_ context.Context, reqs []idempotency.ClaimRequest) ([]idempotency.Claim, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	for i, r := range reqs {
		if r.MessageID == "" {
			return nil, fmt.Errorf("claim: request %d: empty message ID", i)
		}
		if r.Attempt < 1 || r.Attempt > math.MaxInt32 {
			return nil, fmt.Errorf("claim %s: attempt %d out of range", r.MessageID, r.Attempt)
		}
	}
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	now := time.Now()
	first := make(map[string]int, len(reqs))
	out := make([]idempotency.Claim, len(reqs))
	claimed := make([]bool, len(reqs))
	for i, q := range reqs {
		if _, dup := first[q.MessageID]; dup {
			continue
		}
		first[q.MessageID] = i
		row := m.t.rows[q.MessageID]
		switch {
		case row == nil:
			row = &MemoryRow{MessageID: q.MessageID, PayloadHash: slices.Clone(q.PayloadHash), Attempt: 1, Life: newLife()}
			m.t.rows[q.MessageID] = row
		case !row.claimable(q, now):
			continue
		case row.Status == idempotency.StatusDead:
			row.PayloadHash, row.Attempt, row.Life = slices.Clone(q.PayloadHash), 1, newLife()
		}
		row.Status, row.Version = idempotency.StatusSending, row.Version+1
		row.LeaseOwner, row.LeaseExpiresAt = m.owner, now.Add(m.lease)
		claimed[i] = true
		out[i] = idempotency.Claim{MessageID: q.MessageID, Result: idempotency.Claimed, Version: row.Version,
			Status: idempotency.StatusSending, Attempt: row.Attempt, Life: row.Life}
	}
	for i, q := range reqs {
		if claimed[i] {
			continue
		}
		var firstReq *idempotency.ClaimRequest
		if fi := first[q.MessageID]; fi != i {
			firstReq = &reqs[fi]
		}
		out[i] = classify(q, firstReq, m.t.rows[q.MessageID], now)
	}
	return out, nil
}

// classify explains why q was not claimed, in the order of the PostgreSQL
// store's checks: content, terminal state, attempt, lease.
func classify(q idempotency.ClaimRequest, first *idempotency.ClaimRequest, row *MemoryRow, now time.Time) idempotency.Claim {
	c := idempotency.Claim{MessageID: q.MessageID}
	if row != nil {
		c.Status, c.Version, c.Attempt = row.Status, row.Version, row.Attempt
	}
	if first != nil {
		ref := first.PayloadHash
		if row != nil {
			ref = row.PayloadHash
		}
		if !bytes.Equal(q.PayloadHash, ref) {
			c.Result = idempotency.Conflict
			return c
		}
		if bytes.Equal(q.PayloadHash, first.PayloadHash) && q.Attempt == first.Attempt {
			c.Result = idempotency.Duplicate
			return c
		}
	}
	switch {
	case row == nil:
		c.Result, c.RetryAt = idempotency.Busy, now
	case !bytes.Equal(q.PayloadHash, row.PayloadHash):
		c.Result = idempotency.Conflict
	case row.Status.Terminal():
		c.Result = idempotency.Duplicate
	case q.Attempt == row.Attempt+1 && row.Status == idempotency.StatusSending && row.leased(now):
		// The next attempt's copy overtook this attempt's outcome.
		c.Result, c.RetryAt = idempotency.Busy, row.LeaseExpiresAt
	case q.Attempt != row.Attempt:
		c.Result = idempotency.Stale
	case row.leased(now):
		c.Result, c.RetryAt = idempotency.Busy, row.LeaseExpiresAt
	default:
		c.Result, c.RetryAt = idempotency.Busy, now
	}
	return c
}

// Record writes outcomes as compare-and-sets on their versions, as
// idempotency.Store.Record does; only the first outcome of an ID is
// written, the others are reported lost.
func (m *Memory) Record(_ context.Context, outs []idempotency.Outcome) ([]string, error) {
	if len(outs) == 0 {
		return nil, nil
	}
	for i, o := range outs {
		if o.MessageID == "" {
			return nil, fmt.Errorf("record: outcome %d: empty message ID", i)
		}
		switch o.Status {
		case idempotency.StatusSent, idempotency.StatusFailed, idempotency.StatusDead, idempotency.StatusRetrying, idempotency.StatusSuppressed:
		default:
			return nil, fmt.Errorf("record %s: status %q is not sent, failed, dead, suppressed or retrying", o.MessageID, o.Status)
		}
		if o.Attempt < 0 || o.Attempt > math.MaxInt32 || (o.Status == idempotency.StatusRetrying && o.Attempt < 1) {
			return nil, fmt.Errorf("record %s: attempt %d out of range for %s", o.MessageID, o.Attempt, o.Status)
		}
	}
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	var lost []string
	seen := make(map[string]bool, len(outs))
	for _, o := range outs {
		row := m.t.rows[o.MessageID]
		if seen[o.MessageID] || row == nil || row.Version != o.Version {
			lost = append(lost, o.MessageID)
			seen[o.MessageID] = true
			continue
		}
		seen[o.MessageID] = true
		row.Status, row.Version = o.Status, row.Version+1
		if o.Attempt > 0 {
			row.Attempt = o.Attempt
		}
		row.LeaseOwner, row.LeaseExpiresAt = "", time.Time{}
		row.Outcomes = append(row.Outcomes, o)
	}
	return lost, nil
}

// ExtendLease pushes the leases of rows this store claimed to one lease
// from now, keeping their versions, as idempotency.Store.ExtendLease does.
func (m *Memory) ExtendLease(_ context.Context, ids []string, versions []int64) ([]string, error) {
	if len(ids) != len(versions) {
		return nil, fmt.Errorf("extend lease: %d IDs but %d versions", len(ids), len(versions))
	}
	if len(ids) == 0 {
		return nil, nil
	}
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	now := time.Now()
	var lost []string
	for i, id := range ids {
		row := m.t.rows[id]
		if row == nil || row.Version != versions[i] || row.Status != idempotency.StatusSending || row.LeaseOwner != m.owner {
			lost = append(lost, id)
			continue
		}
		row.LeaseExpiresAt = now.Add(m.lease)
	}
	return lost, nil
}

// RecordRejected stores bad input as dead rows at attempt 0; an existing
// row is left alone, a rejection without an ID is skipped.
func (m *Memory) RecordRejected(_ context.Context, rejs []idempotency.Rejection) error {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	for _, r := range rejs {
		if r.MessageID == "" || m.t.rows[r.MessageID] != nil {
			continue
		}
		m.t.rows[r.MessageID] = &MemoryRow{MessageID: r.MessageID, Status: idempotency.StatusDead,
			PayloadHash: slices.Clone(r.PayloadHash), Version: 1, Life: newLife()}
	}
	return nil
}

// NoteConflicts counts one conflict per occurrence of a row's ID; it
// changes neither version nor status. IDs without a row are ignored.
func (m *Memory) NoteConflicts(_ context.Context, ids []string) error {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	for _, id := range ids {
		if row := m.t.rows[id]; row != nil {
			row.Conflicts++
		}
	}
	return nil
}
