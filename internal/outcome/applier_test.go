package outcome

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/report"
	"github.com/postline/postline/internal/returnpath"
	"github.com/postline/postline/internal/suppression"
)

var testNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

const (
	testKey   = "outcome test key 0123456789"
	otherKey  = "another key entirely 98765"
	testMsgID = "order-42.1@postline.test"
)

func row(id string, idx int, addr string, state idempotency.RecipientState, stream string) idempotency.Recipient {
	return idempotency.Recipient{MessageID: id, Index: idx, Address: addr, State: state, Attempt: 1, Provider: "primary",
		Tenant: "acme", Stream: stream, Metadata: map[string]string{"order": "42"}, ConfirmBy: testNow.Add(time.Hour)}
}

type harness struct {
	store  *fakeStore
	events *fakeEvents
	lists  *fakeLists
	signer *returnpath.Signer
	reg    *prometheus.Registry
	a      *Applier
}

func newHarness(t *testing.T, rows ...idempotency.Recipient) *harness {
	t.Helper()
	h := &harness{
		store:  newFakeStore(func() time.Time { return testNow }, rows...),
		events: newFakeEvents(),
		lists:  &fakeLists{t: t},
		signer: newSigner(t, testKey),
		reg:    prometheus.NewRegistry(),
	}
	a, err := New(Config{NowFunc: func() time.Time { return testNow }}, discard(), h.reg, h.store, h.events, h.lists, h.signer)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.a = a
	return h
}

func (h *harness) reports(source string, kind report.Kind, result string) float64 {
	return testutil.ToFloat64(h.a.metrics.reports.WithLabelValues(source, string(kind), result))
}

// nothingHappened checks that no event, entry or resolution was written.
// nothingPublished checks that no event or suppression entry went out and
// none is owed in the outbox.
func (h *harness) nothingPublished(t *testing.T) {
	t.Helper()
	if ev := h.events.published(); len(ev) != 0 {
		t.Errorf("published %d events, want none: %+v", len(ev), ev)
	}
	if e := h.lists.added(); len(e) != 0 {
		t.Errorf("added %d suppression entries, want none: %+v", len(e), e)
	}
	if p := h.store.pending(); len(p) != 0 {
		t.Errorf("outbox holds %v, want nothing", p)
	}
}

func (h *harness) nothingHappened(t *testing.T) {
	t.Helper()
	if ev := h.events.published(); len(ev) != 0 {
		t.Errorf("published %d events, want none: %+v", len(ev), ev)
	}
	if e := h.lists.added(); len(e) != 0 {
		t.Errorf("added %d suppression entries, want none: %+v", len(e), e)
	}
	if h.store.resolveCalls != 0 {
		t.Errorf("Resolve called %d times, want never", h.store.resolveCalls)
	}
}

func TestApplyReturnedTransitions(t *testing.T) {
	type entry struct {
		reason suppression.Reason
		stream suppression.Stream
	}
	tests := []struct {
		name   string
		stream string
		from   idempotency.RecipientState
		rep    report.Report

		wantState  idempotency.RecipientState
		wantEvent  event.Type // "" for none
		wantBounce *event.Bounce
		wantRule   string
		wantFB     string
		wantEntry  *entry
		wantResult string
	}{
		{
			name: "hard bounce 5.1.1 suppresses on every stream", stream: event.StreamTransactional, from: idempotency.RecipientAccepted,
			rep: report.Report{Kind: report.Bounced, Source: report.SourceDSN, Status: "5.1.1", Code: 550,
				Diagnostic: "smtp; 550 5.1.1 <ada@example.com>: Recipient address rejected: User unknown"},
			wantState: idempotency.RecipientBounced, wantEvent: event.Bounced,
			wantBounce: &event.Bounce{Type: event.BounceHard, Status: "5.1.1", Code: 550,
				Diagnostic: "smtp; 550 5.1.1 <ada@example.com>: Recipient address rejected: User unknown", Source: report.SourceDSN},
			wantRule:  "recipient-unknown",
			wantEntry: &entry{suppression.ReasonHardBounce, suppression.StreamAll}, wantResult: ResultApplied,
		},
		{
			name: "hard bounce of bulk mail still suppresses every stream", stream: event.StreamBulk, from: idempotency.RecipientAccepted,
			rep:       report.Report{Kind: report.Bounced, Source: report.SourceSES, Status: "5.1.1", Code: 550, Diagnostic: "smtp; 550 5.1.1 user unknown"},
			wantState: idempotency.RecipientBounced, wantEvent: event.Bounced,
			wantBounce: &event.Bounce{Type: event.BounceHard, Status: "5.1.1", Code: 550, Diagnostic: "smtp; 550 5.1.1 user unknown", Source: report.SourceSES},
			wantRule:   "recipient-unknown",
			wantEntry:  &entry{suppression.ReasonHardBounce, suppression.StreamAll}, wantResult: ResultApplied,
		},
		{
			name: "soft bounce 4.2.2 mailbox full", stream: event.StreamTransactional, from: idempotency.RecipientAccepted,
			rep:       report.Report{Kind: report.Bounced, Source: report.SourceDSN, Status: "4.2.2", Code: 452, Diagnostic: "smtp; 452 4.2.2 Mailbox full"},
			wantState: idempotency.RecipientBounced, wantEvent: event.Bounced,
			wantBounce: &event.Bounce{Type: event.BounceSoft, Status: "4.2.2", Code: 452, Diagnostic: "smtp; 452 4.2.2 Mailbox full", Source: report.SourceDSN},
			wantRule:   "mailbox-full", wantResult: ResultApplied,
		},
		{
			name: "soft bounce 5.2.2 mailbox over quota", stream: event.StreamTransactional, from: idempotency.RecipientAccepted,
			rep: report.Report{Kind: report.Bounced, Source: report.SourceDSN, Status: "5.2.2", Code: 552,
				Diagnostic: "smtp; 552 5.2.2 The email account that you tried to reach is over quota"},
			wantState: idempotency.RecipientBounced, wantEvent: event.Bounced,
			wantBounce: &event.Bounce{Type: event.BounceSoft, Status: "5.2.2", Code: 552,
				Diagnostic: "smtp; 552 5.2.2 The email account that you tried to reach is over quota", Source: report.SourceDSN},
			wantRule: "mailbox-full-5xx", wantResult: ResultApplied,
		},
		{
			name: "policy bounce 5.7.1 blocked is not suppressed", stream: event.StreamTransactional, from: idempotency.RecipientAccepted,
			rep: report.Report{Kind: report.Bounced, Source: report.SourceDSN, Status: "5.7.1", Code: 550,
				Diagnostic: "smtp; 550 5.7.1 Message blocked due to sender reputation"},
			wantState: idempotency.RecipientBounced, wantEvent: event.Bounced,
			wantBounce: &event.Bounce{Type: event.BouncePolicy, Status: "5.7.1", Code: 550,
				Diagnostic: "smtp; 550 5.7.1 Message blocked due to sender reputation", Source: report.SourceDSN},
			wantRule: "policy-5xx", wantResult: ResultApplied,
		},
		{
			name: "unstructured bounce classified by its text alone", stream: event.StreamTransactional, from: idempotency.RecipientAccepted,
			rep:       report.Report{Kind: report.Bounced, Source: report.SourceUnstructured, Diagnostic: "550 5.1.1 no such user here"},
			wantState: idempotency.RecipientBounced, wantEvent: event.Bounced,
			wantBounce: &event.Bounce{Type: event.BounceHard, Diagnostic: "550 5.1.1 no such user here", Source: report.SourceUnstructured},
			wantRule:   "recipient-unknown",
			wantEntry:  &entry{suppression.ReasonHardBounce, suppression.StreamAll}, wantResult: ResultApplied,
		},
		{
			name: "status and code the schema refuses are left out of the event", stream: event.StreamTransactional, from: idempotency.RecipientAccepted,
			rep:       report.Report{Kind: report.Bounced, Source: report.SourceDSN, Status: "9.1.1", Code: 999, Diagnostic: "mailbox full"},
			wantState: idempotency.RecipientBounced, wantEvent: event.Bounced,
			wantBounce: &event.Bounce{Type: event.BounceSoft, Diagnostic: "mailbox full", Source: report.SourceDSN},
			wantRule:   "mailbox-full-text", wantResult: ResultApplied,
		},
		{
			name: "bounce after delivery (the next hop refused it)", stream: event.StreamTransactional, from: idempotency.RecipientDelivered,
			rep:       report.Report{Kind: report.Bounced, Source: report.SourceDSN, Status: "5.1.1", Code: 550, Diagnostic: "user unknown"},
			wantState: idempotency.RecipientBounced, wantEvent: event.Bounced,
			wantBounce: &event.Bounce{Type: event.BounceHard, Status: "5.1.1", Code: 550, Diagnostic: "user unknown", Source: report.SourceDSN},
			wantRule:   "recipient-unknown",
			wantEntry:  &entry{suppression.ReasonHardBounce, suppression.StreamAll}, wantResult: ResultApplied,
		},
		{
			name: "complaint on bulk suppresses bulk only", stream: event.StreamBulk, from: idempotency.RecipientAccepted,
			rep:       report.Report{Kind: report.Complained, Source: report.SourceARF, FeedbackType: "abuse"},
			wantState: idempotency.RecipientComplained, wantEvent: event.Complained, wantFB: "abuse",
			wantEntry: &entry{suppression.ReasonComplaint, suppression.StreamBulk}, wantResult: ResultApplied,
		},
		{
			name: "complaint on transactional mail", stream: "", from: idempotency.RecipientDelivered,
			rep:       report.Report{Kind: report.Complained, Source: report.SourceMailgun, FeedbackType: "abuse"},
			wantState: idempotency.RecipientComplained, wantEvent: event.Complained, wantFB: "abuse",
			wantEntry: &entry{suppression.ReasonComplaint, suppression.StreamTransactional}, wantResult: ResultApplied,
		},
		{
			name: "complaint of a bounced recipient", stream: event.StreamBulk, from: idempotency.RecipientBounced,
			rep:       report.Report{Kind: report.Complained, Source: report.SourceARF, FeedbackType: "fraud"},
			wantState: idempotency.RecipientComplained, wantEvent: event.Complained, wantFB: "fraud",
			wantEntry: &entry{suppression.ReasonComplaint, suppression.StreamBulk}, wantResult: ResultApplied,
		},
		{
			name: "delivered", stream: event.StreamTransactional, from: idempotency.RecipientAccepted,
			rep:       report.Report{Kind: report.Delivered, Source: report.SourceDSN, Status: "2.0.0"},
			wantState: idempotency.RecipientDelivered, wantEvent: event.Delivered, wantResult: ResultApplied,
		},
		{
			name: "delayed resolves nothing", stream: event.StreamTransactional, from: idempotency.RecipientAccepted,
			rep:       report.Report{Kind: report.Delayed, Source: report.SourceDSN, Status: "4.4.7", Diagnostic: "still trying"},
			wantState: idempotency.RecipientAccepted, wantResult: ResultDelayed,
		},
		{
			name: "stale: delivered after a bounce", stream: event.StreamTransactional, from: idempotency.RecipientBounced,
			rep:       report.Report{Kind: report.Delivered, Source: report.SourceDSN},
			wantState: idempotency.RecipientBounced, wantResult: ResultStale,
		},
		{
			name: "stale: the same bounce again", stream: event.StreamTransactional, from: idempotency.RecipientBounced,
			rep:       report.Report{Kind: report.Bounced, Source: report.SourceDSN, Status: "5.1.1", Code: 550},
			wantState: idempotency.RecipientBounced, wantResult: ResultStale,
		},
		{
			name: "stale: bounce after a complaint", stream: event.StreamTransactional, from: idempotency.RecipientComplained,
			rep:       report.Report{Kind: report.Bounced, Source: report.SourceDSN, Status: "5.1.1", Code: 550},
			wantState: idempotency.RecipientComplained, wantResult: ResultStale,
		},
		{
			// The report came before the send was recorded: refused for
			// now, so that its sender offers it again.
			name: "early: a recipient whose send is not recorded yet", stream: event.StreamTransactional, from: idempotency.RecipientPending,
			rep:       report.Report{Kind: report.Delivered, Source: report.SourceDSN},
			wantState: idempotency.RecipientPending, wantResult: ResultEarly,
		},
		{
			name: "stale: a suppressed recipient", stream: event.StreamTransactional, from: idempotency.RecipientSuppressed,
			rep:       report.Report{Kind: report.Complained, Source: report.SourceARF, FeedbackType: "abuse"},
			wantState: idempotency.RecipientSuppressed, wantResult: ResultStale,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const idx = 1
			const addr = "Ada@Example.com"
			h := newHarness(t,
				row(testMsgID, 0, "other@example.com", idempotency.RecipientAccepted, tt.stream),
				row(testMsgID, idx, addr, tt.from, tt.stream))
			rep := tt.rep
			rep.Token = h.signer.Token(testMsgID, idx)
			if err := h.a.ApplyReturned(t.Context(), []report.Report{rep}); (tt.wantResult == ResultEarly) != errors.Is(err, ErrEarly) ||
				err != nil && tt.wantResult != ResultEarly {
				t.Fatalf("ApplyReturned: %v", err)
			}
			if got := h.store.row(testMsgID, idx); got.State != tt.wantState {
				t.Errorf("state = %s, want %s", got.State, tt.wantState)
			}
			if got := h.store.row(testMsgID, 0); got.State != idempotency.RecipientAccepted {
				t.Errorf("the other recipient moved to %s", got.State)
			}
			if got := h.reports(tt.rep.Source, tt.rep.Kind, tt.wantResult); got != 1 {
				t.Errorf("reports_total{%s,%s,%s} = %v, want 1", tt.rep.Source, tt.rep.Kind, tt.wantResult, got)
			}
			if tt.wantEvent == "" {
				h.nothingHappened(t)
				return
			}

			evs := h.events.published()
			if len(evs) != 1 {
				t.Fatalf("published %d events, want 1: %+v", len(evs), evs)
			}
			e := evs[0]
			wantStream := tt.stream
			if wantStream == "" {
				wantStream = event.StreamTransactional
			}
			if e.ID != event.NewID(testMsgID, idx, tt.wantEvent, 0) || e.Type != tt.wantEvent || !e.At.Equal(testNow) ||
				e.MessageID != testMsgID || e.RecipientIndex != idx || e.Recipient != addr || e.Tenant != "acme" ||
				e.Stream != wantStream || e.Provider != "primary" || e.Metadata["order"] != "42" || e.FeedbackType != tt.wantFB {
				t.Errorf("event = %+v", e)
			}
			if tt.wantBounce != nil {
				want := *tt.wantBounce
				want.Rule = tt.wantRule
				if e.Bounce == nil || *e.Bounce != want {
					t.Errorf("bounce = %+v, want %+v", e.Bounce, want)
				}
				if got := h.store.row(testMsgID, idx); got.BounceType != want.Type || got.Rule != tt.wantRule {
					t.Errorf("row bounce type %q rule %q, want %q %q", got.BounceType, got.Rule, want.Type, tt.wantRule)
				}
				if got := testutil.ToFloat64(h.a.metrics.transitions.WithLabelValues(string(event.Bounced), want.Type)); got != 1 {
					t.Errorf("transitions_total{bounced,%s} = %v, want 1", want.Type, got)
				}
			} else if e.Bounce != nil {
				t.Errorf("a %s event carries bounce %+v", e.Type, e.Bounce)
			}

			entries := h.lists.added()
			if tt.wantEntry == nil {
				if len(entries) != 0 {
					t.Errorf("suppressed %+v, want nothing", entries)
				}
				return
			}
			if len(entries) != 1 {
				t.Fatalf("suppression entries = %+v, want one", entries)
			}
			got := entries[0]
			if got.Reason != tt.wantEntry.reason || got.Stream != tt.wantEntry.stream || got.Tenant != "acme" ||
				got.Address != addr || got.MessageID != testMsgID || got.Source != tt.rep.Source ||
				!got.ExpiresAt.IsZero() || !got.CreatedAt.Equal(testNow) {
				t.Errorf("entry = %+v, want %s on stream %q", got, tt.wantEntry.reason, tt.wantEntry.stream)
			}
			if n := testutil.ToFloat64(h.a.metrics.suppressed.WithLabelValues(string(tt.wantEntry.reason))); n != 1 {
				t.Errorf("suppressions_total{%s} = %v, want 1", tt.wantEntry.reason, n)
			}
		})
	}
}

// flip returns token with the character at i replaced by another of the
// alphabet.
func flip(token string, i int) string {
	c := byte('a')
	if token[i] == 'a' {
		c = 'b'
	}
	return token[:i] + string(c) + token[i+1:]
}

func TestApplyForgedTokens(t *testing.T) {
	good := newSigner(t, testKey).Token(testMsgID, 0)
	tests := []struct {
		name  string
		token string
	}{
		{"signed by another key", newSigner(t, otherKey).Token(testMsgID, 0)},
		{"first character flipped", flip(good, 0)},
		{"recipient index flipped", flip(good, 13)},
		{"mac character flipped", flip(good, 20)},
		{"next to last character flipped", flip(good, returnpath.TokenLen-2)},
		{"truncated", good[:returnpath.TokenLen-1]},
		{"not base32", strings.Repeat("!", returnpath.TokenLen)},
	}
	for _, tt := range tests {
		for _, signed := range []bool{false, true} {
			name := tt.name + map[bool]string{false: " (returned)", true: " (signed)"}[signed]
			t.Run(name, func(t *testing.T) {
				h := newHarness(t, row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
				// A signed report also names the mail and the address: a
				// token that does not verify is not rescued by them.
				rep := report.Report{Kind: report.Bounced, Source: report.SourceDSN, Token: tt.token, Status: "5.1.1", Code: 550,
					MessageID: testMsgID, Recipient: "ada@example.com"}
				apply := h.a.ApplyReturned
				if signed {
					apply = h.a.ApplySigned
				}
				if err := apply(t.Context(), []report.Report{rep}); err != nil {
					t.Fatalf("apply: %v", err)
				}
				if got := h.store.row(testMsgID, 0).State; got != idempotency.RecipientAccepted {
					t.Errorf("state = %s, want accepted", got)
				}
				if h.store.lookups != 0 {
					t.Errorf("a forged token caused %d lookups", h.store.lookups)
				}
				if got := h.reports(report.SourceDSN, report.Bounced, ResultForged); got != 1 {
					t.Errorf(`reports_total{result="forged"} = %v, want 1`, got)
				}
				h.nothingHappened(t)
			})
		}
	}
}

// TestApplyReturnedNeedsToken checks that a report that came back to a
// return path is never found by what it says about itself.
func TestApplyReturnedNeedsToken(t *testing.T) {
	h := newHarness(t, row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
	reps := []report.Report{
		{Kind: report.Bounced, Source: report.SourceDSN, Status: "5.1.1", Code: 550, MessageID: testMsgID, Recipient: "ada@example.com"},
		{Kind: report.Complained, Source: report.SourceARF, FeedbackType: "abuse", MessageID: testMsgID, Recipient: "ada@example.com"},
	}
	if err := h.a.ApplyReturned(t.Context(), reps); err != nil {
		t.Fatal(err)
	}
	if got := h.reports(report.SourceDSN, report.Bounced, ResultForged) + h.reports(report.SourceARF, report.Complained, ResultForged); got != 2 {
		t.Errorf(`reports_total{result="forged"} = %v, want 2`, got)
	}
	if h.store.lookups != 0 || h.store.row(testMsgID, 0).State != idempotency.RecipientAccepted {
		t.Errorf("lookups %d, state %s: want none and accepted", h.store.lookups, h.store.row(testMsgID, 0).State)
	}
	h.nothingHappened(t)
}

func TestApplySigned(t *testing.T) {
	const other = "order-43.1@postline.test"
	tests := []struct {
		name       string
		rep        func(s *returnpath.Signer) report.Report
		wantIdx    int // -1: nothing moves
		wantResult string
	}{
		{"by Message-ID and address", func(*returnpath.Signer) report.Report {
			return report.Report{Kind: report.Delivered, Source: report.SourceSES, MessageID: testMsgID, Recipient: "bob@example.com"}
		}, 1, ResultApplied},
		{"the address in another case", func(*returnpath.Signer) report.Report {
			return report.Report{Kind: report.Delivered, Source: report.SourceSES, MessageID: testMsgID, Recipient: "BOB@EXAMPLE.COM"}
		}, 1, ResultApplied},
		{"by token, without Message-ID", func(s *returnpath.Signer) report.Report {
			return report.Report{Kind: report.Delivered, Source: report.SourceMailgun, Token: s.Token(testMsgID, 2)}
		}, 2, ResultApplied},
		{"the token wins over the address", func(s *returnpath.Signer) report.Report {
			return report.Report{Kind: report.Delivered, Source: report.SourceMailgun, Token: s.Token(testMsgID, 2),
				MessageID: testMsgID, Recipient: "bob@example.com"}
		}, 2, ResultApplied},
		{"an address the mail was not sent to", func(*returnpath.Signer) report.Report {
			return report.Report{Kind: report.Delivered, Source: report.SourceSES, MessageID: testMsgID, Recipient: "eve@example.com"}
		}, -1, ResultUnknown},
		{"a Message-ID we never sent", func(*returnpath.Signer) report.Report {
			return report.Report{Kind: report.Delivered, Source: report.SourceSES, MessageID: "nope@elsewhere", Recipient: "bob@example.com"}
		}, -1, ResultUnknown},
		{"no Message-ID", func(*returnpath.Signer) report.Report {
			return report.Report{Kind: report.Delivered, Source: report.SourceSES, Recipient: "bob@example.com"}
		}, -1, ResultUnknown},
		{"no address", func(*returnpath.Signer) report.Report {
			return report.Report{Kind: report.Delivered, Source: report.SourceSES, MessageID: testMsgID}
		}, -1, ResultUnknown},
		{"a valid token of a mail we have no row of (purged)", func(s *returnpath.Signer) report.Report {
			return report.Report{Kind: report.Delivered, Source: report.SourceMailgun, Token: s.Token(other, 0), MessageID: other}
		}, -1, ResultUnknown},
		{"a valid token without a Message-ID to check", func(s *returnpath.Signer) report.Report {
			return report.Report{Kind: report.Delivered, Source: report.SourceMailgun, Token: s.Token(other, 0)}
		}, -1, ResultUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t,
				row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional),
				row(testMsgID, 1, "bob@example.com", idempotency.RecipientAccepted, event.StreamTransactional),
				row(testMsgID, 2, "cy@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
			rep := tt.rep(h.signer)
			if err := h.a.ApplySigned(t.Context(), []report.Report{rep}); (tt.wantResult == ResultEarly) != errors.Is(err, ErrEarly) ||
				err != nil && tt.wantResult != ResultEarly {
				t.Fatalf("ApplySigned: %v", err)
			}
			for i := range 3 {
				want := idempotency.RecipientAccepted
				if i == tt.wantIdx {
					want = idempotency.RecipientDelivered
				}
				if got := h.store.row(testMsgID, i).State; got != want {
					t.Errorf("recipient %d = %s, want %s", i, got, want)
				}
			}
			if got := h.reports(rep.Source, rep.Kind, tt.wantResult); got != 1 {
				t.Errorf("reports_total{%s} = %v, want 1", tt.wantResult, got)
			}
			evs := h.events.published()
			if tt.wantIdx < 0 {
				h.nothingHappened(t)
				return
			}
			if len(evs) != 1 || evs[0].RecipientIndex != tt.wantIdx || evs[0].ID != event.NewID(testMsgID, tt.wantIdx, event.Delivered, 0) {
				t.Errorf("events = %+v, want one delivered event of recipient %d", evs, tt.wantIdx)
			}
		})
	}
}

// TestApplySharedRef checks that two Message-IDs whose references collide
// are told apart by the report's Message-ID or address, and that a report
// that tells neither is not guessed at.
func TestApplySharedRef(t *testing.T) {
	const a, b = "shared-a@postline.test", "shared-b@postline.test"
	h := newHarness(t)
	// Two Message-IDs whose 8-byte references collide cannot be made up,
	// so the store below answers every reference with every row of the
	// index, as Postgres would for a real collision.
	rowA := row(a, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional)
	rowB := row(b, 0, "bob@example.com", idempotency.RecipientAccepted, event.StreamTransactional)
	store := &sharedRefStore{fakeStore: newFakeStore(func() time.Time { return testNow }, rowA, rowB)}
	app, err := New(Config{NowFunc: func() time.Time { return testNow }}, discard(), prometheus.NewRegistry(), store, h.events, h.lists, h.signer)
	if err != nil {
		t.Fatal(err)
	}
	tok := h.signer.Token(a, 0)
	reps := []report.Report{
		{Kind: report.Delivered, Source: report.SourceDSN, Token: tok},                                // ambiguous: dropped
		{Kind: report.Delivered, Source: report.SourceDSN, Token: tok, MessageID: b},                  // b by Message-ID
		{Kind: report.Complained, Source: report.SourceARF, Token: tok, Recipient: "ADA@example.com"}, // a by address
	}
	if err := app.ApplyReturned(t.Context(), reps); err != nil {
		t.Fatal(err)
	}
	if got := store.row(a, 0).State; got != idempotency.RecipientComplained {
		t.Errorf("a = %s, want complained", got)
	}
	if got := store.row(b, 0).State; got != idempotency.RecipientDelivered {
		t.Errorf("b = %s, want delivered", got)
	}
	if got := testutil.ToFloat64(app.metrics.reports.WithLabelValues(report.SourceDSN, string(report.Delivered), ResultUnknown)); got != 1 {
		t.Errorf("ambiguous report counted %v times as unknown, want 1", got)
	}
	if n := len(h.events.published()); n != 2 {
		t.Errorf("published %d events, want 2", n)
	}
}

// sharedRefStore returns every row of the index for any ref: what the
// Postgres store does when two Message-IDs share a reference.
type sharedRefStore struct{ *fakeStore }

func (s *sharedRefStore) RecipientsByRef(_ context.Context, _ []byte, idx int) ([]idempotency.Recipient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lookups++
	var out []idempotency.Recipient
	for _, r := range s.sorted() {
		if r.Index == idx {
			out = append(out, r)
		}
	}
	return out, nil
}

// TestApplySameRecipientTwiceInOneCall checks that two reports about one
// recipient in one call (a report listing a recipient twice, a provider
// batch with two events) publish one transition: the one that is applied.
func TestApplySameRecipientTwiceInOneCall(t *testing.T) {
	tests := []struct {
		name   string
		second report.Kind
	}{
		{"the same bounce twice", report.Bounced},
		{"a bounce then a delivery", report.Delivered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
			tok := h.signer.Token(testMsgID, 0)
			reps := []report.Report{
				{Kind: report.Bounced, Source: report.SourceDSN, Token: tok, Status: "5.1.1", Code: 550},
				{Kind: tt.second, Source: report.SourceDSN, Token: tok, Status: "5.1.1", Code: 550},
			}
			if err := h.a.ApplyReturned(t.Context(), reps); err != nil {
				t.Fatal(err)
			}
			if got := h.store.row(testMsgID, 0).State; got != idempotency.RecipientBounced {
				t.Errorf("state = %s, want bounced", got)
			}
			evs := h.events.published()
			if len(evs) != 1 || evs[0].Type != event.Bounced {
				t.Errorf("events = %+v, want the one bounced event", evs)
			}
			if n := len(h.lists.added()); n != 1 {
				t.Errorf("added %d entries, want 1", n)
			}
			if got := h.reports(report.SourceDSN, tt.second, ResultStale); got != 1 {
				t.Errorf("the second report counted %v times as stale, want 1", got)
			}
		})
	}
}

// TestApplyDeliveredThenBouncedInOneCall checks that a second report
// about a recipient in one call is decided on the state the first left:
// a delivery and then a bounce from the next hop both apply, in order.
func TestApplyDeliveredThenBouncedInOneCall(t *testing.T) {
	h := newHarness(t, row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
	tok := h.signer.Token(testMsgID, 0)
	reps := []report.Report{
		{Kind: report.Delivered, Source: report.SourceDSN, Token: tok},
		{Kind: report.Bounced, Source: report.SourceDSN, Token: tok, Status: "5.1.1", Code: 550},
		{Kind: report.Bounced, Source: report.SourceDSN, Token: tok, Status: "5.1.1", Code: 550},
	}
	if err := h.a.ApplyReturned(t.Context(), reps); err != nil {
		t.Fatal(err)
	}
	if got := h.store.row(testMsgID, 0).State; got != idempotency.RecipientBounced {
		t.Errorf("state = %s, want bounced", got)
	}
	var types []string
	for _, e := range h.events.published() {
		types = append(types, string(e.Type))
	}
	if strings.Join(types, ",") != "delivered,bounced" {
		t.Errorf("events = %v, want delivered then bounced", types)
	}
	if got := h.reports(report.SourceDSN, report.Bounced, ResultStale); got != 1 {
		t.Errorf("the repeated bounce counted %v times as stale, want 1", got)
	}
}

// publishedAfterTransition makes h's events check, as each is published,
// that the store already shows the transition it reports: the applier
// publishes nothing before its compare-and-set wins.
func publishedAfterTransition(t *testing.T, h *harness) {
	t.Helper()
	h.events.check = func(e event.Event) {
		if got := h.store.row(e.MessageID, e.RecipientIndex).State; string(got) != string(e.Type) {
			t.Errorf("event %s (%s) published while the row is %s", e.ID, e.Type, got)
		}
	}
}

// TestApplyLosesRace checks a report whose compare-and-set loses to a
// concurrent writer: nothing is published for the attempt that lost, and
// the report is decided again on the state the winner left.
func TestApplyLosesRace(t *testing.T) {
	const life = 7
	complaint := report.Report{Kind: report.Complained, Source: report.SourceARF, FeedbackType: "abuse"}
	tests := []struct {
		name string
		rep  report.Report
		// concurrent moves the row before every Resolve.
		concurrent func(r *idempotency.Recipient)
		wantState  idempotency.RecipientState
		wantResult string
		wantIDs    []string // the events published
		wantLists  int
	}{
		{
			name: "a complaint losing to a delivery still applies, after it", rep: complaint,
			concurrent: func(r *idempotency.Recipient) { r.State = idempotency.RecipientDelivered },
			wantState:  idempotency.RecipientComplained, wantResult: ResultApplied,
			wantIDs:   []string{event.NewLifeID(testMsgID, life, 0, event.Complained, 0)},
			wantLists: 1,
		},
		{
			name: "a delivery losing to a complaint is stale",
			rep:  report.Report{Kind: report.Delivered, Source: report.SourceDSN},
			concurrent: func(r *idempotency.Recipient) {
				r.State = idempotency.RecipientComplained
			},
			wantState: idempotency.RecipientComplained, wantResult: ResultStale,
		},
		{
			name: "a bounce decided before a replay applies to the new life, with its IDs",
			rep:  report.Report{Kind: report.Bounced, Source: report.SourceDSN, Status: "5.1.1", Code: 550},
			concurrent: func(r *idempotency.Recipient) {
				r.Life = life + 1
			},
			wantState: idempotency.RecipientBounced, wantResult: ResultApplied,
			wantIDs:   []string{event.NewLifeID(testMsgID, life+1, 0, event.Bounced, 0)},
			wantLists: 1,
		},
		{
			name: "a report losing every time is stale after maxLost rounds", rep: complaint,
			concurrent: func(r *idempotency.Recipient) { r.Life++ },
			wantState:  idempotency.RecipientAccepted, wantResult: ResultStale,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional)
			r.Life = life
			h := newHarness(t, r)
			publishedAfterTransition(t, h)
			h.store.beforeResolve = func(s *fakeStore) {
				r := s.row(testMsgID, 0)
				tt.concurrent(&r)
				s.PutRecipient(r)
			}
			rep := tt.rep
			rep.Token = h.signer.Token(testMsgID, 0)
			if err := h.a.ApplyReturned(t.Context(), []report.Report{rep}); err != nil {
				t.Fatal(err)
			}
			if got := h.store.row(testMsgID, 0).State; got != tt.wantState {
				t.Errorf("state = %s, want %s", got, tt.wantState)
			}
			var ids []string
			for _, e := range h.events.published() {
				ids = append(ids, e.ID)
			}
			if !slices.Equal(ids, tt.wantIDs) {
				t.Errorf("published %v, want %v", ids, tt.wantIDs)
			}
			if n := len(h.lists.added()); n != tt.wantLists {
				t.Errorf("added %d suppression entries, want %d", n, tt.wantLists)
			}
			for _, res := range []string{ResultApplied, ResultStale} {
				want := map[bool]float64{true: 1, false: 0}[res == tt.wantResult]
				if got := h.reports(rep.Source, rep.Kind, res); got != want {
					t.Errorf("reports_total{%s} = %v, want %v", res, got, want)
				}
			}
			if got := testutil.ToFloat64(h.a.metrics.transitions.WithLabelValues(string(rep.Kind), "hard")) +
				testutil.ToFloat64(h.a.metrics.transitions.WithLabelValues(string(rep.Kind), "")); got != float64(len(tt.wantIDs)) {
				t.Errorf("transitions = %v, want %d", got, len(tt.wantIDs))
			}
			if p := h.store.pending(); len(p) != 0 {
				t.Errorf("outbox entries left: %v", p)
			}
			if tt.name == "a report losing every time is stale after maxLost rounds" && h.store.resolveCalls != maxLost+1 {
				t.Errorf("Resolve called %d times, want %d", h.store.resolveCalls, maxLost+1)
			}
		})
	}
}

// TestApplyFailuresBeforeTheTransition: a failure before the
// compare-and-set won leaves nothing behind; offered again, the report
// is applied.
func TestApplyFailuresBeforeTheTransition(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name        string
		setup       func(h *harness)
		wantResolve int
	}{
		{"lookup fails", func(h *harness) { h.store.lookupErr = boom }, 0},
		{"resolve fails", func(h *harness) { h.store.resolveErr = boom }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
			tt.setup(h)
			rep := report.Report{Kind: report.Bounced, Source: report.SourceDSN, Status: "5.1.1", Code: 550, Token: h.signer.Token(testMsgID, 0)}
			err := h.a.ApplyReturned(t.Context(), []report.Report{rep})
			if !errors.Is(err, boom) {
				t.Fatalf("ApplyReturned = %v, want it to wrap %v", err, boom)
			}
			if h.store.resolveCalls != tt.wantResolve {
				t.Errorf("Resolve called %d times, want %d", h.store.resolveCalls, tt.wantResolve)
			}
			h.nothingPublished(t)
			if got := h.store.row(testMsgID, 0).State; got != idempotency.RecipientAccepted {
				t.Errorf("state = %s, want accepted", got)
			}
			if got := h.reports(report.SourceDSN, report.Bounced, ResultApplied); got != 0 {
				t.Errorf("a failed report counted %v times as applied", got)
			}

			// Offered again once the failure passed, it is applied.
			h.store.lookupErr, h.store.resolveErr = nil, nil
			if err := h.a.ApplyReturned(t.Context(), []report.Report{rep}); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if got := h.store.row(testMsgID, 0).State; got != idempotency.RecipientBounced {
				t.Errorf("after the retry state = %s, want bounced", got)
			}
			ids := map[string]bool{}
			for _, e := range h.events.published() {
				ids[e.ID] = true
			}
			if len(ids) != 1 || !ids[event.NewID(testMsgID, 0, event.Bounced, 0)] {
				t.Errorf("event IDs = %v, want the one bounced ID", slicesOf(ids))
			}
			if len(h.lists.added()) != 1 || len(h.store.pending()) != 0 {
				t.Errorf("entries %+v, outbox %v; want one entry and an empty outbox", h.lists.added(), h.store.pending())
			}
		})
	}
}

// TestApplyFailuresAfterTheTransition: a failure after the
// compare-and-set won leaves the transition's outbox entry, and the drain
// publishes its event (with the ID the applier gave it) and adds its
// suppression entry once DrainAge has passed. The report offered again
// finds the recipient moved on.
func TestApplyFailuresAfterTheTransition(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name       string
		setup      func(h *harness)
		wantErr    bool
		wantEvents int // published by the applier
		wantLists  int // entries added by the applier
	}{
		// The suppression entry is added before the event is published.
		{"suppression fails", func(h *harness) { h.lists.err = boom }, true, 0, 0},
		{"publish fails", func(h *harness) { h.events.Fail(-1, boom) }, true, 0, 1},
		{"deleting the outbox entry fails", func(h *harness) { h.store.doneErr = boom }, false, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
			tt.setup(h)
			rep := report.Report{Kind: report.Bounced, Source: report.SourceDSN, Status: "5.1.1", Code: 550, Token: h.signer.Token(testMsgID, 0)}
			err := h.a.ApplyReturned(t.Context(), []report.Report{rep})
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, boom)) {
				t.Fatalf("ApplyReturned = %v, want an error wrapping %v: %v", err, boom, tt.wantErr)
			}
			if got := h.store.row(testMsgID, 0).State; got != idempotency.RecipientBounced {
				t.Errorf("state = %s, want bounced: the transition happened", got)
			}
			if got := h.reports(report.SourceDSN, report.Bounced, ResultApplied); got != 1 {
				t.Errorf("applied = %v, want 1", got)
			}
			if n := len(h.events.published()); n != tt.wantEvents {
				t.Errorf("published %d events, want %d", n, tt.wantEvents)
			}
			if n := len(h.lists.added()); n != tt.wantLists {
				t.Errorf("added %d entries, want %d", n, tt.wantLists)
			}
			bounced := event.NewID(testMsgID, 0, event.Bounced, 0)
			if p := h.store.pending(); !slices.Equal(p, []string{bounced}) {
				t.Fatalf("outbox = %v, want the bounce's entry", p)
			}

			h.lists.err, h.store.doneErr = nil, nil
			h.events.Fail(0, nil)
			// Offered again: the recipient moved on, nothing to publish.
			if err := h.a.ApplyReturned(t.Context(), []report.Report{rep}); err != nil {
				t.Fatal(err)
			}
			if n := len(h.events.published()); n != tt.wantEvents {
				t.Errorf("the report offered again published %d events", n-tt.wantEvents)
			}
			// The drain leaves the entry to its applier until DrainAge
			// has passed.
			if n, err := h.a.Drain(t.Context()); err != nil || n != 0 {
				t.Fatalf("Drain before DrainAge = %d, %v; want nothing", n, err)
			}
			h.store.now = func() time.Time { return testNow.Add(DefaultDrainAge + time.Second) }
			if n, err := h.a.Drain(t.Context()); err != nil || n != 1 {
				t.Fatalf("Drain = %d, %v; want the one entry", n, err)
			}
			if got := testutil.ToFloat64(h.a.metrics.drained); got != 1 {
				t.Errorf("outbox_drained_total = %v, want 1", got)
			}
			evs := h.events.published()
			if len(evs) != tt.wantEvents+1 {
				t.Fatalf("published %d events, want %d", len(evs), tt.wantEvents+1)
			}
			for _, e := range evs {
				if e.ID != bounced || e.Type != event.Bounced || e.Bounce == nil || e.Bounce.Status != "5.1.1" || !e.At.Equal(testNow) {
					t.Errorf("event = %+v, want the bounce as the applier made it", e)
				}
			}
			entries := h.lists.added()
			if len(entries) != tt.wantLists+1 || entries[len(entries)-1].Reason != suppression.ReasonHardBounce ||
				entries[len(entries)-1].Address != "ada@example.com" {
				t.Errorf("entries = %+v, want the hard bounce's", entries)
			}
			if p := h.store.pending(); len(p) != 0 {
				t.Errorf("outbox after the drain = %v, want empty", p)
			}
			if n, err := h.a.Drain(t.Context()); err != nil || n != 0 {
				t.Errorf("second Drain = %d, %v; want nothing", n, err)
			}
		})
	}
}

// TestDrainFailures: a drain that cannot publish or suppress leaves the
// entries for the next pass; an entry that does not decode is left alone
// while the others go.
func TestDrainFailures(t *testing.T) {
	boom := errors.New("boom")
	h := newHarness(t, row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional),
		row(testMsgID, 1, "bob@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
	h.events.Fail(-1, boom)
	s := h.signer
	reps := []report.Report{
		{Kind: report.Complained, Source: report.SourceARF, FeedbackType: "abuse", Token: s.Token(testMsgID, 0)},
		{Kind: report.Delivered, Source: report.SourceDSN, Token: s.Token(testMsgID, 1)},
	}
	if err := h.a.ApplyReturned(t.Context(), reps); !errors.Is(err, boom) {
		t.Fatalf("ApplyReturned = %v, want %v", err, boom)
	}
	h.store.PutOutbox(idempotency.OutboxEntry{EventID: "evt_garbled", MessageID: testMsgID,
		Body: []byte("{not json"), CreatedAt: testNow})
	h.store.now = func() time.Time { return testNow.Add(time.Hour) }

	for _, f := range []struct {
		name  string
		setup func()
	}{
		{"read fails", func() { h.store.outboxErr = boom }},
		{"publish fails", func() { h.store.outboxErr = nil }},
		{"suppression fails", func() { h.events.Fail(0, nil); h.lists.err = boom }},
		{"delete fails", func() { h.lists.err, h.store.doneErr = nil, boom }},
	} {
		f.setup()
		if n, err := h.a.Drain(t.Context()); !errors.Is(err, boom) || n != 0 {
			t.Errorf("%s: Drain = %d, %v; want 0 and %v", f.name, n, err, boom)
		}
		if p := h.store.pending(); len(p) != 3 {
			t.Errorf("%s: outbox = %v, want all three entries kept", f.name, p)
		}
	}
	h.store.doneErr = nil
	if n, err := h.a.Drain(t.Context()); err != nil || n != 2 {
		t.Fatalf("Drain = %d, %v; want the two good entries", n, err)
	}
	if p := h.store.pending(); !slices.Equal(p, []string{"evt_garbled"}) {
		t.Errorf("outbox = %v, want the garbled entry only", p)
	}
	types := map[event.Type]int{}
	for _, e := range h.events.published() {
		types[e.Type]++
	}
	if len(types) != 2 || types[event.Complained] < 1 || types[event.Delivered] < 1 {
		t.Errorf("published %v, want the complaint and the delivery", types)
	}
	if entries := h.lists.added(); len(entries) == 0 || entries[len(entries)-1].Reason != suppression.ReasonComplaint {
		t.Errorf("entries = %+v, want the complaint's", entries)
	}
}

// TestRunDrains checks that Run drains on its own ticks until its
// context ends, and returns nil then.
func TestRunDrains(t *testing.T) {
	store := newFakeStore(func() time.Time { return testNow.Add(time.Hour) },
		row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
	events := newFakeEvents()
	a, err := New(Config{NowFunc: func() time.Time { return testNow }, DrainInterval: time.Millisecond}, discard(),
		prometheus.NewRegistry(), store, events, &fakeLists{t: t}, newSigner(t, testKey))
	if err != nil {
		t.Fatal(err)
	}
	ev := a.eventOf(step{row: store.row(testMsgID, 0), kind: event.Delivered, to: idempotency.RecipientDelivered}, testNow)
	body, err := encodeEffect(ev, nil)
	if err != nil {
		t.Fatal(err)
	}
	store.PutOutbox(idempotency.OutboxEntry{EventID: ev.ID, MessageID: testMsgID, Body: body, CreatedAt: testNow})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(store.pending()) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil after its context ended", err)
	}
	if evs := events.published(); len(evs) != 1 || evs[0].ID != ev.ID || len(store.pending()) != 0 {
		t.Errorf("published %+v, outbox %v; want the one entry drained", evs, store.pending())
	}
}

func slicesOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	return out
}

// TestApplyBatchSettles applies one call with reports of every outcome and
// checks that the good ones are applied in one publication and one
// Resolve, and the mail is confirmed once its last recipient resolved.
func TestApplyBatchSettles(t *testing.T) {
	const cancelled = "all-bounced@postline.test"
	h := newHarness(t,
		row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional),
		row(testMsgID, 1, "bob@example.com", idempotency.RecipientAccepted, event.StreamTransactional),
		row(testMsgID, 2, "cy@example.com", idempotency.RecipientBounced, event.StreamTransactional),
		row(cancelled, 0, "dan@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
	s := h.signer
	reps := []report.Report{
		{Kind: report.Delivered, Source: report.SourceDSN, Token: s.Token(testMsgID, 0)},
		{Kind: report.Bounced, Source: report.SourceDSN, Token: newSigner(t, otherKey).Token(testMsgID, 1), Status: "5.1.1"}, // forged
		{Kind: report.Delayed, Source: report.SourceDSN, Token: s.Token(testMsgID, 1)},
		{Kind: report.Bounced, Source: report.SourceDSN, Token: s.Token(testMsgID, 1), Status: "5.2.2", Code: 552, Diagnostic: "mailbox full"},
		{Kind: report.Delivered, Source: report.SourceDSN, Token: s.Token(testMsgID, 2)}, // stale
		{Kind: report.Bounced, Source: report.SourceDSN, Token: s.Token(cancelled, 0), Status: "5.1.1", Code: 550},
	}
	if err := h.a.ApplyReturned(t.Context(), reps); err != nil {
		t.Fatal(err)
	}
	if h.events.Calls() != 1 || h.store.resolveCalls != 1 {
		t.Errorf("Publish called %d times, Resolve %d; want once each", h.events.Calls(), h.store.resolveCalls)
	}
	var got []string
	for _, e := range h.events.published() {
		got = append(got, e.MessageID+"/"+string(e.Type))
	}
	want := []string{testMsgID + "/delivered", testMsgID + "/bounced", cancelled + "/bounced"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("events = %v, want %v", got, want)
	}
	for _, c := range []struct {
		id, want string
	}{{testMsgID, "confirmed"}, {cancelled, "cancelled"}} {
		if got := h.store.row(c.id, 0).Confirmation; got != c.want {
			t.Errorf("%s confirmation = %q, want %q", c.id, got, c.want)
		}
		if got := testutil.ToFloat64(h.a.metrics.confirmations.WithLabelValues(c.want)); got != 1 {
			t.Errorf("confirmations_total{%s} = %v, want 1", c.want, got)
		}
	}
	for _, c := range []struct {
		kind   report.Kind
		result string
		want   float64
	}{
		{report.Delivered, ResultApplied, 1}, {report.Bounced, ResultApplied, 2}, {report.Bounced, ResultForged, 1},
		{report.Delayed, ResultDelayed, 1}, {report.Delivered, ResultStale, 1},
	} {
		if got := h.reports(report.SourceDSN, c.kind, c.result); got != c.want {
			t.Errorf("reports_total{dsn,%s,%s} = %v, want %v", c.kind, c.result, got, c.want)
		}
	}
	// Only the hard bounce suppresses.
	if e := h.lists.added(); len(e) != 1 || e[0].Address != "dan@example.com" || e[0].Reason != suppression.ReasonHardBounce {
		t.Errorf("entries = %+v, want dan's hard bounce", e)
	}
}

// TestApplyWithoutLists checks that an Applier without suppression lists
// still applies bounces and complaints.
func TestApplyWithoutLists(t *testing.T) {
	store := newFakeStore(func() time.Time { return testNow },
		row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
	events := newFakeEvents()
	signer := newSigner(t, testKey)
	a, err := New(Config{}, discard(), prometheus.NewRegistry(), store, events, nil, signer)
	if err != nil {
		t.Fatal(err)
	}
	rep := report.Report{Kind: report.Bounced, Source: report.SourceDSN, Status: "5.1.1", Code: 550, Token: signer.Token(testMsgID, 0)}
	if err := a.ApplyReturned(t.Context(), []report.Report{rep}); err != nil {
		t.Fatal(err)
	}
	if store.row(testMsgID, 0).State != idempotency.RecipientBounced || len(events.published()) != 1 {
		t.Errorf("state %s, %d events; want bounced and one", store.row(testMsgID, 0).State, len(events.published()))
	}
	if at := events.published()[0].At; at.IsZero() || at.Location() != time.UTC {
		t.Errorf("event at %v, want the default clock in UTC", at)
	}
}

// TestApplyCustomRules checks that the configured rule set, not the
// default one, decides a bounce's type.
func TestApplyCustomRules(t *testing.T) {
	rules, err := failure.ParseRules([]byte(`
rules:
  - name: everything-4xx
    code_class: 4
    class: transient
    bounce: soft
  - name: everything-5xx
    code_class: 5
    class: permanent
    bounce: policy
`))
	if err != nil {
		t.Fatalf("ParseRules: %v", err)
	}
	store := newFakeStore(func() time.Time { return testNow },
		row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
	events, lists := newFakeEvents(), &fakeLists{t: t}
	signer := newSigner(t, testKey)
	a, err := New(Config{Rules: rules, NowFunc: func() time.Time { return testNow }}, discard(), prometheus.NewRegistry(), store, events, lists, signer)
	if err != nil {
		t.Fatal(err)
	}
	rep := report.Report{Kind: report.Bounced, Source: report.SourceDSN, Status: "5.1.1", Code: 550, Token: signer.Token(testMsgID, 0)}
	if err := a.ApplyReturned(t.Context(), []report.Report{rep}); err != nil {
		t.Fatal(err)
	}
	evs := events.published()
	if len(evs) != 1 || evs[0].Bounce == nil || evs[0].Bounce.Type != event.BouncePolicy || evs[0].Bounce.Rule != "everything-5xx" {
		t.Fatalf("events = %+v, want one policy bounce by everything-5xx", evs)
	}
	if e := lists.added(); len(e) != 0 {
		t.Errorf("a policy bounce suppressed %+v", e)
	}
}

// TestApplyPermanentVerdict checks a provider bounce without status or
// code: its permanent or temporary verdict stands in for the status.
func TestApplyPermanentVerdict(t *testing.T) {
	for _, permanent := range []bool{true, false} {
		h := newHarness(t, row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
		rep := report.Report{Kind: report.Bounced, Source: report.SourceSES, MessageID: testMsgID, Recipient: "ada@example.com", Permanent: &permanent}
		if err := h.a.ApplySigned(t.Context(), []report.Report{rep}); err != nil {
			t.Fatal(err)
		}
		status := map[bool]string{true: "5.0.0", false: "4.0.0"}[permanent]
		want := failure.Default().ClassifyBounce(0, status, "")
		if got := h.store.row(testMsgID, 0); got.State != idempotency.RecipientBounced || got.Rule != want.Rule {
			t.Errorf("permanent=%v: row %s rule %q, want bounced by the %s rule %q", permanent, got.State, got.Rule, status, want.Rule)
		}
		// The event does not claim a status the provider did not give.
		if evs := h.events.published(); len(evs) != 1 || evs[0].Bounce.Status != "" || evs[0].Bounce.Code != 0 {
			t.Errorf("permanent=%v: events = %+v", permanent, evs)
		}
	}
}

// TestApplyProviderHard checks a provider's hard verdict: a bounce the
// rules find soft (or match nothing of) becomes hard and suppresses the
// address; a rule's hard stays as it is; a policy refusal stays policy.
func TestApplyProviderHard(t *testing.T) {
	yes := true
	tests := []struct {
		name             string
		rep              report.Report
		bounceType, rule string
		suppressed       bool
	}{
		{"no status", report.Report{Permanent: &yes, Hard: true}, "hard", failure.RuleProviderHard, true},
		{"a reply the rules find soft", report.Report{Code: 550, Diagnostic: "550 Requested action not taken", Permanent: &yes, Hard: true},
			"hard", failure.RuleProviderHard, true},
		{"a reply the rules find hard", report.Report{Code: 550, Status: "5.1.1", Permanent: &yes, Hard: true},
			"hard", "recipient-unknown", true},
		{"a policy refusal", report.Report{Code: 550, Status: "5.7.1", Diagnostic: "5.7.1 blocked using Spamhaus", Permanent: &yes, Hard: true},
			"policy", "policy-5xx", false},
		{"permanent but not hard", report.Report{Permanent: &yes}, "soft", "permanent-default", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
			rep := tt.rep
			rep.Kind, rep.Source, rep.MessageID, rep.Recipient = report.Bounced, report.SourceSES, testMsgID, "ada@example.com"
			if err := h.a.ApplySigned(t.Context(), []report.Report{rep}); err != nil {
				t.Fatal(err)
			}
			if got := h.store.row(testMsgID, 0); got.State != idempotency.RecipientBounced || got.BounceType != tt.bounceType || got.Rule != tt.rule {
				t.Errorf("row %s %s by %q, want bounced %s by %q", got.State, got.BounceType, got.Rule, tt.bounceType, tt.rule)
			}
			if added := h.lists.added(); (len(added) == 1 && added[0].Reason == suppression.ReasonHardBounce && added[0].Stream == suppression.StreamAll) != tt.suppressed {
				t.Errorf("suppression entries %+v, want suppressed on every stream %t", added, tt.suppressed)
			}
		})
	}
}

func TestNewRequiresPorts(t *testing.T) {
	store, events, signer := newFakeStore(time.Now), newFakeEvents(), newSigner(t, testKey)
	for name, f := range map[string]func() error{
		"store": func() error {
			_, err := New(Config{}, discard(), prometheus.NewRegistry(), nil, events, nil, signer)
			return err
		},
		"events": func() error {
			_, err := New(Config{}, discard(), prometheus.NewRegistry(), store, nil, nil, signer)
			return err
		},
		"tokens": func() error {
			_, err := New(Config{}, discard(), prometheus.NewRegistry(), store, events, nil, nil)
			return err
		},
	} {
		if err := f(); err == nil {
			t.Errorf("New without %s succeeded", name)
		}
	}
}

// TestMetricsLint checks the package's metrics against Prometheus's
// naming rules, with an Applier and a Sweeper on one registry.
func TestMetricsLint(t *testing.T) {
	h := newHarness(t, row(testMsgID, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
	if _, err := NewSweeper(SweepConfig{}, discard(), h.reg, h.store, h.events); err != nil {
		t.Fatalf("NewSweeper: %v", err)
	}
	rep := report.Report{Kind: report.Complained, Source: report.SourceARF, Token: h.signer.Token(testMsgID, 0)}
	if err := h.a.ApplyReturned(t.Context(), []report.Report{rep}); err != nil {
		t.Fatal(err)
	}
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"postline_outcome_reports_total", "postline_outcome_transitions_total",
		"postline_outcome_suppressions_total", "postline_outcome_confirmations_total", "postline_outcome_unconfirmed_total"} {
		if !names[n] {
			t.Errorf("metric %s not registered", n)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// TestApplyEarlyReport: a report whose token verifies, about mail that is
// claimed but whose send is not recorded yet, is refused for now
// (ErrEarly), changes nothing, and is applied when offered again after the
// record.
func TestApplyEarlyReport(t *testing.T) {
	const early = "early@example.com"
	h := newHarness(t)
	h.store.claim(early)
	rep := report.Report{Kind: report.Bounced, Source: report.SourceDSN, Token: h.signer.Token(early, 0),
		MessageID: early, Status: "5.1.1", Code: 550, Diagnostic: "no such user"}
	if err := h.a.ApplyReturned(t.Context(), []report.Report{rep}); !errors.Is(err, ErrEarly) {
		t.Fatalf("ApplyReturned before the record = %v, want ErrEarly", err)
	}
	if n := len(h.events.All()); n != 0 {
		t.Fatalf("an early report published %d events", n)
	}
	h.store.PutRecipient(row(early, 0, "ada@example.com", idempotency.RecipientAccepted, event.StreamTransactional))
	if err := h.a.ApplyReturned(t.Context(), []report.Report{rep}); err != nil {
		t.Fatalf("ApplyReturned after the record: %v", err)
	}
	if got := h.store.row(early, 0).State; got != idempotency.RecipientBounced {
		t.Errorf("state = %s, want bounced", got)
	}
}
