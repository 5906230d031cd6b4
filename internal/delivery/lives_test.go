package delivery

import (
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/sender"
)

// TestEventsCarryTheMailsLife runs mails through the pipeline on a store
// whose rows carry chosen lives: every event's ID is its transition's in the
// claim's life, and a mail without a life (a row from before lives) keeps
// the IDs it always had.
func TestEventsCarryTheMailsLife(t *testing.T) {
	lives := map[string]int64{"a@x": 41, "b@x": 0, "d@x": 1 << 50}
	h := newFateHarness(t, func(addr string) *sender.Error {
		switch addr {
		case "gone@example.com":
			return &sender.Error{Relay: "p1", Stage: sender.StageRcpt, Code: 550, Enhanced: "5.1.1", Text: "no such user"}
		case "full@example.com":
			return &sender.Error{Relay: "p1", Stage: sender.StageRcpt, Code: 452, Enhanced: "4.2.2", Text: "mailbox full"}
		}
		return nil
	}, nil)
	p, err := New(Config{Senders: 1, BatchSize: 4, BatchLinger: time.Millisecond, RecheckInterval: 5 * time.Millisecond,
		ConfirmWindow: time.Hour},
		slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), Deps{
			Store:        h.store,
			Relays:       []Relay{{Name: "p1", NewSession: func() Session { return h.session }}},
			DeadLetters:  h.dlq,
			Retries:      h.retries,
			Events:       h.events,
			Suppressions: h.sup,
			ReturnPaths:  fakeReturnPaths{},
		})
	if err != nil {
		t.Fatal(err)
	}
	h.pipeline = p
	records := [][]byte{
		mustJSON(t, multiJob("a@x", "ok@example.com", "gone@example.com")),
		mustJSON(t, multiJob("b@x", "ok@example.com", "gone@example.com")),
		mustJSON(t, multiJob("d@x", "ok@example.com", "full@example.com")),
	}
	h.store.seedLives(lives, records...)
	h.run(t, records)
	seen := map[string][]event.Type{}
	for _, e := range h.events.All() {
		seen[e.MessageID] = append(seen[e.MessageID], e.Type)
		want := event.NewLifeID(e.MessageID, lives[e.MessageID], e.RecipientIndex, e.Type, e.Attempt)
		if e.ID != want {
			t.Errorf("%s recipient %d %s: ID %s, want %s (life %d)", e.MessageID, e.RecipientIndex, e.Type, e.ID, want, lives[e.MessageID])
		}
		if lives[e.MessageID] == 0 && e.ID != event.NewID(e.MessageID, e.RecipientIndex, e.Type, e.Attempt) {
			t.Errorf("%s has no life, but its %s event's ID %s is not the one derived without", e.MessageID, e.Type, e.ID)
		}
	}
	for id, want := range map[string][]event.Type{
		"a@x": {event.Accepted, event.Bounced}, "b@x": {event.Accepted, event.Bounced}, "d@x": {event.Accepted, event.Deferred},
	} {
		if !slices.Equal(seen[id], want) {
			t.Errorf("%s events %v, want %v", id, seen[id], want)
		}
	}
}

// TestAppendEventsIDs checks the IDs of the events a fate writes: the
// same fate written again (a crash before the record) has the same IDs,
// the same transitions in another life of the mail have others.
func TestAppendEventsIDs(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	fateOf := func(life int64, attempt int) decided {
		it := &item{job: multiJob("m@x", "ok@example.com", "gone@example.com", "full@example.com"), attempt: attempt, life: life}
		f := fate{kind: fateRetried, relay: "p1", class: "transient", copy: &retry.Copy{NotBefore: now.Add(time.Minute)}}
		it.initRecipients()
		it.rcpts[0].state, it.rcpts[0].fresh = idempotency.RecipientAccepted, true
		it.rcpts[1].state, it.rcpts[1].fresh = idempotency.RecipientBounced, true
		it.rcpts[1].refusal = &sender.Error{Code: 550, Enhanced: "5.1.1", Text: "no such user"}
		it.rcpts[1].bounceType = event.BounceHard
		return decided{it, f} // rcpts[2] stays pending: deferred
	}
	ids := func(d decided) []string {
		var out []string
		for _, e := range (&Pipeline{}).appendEvents(nil, d.it, d.fate, now) {
			if err := e.Validate(); err != nil {
				t.Fatalf("event %+v: %v", e, err)
			}
			out = append(out, e.ID)
		}
		return out
	}
	tests := []struct {
		name string
		a, b decided
		same bool
	}{
		{"the same fate written twice", fateOf(9, 2), fateOf(9, 2), true},
		{"the same transitions in a replayed life", fateOf(9, 2), fateOf(10, 2), false},
		{"a row without a life against one with", fateOf(0, 2), fateOf(9, 2), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := ids(tt.a), ids(tt.b)
			if len(a) != 3 || len(b) != 3 {
				t.Fatalf("IDs %v and %v, want three events each", a, b)
			}
			for i := range a {
				if (a[i] == b[i]) != tt.same {
					t.Errorf("event %d: %s and %s, same = %v, want %v", i, a[i], b[i], a[i] == b[i], tt.same)
				}
			}
		})
	}
	// The deferral is the attempt's: the next attempt's is another.
	if a, b := ids(fateOf(9, 2)), ids(fateOf(9, 3)); a[0] != b[0] || a[2] == b[2] {
		t.Errorf("attempts 2 and 3: %v and %v; want the acceptance's ID equal and the deferrals' not", a, b)
	}
}
