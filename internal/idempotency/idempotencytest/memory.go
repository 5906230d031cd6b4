package idempotencytest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/returnpath"
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
	// Fates are the fates recorded on the row, in order.
	Fates []idempotency.Fate

	// Tenant, Stream, Metadata, ConfirmBy and Confirmation are the mail's
	// (see idempotency.Recipient).
	Tenant, Stream string
	Metadata       map[string]string
	ConfirmBy      time.Time
	Confirmation   string
}

type table struct {
	mu     sync.Mutex
	now    func() time.Time
	rows   map[string]*MemoryRow
	rcpts  map[recipientKey]*idempotency.Recipient // only the recipient's own fields
	outbox []idempotency.OutboxEntry
}

type recipientKey struct {
	id  string
	idx int
}

// NewMemory returns an empty table on the local clock and a store on it for
// MemoryOwner with idempotency.DefaultLease.
func NewMemory() *Memory { return NewMemoryAt(time.Now) }

// NewMemoryAt is NewMemory on the clock now, which stands for the
// database's: leases, resolution and outbox times are read from it.
func NewMemoryAt(now func() time.Time) *Memory {
	t := &table{now: now, rows: map[string]*MemoryRow{}, rcpts: map[recipientKey]*idempotency.Recipient{}}
	return &Memory{t: t, owner: MemoryOwner, lease: idempotency.DefaultLease}
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
	c.PayloadHash, c.Fates, c.Metadata = slices.Clone(r.PayloadHash), slices.Clone(r.Fates), maps.Clone(r.Metadata)
	return c, true
}

// Put stores row as it is, replacing any row of its ID: the state an
// earlier attempt, another worker or an older hand-back left.
func (m *Memory) Put(row MemoryRow) {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	row.PayloadHash, row.Fates, row.Metadata = slices.Clone(row.PayloadHash), slices.Clone(row.Fates), maps.Clone(row.Metadata)
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
	if err := idempotency.ValidateClaims(reqs); err != nil {
		return nil, err
	}
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	now := m.t.now()
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
			row = &MemoryRow{MessageID: q.MessageID, PayloadHash: slices.Clone(q.PayloadHash), Attempt: 1, Life: newLife(),
				Tenant: q.Tenant}
			m.t.rows[q.MessageID] = row
		case !row.claimable(q, now):
			continue
		case row.Status == idempotency.StatusDead:
			row.PayloadHash, row.Attempt, row.Life = slices.Clone(q.PayloadHash), 1, newLife()
		}
		row.Status, row.Version = idempotency.StatusSending, row.Version+1
		row.LeaseOwner, row.LeaseExpiresAt = m.owner, now.Add(m.lease)
		row.Tenant = cmp.Or(row.Tenant, q.Tenant)
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
		out[i] = idempotency.Unclaimed(q, firstReq, m.t.rows[q.MessageID].claimRow(), now)
	}
	return out, nil
}

// claimRow is what idempotency.Unclaimed needs of row; nil for none.
func (r *MemoryRow) claimRow() *idempotency.ClaimRow {
	if r == nil {
		return nil
	}
	return &idempotency.ClaimRow{Status: r.Status, Version: r.Version, Attempt: r.Attempt, PayloadHash: r.PayloadHash,
		LeaseExpiresAt: r.LeaseExpiresAt}
}

// Record writes fates as compare-and-sets on their versions, as
// idempotency.Store.Record does; only the first fate of an ID is
// written, the others are reported lost.
func (m *Memory) Record(_ context.Context, outs []idempotency.Fate) ([]string, error) {
	if len(outs) == 0 {
		return nil, nil
	}
	if err := idempotency.ValidateFates(outs); err != nil {
		return nil, err
	}
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	now := m.t.now()
	var lost, written []string
	resolves := false
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
		row.Fates = append(row.Fates, o)
		row.Stream = cmp.Or(o.Stream, row.Stream)
		if o.Metadata != nil {
			row.Metadata = maps.Clone(o.Metadata)
		}
		if row.ConfirmBy.IsZero() {
			row.ConfirmBy = o.ConfirmBy
		}
		written = append(written, o.MessageID)
		for _, r := range o.Recipients {
			resolves = resolves || (r.State != idempotency.RecipientPending && r.State != idempotency.RecipientAccepted)
			m.t.recordRecipient(row, r, now)
		}
	}
	if resolves {
		m.t.settle(written, now)
	}
	return lost, nil
}

// recordRecipient writes what an attempt decided for one recipient of row,
// unless an earlier attempt or a report already moved it past pending.
func (t *table) recordRecipient(row *MemoryRow, r idempotency.RecipientFate, now time.Time) {
	k := recipientKey{row.MessageID, r.Index}
	if old := t.rcpts[k]; old != nil && old.State != idempotency.RecipientPending {
		return
	}
	rc := &idempotency.Recipient{MessageID: row.MessageID, Index: r.Index, Address: r.Address, State: r.State,
		Attempt: r.Attempt, Provider: r.Provider, BounceType: r.BounceType, Status: r.Status, Code: r.Code,
		Diagnostic: r.Diagnostic, Rule: r.Rule, Source: r.Source, UpdatedAt: now}
	switch r.State {
	case idempotency.RecipientAccepted:
		rc.AcceptedAt = now
	case idempotency.RecipientPending:
	default:
		rc.ResolvedAt = now
	}
	t.rcpts[k] = rc
}

// settle confirms or cancels the mail of ids whose every recipient is
// resolved, if it awaits confirmation, and returns what each got.
func (t *table) settle(ids []string, now time.Time) map[string]string {
	settled := map[string]string{}
	for _, id := range ids {
		row := t.rows[id]
		if row == nil || row.ConfirmBy.IsZero() || (row.Confirmation != "" && row.Confirmation != "unconfirmed") {
			continue
		}
		open, confirmed := false, false
		for k, r := range t.rcpts {
			if k.id != id {
				continue
			}
			open = open || r.State == idempotency.RecipientPending || r.State == idempotency.RecipientAccepted
			confirmed = confirmed || r.State == idempotency.RecipientDelivered || r.State == idempotency.RecipientComplained
		}
		if open {
			continue
		}
		row.Confirmation = "cancelled"
		if confirmed {
			row.Confirmation = "confirmed"
		}
		settled[id] = row.Confirmation
	}
	return settled
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
	now := m.t.now()
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

// withMail returns r with its mail's fields, as the store's reads join them.
func (t *table) withMail(r *idempotency.Recipient) idempotency.Recipient {
	c := *r
	if row := t.rows[r.MessageID]; row != nil {
		c.Tenant, c.Stream, c.Metadata = row.Tenant, row.Stream, maps.Clone(row.Metadata)
		c.ConfirmBy, c.Confirmation, c.Life = row.ConfirmBy, row.Confirmation, row.Life
	}
	return c
}

// recipients returns the recipients match accepts, with their mails'
// fields, by Message-ID and index.
func (t *table) recipients(match func(*idempotency.Recipient) bool) []idempotency.Recipient {
	var out []idempotency.Recipient
	for _, r := range t.rcpts {
		if match(r) {
			out = append(out, t.withMail(r))
		}
	}
	slices.SortFunc(out, func(a, b idempotency.Recipient) int {
		return cmp.Or(strings.Compare(a.MessageID, b.MessageID), cmp.Compare(a.Index, b.Index))
	})
	return out
}

// Recipients returns every recipient row with its mail's fields, by
// Message-ID and index.
func (m *Memory) Recipients() []idempotency.Recipient {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	return m.t.recipients(func(*idempotency.Recipient) bool { return true })
}

// PutRecipient stores r as it is, with its mail's fields (Tenant, Stream,
// Metadata, ConfirmBy, Confirmation, Life) on the mail's row, which it
// creates, sent, if there is none: the state a send and earlier reports
// left.
func (m *Memory) PutRecipient(r idempotency.Recipient) {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	row := m.t.rows[r.MessageID]
	if row == nil {
		row = &MemoryRow{MessageID: r.MessageID, Status: idempotency.StatusSent, Version: 2, Attempt: max(r.Attempt, 1)}
		m.t.rows[r.MessageID] = row
	}
	row.Tenant, row.Stream, row.Metadata = r.Tenant, r.Stream, maps.Clone(r.Metadata)
	row.ConfirmBy, row.Confirmation, row.Life = r.ConfirmBy, r.Confirmation, r.Life
	c := r
	c.Tenant, c.Stream, c.Metadata, c.ConfirmBy, c.Confirmation, c.Life = "", "", nil, time.Time{}, "", 0
	m.t.rcpts[recipientKey{r.MessageID, r.Index}] = &c
}

// SetConfirmation sets the confirmation of the mail id, as the
// confirmation sweep marks mail unconfirmed.
func (m *Memory) SetConfirmation(id, confirmation string) {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	if row := m.t.rows[id]; row != nil {
		row.Confirmation = confirmation
	}
}

// RecipientsByRef returns recipient idx of the mails whose return path
// reference is ref, by Message-ID.
func (m *Memory) RecipientsByRef(_ context.Context, ref []byte, idx int) ([]idempotency.Recipient, error) {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	return m.t.recipients(func(r *idempotency.Recipient) bool {
		rr := returnpath.RefOf(r.MessageID)
		return r.Index == idx && bytes.Equal(rr[:], ref)
	}), nil
}

// RecipientByAddress returns the first recipient of messageID whose address
// is address, whatever its case.
func (m *Memory) RecipientByAddress(_ context.Context, messageID, address string) (idempotency.Recipient, bool, error) {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	list := m.t.recipients(func(r *idempotency.Recipient) bool {
		return r.MessageID == messageID && strings.EqualFold(r.Address, address)
	})
	if len(list) == 0 {
		return idempotency.Recipient{}, false, nil
	}
	return list[0], true, nil
}

// MessageExists reports whether messageID has a row.
func (m *Memory) MessageExists(_ context.Context, messageID string) (bool, error) {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	return m.t.rows[messageID] != nil, nil
}

// Resolve applies resolutions as idempotency.Store.Resolve does: each a
// compare-and-set on the recipient's state and its mail's life, writing the
// outbox entry of each applied, then settling the mail of the batch whose
// recipients are all resolved.
func (m *Memory) Resolve(_ context.Context, res []idempotency.Resolution) ([]bool, map[string]string, error) {
	if len(res) == 0 {
		return nil, nil, nil
	}
	if err := idempotency.ValidateResolutions(res); err != nil {
		return nil, nil, err
	}
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	now := m.t.now()
	applied := make([]bool, len(res))
	seen := map[recipientKey]bool{}
	var ids []string
	for i, r := range res {
		k := recipientKey{r.MessageID, r.Index}
		if seen[k] {
			continue
		}
		seen[k] = true
		if !slices.Contains(ids, r.MessageID) {
			ids = append(ids, r.MessageID)
		}
		rc, row := m.t.rcpts[k], m.t.rows[r.MessageID]
		if rc == nil || row == nil || rc.State != r.From || (r.Life != 0 && row.Life != r.Life) {
			continue
		}
		rc.State = r.To
		rc.BounceType, rc.Status = cmp.Or(r.BounceType, rc.BounceType), cmp.Or(r.Status, rc.Status)
		rc.Code, rc.Diagnostic, rc.Rule = cmp.Or(r.Code, rc.Code), cmp.Or(r.Diagnostic, rc.Diagnostic), cmp.Or(r.Rule, rc.Rule)
		rc.Source, rc.FeedbackType = r.Source, cmp.Or(r.FeedbackType, rc.FeedbackType)
		rc.ResolvedAt, rc.UpdatedAt = now, now
		applied[i] = true
		if r.EventID != "" && r.Effect != nil && !slices.ContainsFunc(m.t.outbox, func(e idempotency.OutboxEntry) bool { return e.EventID == r.EventID }) {
			m.t.outbox = append(m.t.outbox, idempotency.OutboxEntry{EventID: r.EventID, MessageID: r.MessageID,
				Body: slices.Clone(r.Effect), CreatedAt: now})
		}
	}
	return applied, m.t.settle(ids, now), nil
}

// Outbox returns up to limit outbox entries written more than minAge ago,
// oldest first.
func (m *Memory) Outbox(_ context.Context, minAge time.Duration, limit int) ([]idempotency.OutboxEntry, error) {
	if minAge < 0 {
		return nil, fmt.Errorf("outbox: negative age %v", minAge)
	}
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	before := m.t.now().Add(-minAge)
	var out []idempotency.OutboxEntry
	for _, e := range m.t.outbox {
		if e.CreatedAt.Before(before) {
			e.Body = slices.Clone(e.Body)
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b idempotency.OutboxEntry) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.EventID, b.EventID))
	})
	return out[:min(len(out), max(limit, 0))], nil
}

// OutboxEntries returns every outbox entry, whatever its age, in the order
// written.
func (m *Memory) OutboxEntries() []idempotency.OutboxEntry {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	out := slices.Clone(m.t.outbox)
	for i := range out {
		out[i].Body = slices.Clone(out[i].Body)
	}
	return out
}

// PutOutbox stores e as it is: an entry a transition made earlier left.
func (m *Memory) PutOutbox(e idempotency.OutboxEntry) {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	e.Body = slices.Clone(e.Body)
	m.t.outbox = append(m.t.outbox, e)
}

// OutboxDone deletes the outbox entries of eventIDs; IDs without one are
// ignored.
func (m *Memory) OutboxDone(_ context.Context, eventIDs []string) error {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	m.t.outbox = slices.DeleteFunc(m.t.outbox, func(e idempotency.OutboxEntry) bool { return slices.Contains(eventIDs, e.EventID) })
	return nil
}
