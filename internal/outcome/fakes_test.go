package outcome

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/returnpath"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/testkit/writertest"
)

// The fakes below keep the state Store, SweepStore, Events and Lists
// stand for in memory, with the same rules the Postgres stores follow:
// Resolve is a compare-and-set on the recipient's state (and life, when
// given) that writes the outbox entries of what it moved and settles mail
// whose recipients are all resolved, DueUnconfirmed lists the accepted
// recipients of mail past its window. Each can be told to fail.

type fakeKey struct {
	id  string
	idx int
}

type fakeStore struct {
	mu   sync.Mutex
	now  func() time.Time
	rows map[fakeKey]idempotency.Recipient

	lookupErr, resolveErr, dueErr, markErr, outboxErr, doneErr error
	// beforeResolve runs under the lock before a Resolve is applied: a
	// concurrent writer moving a row on.
	beforeResolve func(rows map[fakeKey]idempotency.Recipient)

	// claimed are mails with a row but no recipient rows yet: claimed,
	// their send not recorded.
	claimed map[string]bool

	lookups, resolveCalls, markCalls int
	resolutions                      []idempotency.Resolution

	// outbox holds the entries of transitions made, by event ID, in the
	// order written.
	outbox []idempotency.OutboxEntry
}

func newFakeStore(now func() time.Time, rows ...idempotency.Recipient) *fakeStore {
	s := &fakeStore{now: now, rows: map[fakeKey]idempotency.Recipient{}, claimed: map[string]bool{}}
	for _, r := range rows {
		s.rows[fakeKey{r.MessageID, r.Index}] = r
	}
	return s
}

func (s *fakeStore) row(id string, idx int) idempotency.Recipient {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rows[fakeKey{id, idx}]
}

func (s *fakeStore) sorted() []idempotency.Recipient {
	out := make([]idempotency.Recipient, 0, len(s.rows))
	for _, r := range s.rows {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b idempotency.Recipient) int {
		return cmp.Or(a.ConfirmBy.Compare(b.ConfirmBy), strings.Compare(a.MessageID, b.MessageID), cmp.Compare(a.Index, b.Index))
	})
	return out
}

func (s *fakeStore) RecipientsByRef(_ context.Context, ref []byte, idx int) ([]idempotency.Recipient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lookups++
	if s.lookupErr != nil {
		return nil, s.lookupErr
	}
	var out []idempotency.Recipient
	for _, r := range s.sorted() {
		if rr := returnpath.RefOf(r.MessageID); string(rr[:]) == string(ref) && r.Index == idx {
			out = append(out, r)
		}
	}
	return out, nil
}

func (s *fakeStore) MessageExists(_ context.Context, messageID string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claimed[messageID] {
		return true, nil
	}
	for _, r := range s.sorted() {
		if r.MessageID == messageID {
			return true, nil
		}
	}
	return false, nil
}

func (s *fakeStore) RecipientByAddress(_ context.Context, messageID, address string) (idempotency.Recipient, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lookups++
	if s.lookupErr != nil {
		return idempotency.Recipient{}, false, s.lookupErr
	}
	for _, r := range s.sorted() {
		if r.MessageID == messageID && strings.EqualFold(r.Address, address) {
			return r, true, nil
		}
	}
	return idempotency.Recipient{}, false, nil
}

func (s *fakeStore) Resolve(_ context.Context, res []idempotency.Resolution) ([]bool, map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resolveCalls++
	if s.resolveErr != nil {
		return nil, nil, s.resolveErr
	}
	if s.beforeResolve != nil {
		s.beforeResolve(s.rows)
	}
	s.resolutions = append(s.resolutions, res...)
	applied := make([]bool, len(res))
	seen := map[fakeKey]bool{}
	moved := map[string]bool{}
	for i, r := range res {
		k := fakeKey{r.MessageID, r.Index}
		row, ok := s.rows[k]
		if seen[k] || !ok || row.State != r.From || (r.Life != 0 && row.Life != r.Life) {
			continue
		}
		seen[k] = true
		row.State, row.Source, row.FeedbackType = r.To, r.Source, cmp.Or(r.FeedbackType, row.FeedbackType)
		row.BounceType, row.Status, row.Rule = cmp.Or(r.BounceType, row.BounceType), cmp.Or(r.Status, row.Status), cmp.Or(r.Rule, row.Rule)
		row.Code, row.Diagnostic = cmp.Or(r.Code, row.Code), cmp.Or(r.Diagnostic, row.Diagnostic)
		row.ResolvedAt = s.now()
		s.rows[k] = row
		applied[i] = true
		moved[r.MessageID] = true
		if r.EventID != "" && r.Effect != nil && !slices.ContainsFunc(s.outbox, func(e idempotency.OutboxEntry) bool { return e.EventID == r.EventID }) {
			s.outbox = append(s.outbox, idempotency.OutboxEntry{EventID: r.EventID, MessageID: r.MessageID,
				Body: slices.Clone(r.Effect), CreatedAt: s.now()})
		}
	}
	settled := map[string]string{}
	for id := range moved {
		open, confirmed, confirmBy, state := false, false, time.Time{}, ""
		for k, r := range s.rows {
			if k.id != id {
				continue
			}
			open = open || r.State == idempotency.RecipientPending || r.State == idempotency.RecipientAccepted
			confirmed = confirmed || r.State == idempotency.RecipientDelivered || r.State == idempotency.RecipientComplained
			confirmBy, state = r.ConfirmBy, r.Confirmation
		}
		if open || confirmBy.IsZero() || (state != "" && state != "unconfirmed") {
			continue
		}
		settled[id] = map[bool]string{true: "confirmed", false: "cancelled"}[confirmed]
		s.setConfirmation(id, settled[id])
	}
	return applied, settled, nil
}

func (s *fakeStore) Outbox(_ context.Context, minAge time.Duration, limit int) ([]idempotency.OutboxEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.outboxErr != nil {
		return nil, s.outboxErr
	}
	var out []idempotency.OutboxEntry
	for _, e := range s.outbox {
		if len(out) < limit && e.CreatedAt.Before(s.now().Add(-minAge)) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (s *fakeStore) OutboxDone(_ context.Context, ids []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.doneErr != nil {
		return s.doneErr
	}
	s.outbox = slices.DeleteFunc(s.outbox, func(e idempotency.OutboxEntry) bool { return slices.Contains(ids, e.EventID) })
	return nil
}

// pending returns the event IDs in the outbox.
func (s *fakeStore) pending() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.outbox {
		out = append(out, e.EventID)
	}
	return out
}

func (s *fakeStore) setConfirmation(id, c string) {
	for k, r := range s.rows {
		if k.id == id {
			r.Confirmation = c
			s.rows[k] = r
		}
	}
}

func (s *fakeStore) DueUnconfirmed(_ context.Context, limit int) ([]idempotency.Recipient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dueErr != nil {
		return nil, s.dueErr
	}
	var out []idempotency.Recipient
	for _, r := range s.sorted() {
		if len(out) == limit {
			break
		}
		if !r.ConfirmBy.IsZero() && r.Confirmation == "" && r.ConfirmBy.Before(s.now()) && r.State == idempotency.RecipientAccepted {
			out = append(out, r)
		}
	}
	return out, nil
}

func (s *fakeStore) MarkUnconfirmed(_ context.Context, ids []string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.markCalls++
	if s.markErr != nil {
		return 0, s.markErr
	}
	n := 0
	for _, id := range ids {
		for _, r := range s.rows {
			if r.MessageID == id && !r.ConfirmBy.IsZero() && r.Confirmation == "" && r.ConfirmBy.Before(s.now()) {
				s.setConfirmation(id, "unconfirmed")
				n++
				break
			}
		}
	}
	return n, nil
}

// fakeEvents is the events writer's stand-in, which passes the writers'
// suite (writertest): it refuses a batch with an event that does not
// validate, and fails every call while told to (Fail). check, if set, is
// called with every event about to be published.
type fakeEvents struct {
	*writertest.Recorder[event.Event]
	check func(event.Event)
}

func newFakeEvents() *fakeEvents { return &fakeEvents{Recorder: writertest.Events()} }

func (e *fakeEvents) Publish(ctx context.Context, events ...event.Event) error {
	if e.check != nil {
		for _, ev := range events {
			e.check(ev)
		}
	}
	return e.Recorder.Publish(ctx, events...)
}

func (e *fakeEvents) published() []event.Event { return e.All() }

// fakeLists records the entries added, each validated as the Postgres
// store would.
type fakeLists struct {
	t       testing.TB
	mu      sync.Mutex
	err     error
	calls   int
	entries []suppression.Entry
}

func (l *fakeLists) Add(_ context.Context, entries []suppression.Entry) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.err != nil {
		return 0, l.err
	}
	for _, e := range entries {
		if err := e.Validate(); err != nil {
			l.t.Errorf("entry %+v does not validate: %v", e, err)
		}
	}
	l.entries = append(l.entries, entries...)
	return len(entries), nil
}

func (l *fakeLists) added() []suppression.Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newSigner(t testing.TB, key string) *returnpath.Signer {
	t.Helper()
	s, err := returnpath.New("bounces.postline.test", [][]byte{[]byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
