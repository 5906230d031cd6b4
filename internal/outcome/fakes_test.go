package outcome

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/idempotency/idempotencytest"
	"github.com/postline/postline/internal/returnpath"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/testkit/writertest"
)

// fakeStore is the store's in-memory stand-in, idempotencytest.Memory,
// which follows the PostgreSQL store's rules (the suite checks both):
// Resolve is a compare-and-set on the recipient's state (and its mail's
// life, when given) that writes the outbox entries of what it moved and
// settles mail whose recipients are all resolved. Around it are the tests'
// knobs: a clock they move, calls that fail, a concurrent writer that moves
// a row on before a Resolve, and call counts. The sweep's pass
// (SweepUnconfirmed, in sweep_test.go) is the fake's own.
type fakeStore struct {
	*idempotencytest.Memory

	mu  sync.Mutex
	now func() time.Time

	lookupErr, resolveErr, dueErr, markErr, outboxErr, doneErr error
	// beforeResolve runs before a Resolve is applied: a concurrent writer
	// moving a row on.
	beforeResolve func(s *fakeStore)

	lookups, resolveCalls, markCalls int
	resolutions                      []idempotency.Resolution
}

func newFakeStore(now func() time.Time, rows ...idempotency.Recipient) *fakeStore {
	s := &fakeStore{now: now}
	s.Memory = idempotencytest.NewMemoryAt(func() time.Time { return s.now() })
	for _, r := range rows {
		s.PutRecipient(r)
	}
	return s
}

// claim leaves id a row without recipients: claimed, its send not
// recorded.
func (s *fakeStore) claim(id string) {
	s.Put(idempotencytest.MemoryRow{MessageID: id, Status: idempotency.StatusSending, Version: 1, Attempt: 1})
}

func (s *fakeStore) row(id string, idx int) idempotency.Recipient {
	for _, r := range s.Recipients() {
		if r.MessageID == id && r.Index == idx {
			return r
		}
	}
	return idempotency.Recipient{}
}

// sorted returns every recipient by its mail's window, Message-ID and index.
func (s *fakeStore) sorted() []idempotency.Recipient {
	out := s.Recipients()
	slices.SortStableFunc(out, func(a, b idempotency.Recipient) int { return a.ConfirmBy.Compare(b.ConfirmBy) })
	return out
}

func (s *fakeStore) RecipientsByRef(ctx context.Context, ref []byte, idx int) ([]idempotency.Recipient, error) {
	s.mu.Lock()
	s.lookups++
	err := s.lookupErr
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s.Memory.RecipientsByRef(ctx, ref, idx)
}

func (s *fakeStore) RecipientByAddress(ctx context.Context, messageID, address string) (idempotency.Recipient, bool, error) {
	s.mu.Lock()
	s.lookups++
	err := s.lookupErr
	s.mu.Unlock()
	if err != nil {
		return idempotency.Recipient{}, false, err
	}
	return s.Memory.RecipientByAddress(ctx, messageID, address)
}

func (s *fakeStore) Resolve(ctx context.Context, res []idempotency.Resolution) ([]bool, map[string]string, error) {
	s.mu.Lock()
	s.resolveCalls++
	err, before := s.resolveErr, s.beforeResolve
	if err == nil {
		s.resolutions = append(s.resolutions, res...)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	if before != nil {
		before(s)
	}
	return s.Memory.Resolve(ctx, res)
}

func (s *fakeStore) Outbox(ctx context.Context, minAge time.Duration, limit int) ([]idempotency.OutboxEntry, error) {
	s.mu.Lock()
	err := s.outboxErr
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s.Memory.Outbox(ctx, minAge, limit)
}

func (s *fakeStore) OutboxDone(ctx context.Context, ids []string) error {
	s.mu.Lock()
	err := s.doneErr
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Memory.OutboxDone(ctx, ids)
}

// pending returns the event IDs in the outbox.
func (s *fakeStore) pending() []string {
	var out []string
	for _, e := range s.OutboxEntries() {
		out = append(out, e.EventID)
	}
	return out
}

// DueUnconfirmed lists the accepted recipients of mail past its window
// and not yet marked, by window.
func (s *fakeStore) DueUnconfirmed(_ context.Context, limit int) ([]idempotency.Recipient, error) {
	s.mu.Lock()
	err := s.dueErr
	s.mu.Unlock()
	if err != nil {
		return nil, err
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

// MarkUnconfirmed marks the mail of ids past its window and not yet marked
// unconfirmed, and returns how many it marked.
func (s *fakeStore) MarkUnconfirmed(_ context.Context, ids []string) (int, error) {
	s.mu.Lock()
	s.markCalls++
	err := s.markErr
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		for _, r := range s.Recipients() {
			if r.MessageID == id && !r.ConfirmBy.IsZero() && r.Confirmation == "" && r.ConfirmBy.Before(s.now()) {
				s.SetConfirmation(id, "unconfirmed")
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
