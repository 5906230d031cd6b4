package delivery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/testkit/writertest"
	"github.com/postline/postline/job"
)

// scriptedSession refuses the recipients its script names at RCPT and
// takes the others, recording each envelope it was given.
type scriptedSession struct {
	mu        sync.Mutex
	refuse    func(addr string) *sender.Error
	envelopes [][]sender.Recipient
	// dkimDomain is the domain the session says signed what it accepted.
	dkimDomain string
}

func (s *scriptedSession) SendTo(_ context.Context, _ *job.Job, rcpts []sender.Recipient) (sender.Result, error) {
	s.mu.Lock()
	s.envelopes = append(s.envelopes, slices.Clone(rcpts))
	s.mu.Unlock()
	var res sender.Result
	for i, r := range rcpts {
		if e := s.refuse(r.Address); e != nil {
			res.Refused = append(res.Refused, sender.Refusal{Index: i, Err: e})
		} else {
			res.Accepted = append(res.Accepted, i)
		}
	}
	if len(res.Accepted) > 0 {
		res.DKIMDomain = s.dkimDomain
	}
	return res, nil
}

func (s *scriptedSession) Close() error { return nil }

// fakeEvents is the events writer's stand-in, which passes the writers'
// suite (writertest): it refuses a batch with an event that does not
// validate.
type fakeEvents struct {
	*writertest.Recorder[event.Event]
}

func newFakeEvents() *fakeEvents { return &fakeEvents{writertest.Events()} }

// byRecipient maps recipient index to the event types published for it.
func (f *fakeEvents) byRecipient() map[int][]event.Type {
	out := map[int][]event.Type{}
	for _, e := range f.All() {
		out[e.RecipientIndex] = append(out[e.RecipientIndex], e.Type)
	}
	return out
}

type fakeSuppressions struct {
	mu     sync.Mutex
	listed map[SuppressionKey]string
	added  []Suppression
}

func (f *fakeSuppressions) Suppressed(_ context.Context, keys []SuppressionKey) (map[SuppressionKey]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[SuppressionKey]string{}
	for _, k := range keys {
		if r, ok := f.listed[k]; ok {
			out[k] = r
		}
	}
	return out, nil
}

func (f *fakeSuppressions) Suppress(_ context.Context, entries []Suppression) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.added = append(f.added, entries...)
	return nil
}

type fakeReturnPaths struct{}

func (fakeReturnPaths) Address(id string, idx int) string {
	return "bounce+" + strings.Trim(id, "<>@.") + "-" + string(rune('a'+idx)) + "@bounces.test"
}

type fateHarness struct {
	*harness
	session *scriptedSession
	events  *fakeEvents
	sup     *fakeSuppressions
}

func newFateHarness(t *testing.T, refuse func(string) *sender.Error, listed map[SuppressionKey]string) *fateHarness {
	t.Helper()
	h := &fateHarness{harness: &harness{store: newFakeStore(), dlq: newFakeDLQ(), retries: newFakeRetries()},
		session: &scriptedSession{refuse: refuse}, events: newFakeEvents(), sup: &fakeSuppressions{listed: listed}}
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
	return h
}

func multiJob(id string, to ...string) job.Job {
	j := testJob(id, "hello")
	j.To = to
	j.Tenant = "acme"
	j.Metadata = map[string]string{"order": "7"}
	return j
}

// TestRecipientsTakeTheirOwnPaths: one relay refusal at RCPT, one
// suppressed address and one accepted recipient in one job: each ends in
// its own state with its own event, and the job is sent.
func TestRecipientsTakeTheirOwnPaths(t *testing.T) {
	h := newFateHarness(t, func(addr string) *sender.Error {
		if addr == "gone@example.com" {
			return &sender.Error{Relay: "p1", Stage: sender.StageRcpt, Code: 550, Enhanced: "5.1.1", Text: "no such user"}
		}
		return nil
	}, map[SuppressionKey]string{{Tenant: "acme", Stream: "transactional", Address: "listed@example.com"}: "complaint"})
	h.run(t, [][]byte{mustJSON(t, multiJob("m@x", "ok@example.com", "Gone <gone@example.com>", "LISTED@example.com"))})

	if got := h.store.status("m@x"); got != idempotency.StatusSent {
		t.Fatalf("status = %s, want sent", got)
	}
	if len(h.session.envelopes) != 1 || len(h.session.envelopes[0]) != 2 {
		t.Fatalf("envelopes = %+v, want one with the two recipients not suppressed", h.session.envelopes)
	}
	for _, r := range h.session.envelopes[0] {
		if !strings.HasPrefix(r.ReturnPath, "bounce+") {
			t.Errorf("recipient %s sent with return path %q, want its own", r.Address, r.ReturnPath)
		}
	}
	want := map[int][]event.Type{0: {event.Accepted}, 1: {event.Bounced}, 2: {event.Suppressed}}
	if got := h.events.byRecipient(); !mapsEqual(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	for _, e := range h.events.All() {
		if e.Tenant != "acme" || e.Metadata["order"] != "7" || e.Stream != event.StreamTransactional {
			t.Errorf("event %+v lacks the job's tenant, stream or metadata", e)
		}
		if e.Type == event.Bounced && (e.Bounce.Type != event.BounceHard || e.Bounce.Status != "5.1.1" || e.Bounce.Source != "smtp") {
			t.Errorf("bounce = %+v, want hard 5.1.1 from smtp", e.Bounce)
		}
	}
	if len(h.sup.added) != 1 || h.sup.added[0].Key.Address != "gone@example.com" {
		t.Errorf("suppressions added = %+v, want gone@example.com", h.sup.added)
	}
	outs := h.store.row("m@x").fates
	if len(outs) != 1 || outs[0].ConfirmBy.IsZero() || len(outs[0].Recipients) != 3 {
		t.Fatalf("fate = %+v, want one with a confirmation window and three recipients", outs)
	}
	states := map[int]idempotency.RecipientState{}
	for _, r := range outs[0].Recipients {
		states[r.Index] = r.State
	}
	if states[0] != idempotency.RecipientAccepted || states[1] != idempotency.RecipientBounced || states[2] != idempotency.RecipientSuppressed {
		t.Errorf("recorded recipient states = %v", states)
	}
}

// TestAcceptedEventsNameTheDKIMDomain: the domain that signed the copy a
// relay took is on the accepted events, and on no other.
func TestAcceptedEventsNameTheDKIMDomain(t *testing.T) {
	h := newFateHarness(t, func(addr string) *sender.Error {
		if addr == "gone@example.com" {
			return &sender.Error{Relay: "p1", Stage: sender.StageRcpt, Code: 550, Enhanced: "5.1.1", Text: "no such user"}
		}
		return nil
	}, nil)
	h.session.dkimDomain = "shop.example"
	h.run(t, [][]byte{mustJSON(t, multiJob("d@x", "ok@example.com", "gone@example.com"))})
	events := h.events.All()
	if len(events) != 2 {
		t.Fatalf("events = %+v, want an accepted and a bounced one", events)
	}
	for _, e := range events {
		want := ""
		if e.Type == event.Accepted {
			want = "shop.example"
		}
		if e.DKIMDomain != want {
			t.Errorf("%s event's DKIMDomain = %q, want %q", e.Type, e.DKIMDomain, want)
		}
	}
}

// TestEverySuppressedJobEndsSuppressed: nothing is sent and the job ends
// suppressed, one event per recipient.
func TestEverySuppressedJobEndsSuppressed(t *testing.T) {
	h := newFateHarness(t, func(string) *sender.Error { return nil }, map[SuppressionKey]string{
		{Tenant: "acme", Stream: "transactional", Address: "a@example.com"}: "hard_bounce",
		{Tenant: "acme", Stream: "transactional", Address: "b@example.com"}: "manual",
	})
	h.run(t, [][]byte{mustJSON(t, multiJob("s@x", "a@example.com", "b@example.com"))})
	if got := h.store.status("s@x"); got != idempotency.StatusSuppressed {
		t.Fatalf("status = %s, want suppressed", got)
	}
	if len(h.session.envelopes) != 0 {
		t.Errorf("sent %d envelopes, want none", len(h.session.envelopes))
	}
	if got := h.events.byRecipient(); !mapsEqual(got, map[int][]event.Type{0: {event.Suppressed}, 1: {event.Suppressed}}) {
		t.Errorf("events = %v", got)
	}
	if len(h.dlq.reasons()) != 0 {
		t.Errorf("a suppressed job was dead-lettered")
	}
}

// TestDeferredRecipientIsRetriedAlone: a 4xx at RCPT for one recipient
// sends the job to a delay tier for it; the other is accepted now.
func TestDeferredRecipientIsRetriedAlone(t *testing.T) {
	h := newFateHarness(t, func(addr string) *sender.Error {
		if addr == "full@example.com" {
			return &sender.Error{Relay: "p1", Stage: sender.StageRcpt, Code: 452, Enhanced: "4.2.2", Text: "mailbox full"}
		}
		return nil
	}, nil)
	h.run(t, [][]byte{mustJSON(t, multiJob("d@x", "ok@example.com", "full@example.com"))})
	if got := h.store.status("d@x"); got != idempotency.StatusRetrying {
		t.Fatalf("status = %s, want retrying", got)
	}
	if len(h.retries.all()) != 1 {
		t.Fatalf("retry copies = %d, want 1", len(h.retries.all()))
	}
	if got := h.events.byRecipient(); !mapsEqual(got, map[int][]event.Type{0: {event.Accepted}, 1: {event.Deferred}}) {
		t.Errorf("events = %v", got)
	}
	for _, e := range h.events.All() {
		if e.Type == event.Deferred && (e.NextAttemptAt == nil || e.Class != "transient") {
			t.Errorf("deferred event %+v lacks its class or next attempt", e)
		}
	}
}

// TestEventsAreDatedWhenTheAttemptSettled: a batch recorded seconds after
// its attempts were settled (its writes queued behind a slow one) still
// dates their events at the settling, so a deferral's next_attempt_at is one
// tier after its at rather than before it.
func TestEventsAreDatedWhenTheAttemptSettled(t *testing.T) {
	h := newFateHarness(t, func(string) *sender.Error { return nil }, nil)
	settled := time.Date(2026, 12, 3, 7, 14, 20, 0, time.UTC)
	recorded := settled.Add(3 * time.Second)
	tier := time.Second
	tests := []struct {
		name      string
		decidedAt time.Time
		wantAt    time.Time
	}{
		{"settled by a sender", settled, settled},
		{"not settled by a sender: the recording time", time.Time{}, recorded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := &item{job: multiJob("e@x", "ok@example.com", "full@example.com"), attempt: 1}
			f := fate{kind: fateRetried, decidedAt: tt.decidedAt, class: "transient",
				copy: &retry.Copy{Attempt: 2, NotBefore: settled.Add(tier), Tier: tier}}
			it.rcpts = []rcpt{
				{index: 0, address: "ok@example.com", state: idempotency.RecipientAccepted, fresh: true},
				{index: 1, address: "full@example.com", state: idempotency.RecipientPending, fresh: true},
			}
			events := h.pipeline.appendEvents(nil, it, f, recorded)
			if len(events) != 2 {
				t.Fatalf("events = %+v, want an acceptance and a deferral", events)
			}
			for _, e := range events {
				if !e.At.Equal(tt.wantAt) {
					t.Errorf("%s event at %s, want %s", e.Type, e.At, tt.wantAt)
				}
				if e.Type == event.Deferred && (e.NextAttemptAt == nil || !e.NextAttemptAt.Equal(settled.Add(tier))) {
					t.Errorf("deferral next_attempt_at = %v, want %s", e.NextAttemptAt, settled.Add(tier))
				}
			}
		})
	}
}

func mapsEqual(a, b map[int][]event.Type) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// fakeComposer renders template jobs by a script.
type fakeComposer struct {
	mu    sync.Mutex
	fail  error
	calls int
}

func (f *fakeComposer) Compose(_ context.Context, j *job.Job) (Composed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail != nil {
		return Composed{}, f.fail
	}
	return Composed{Subject: "Hello " + j.Template.Name, Text: "rendered", HTML: "<p>rendered</p>",
		Template: event.TemplateUse{Name: j.Template.Name, Version: 3, Why: "canary"}}, nil
}

func newComposeHarness(t *testing.T, c Composer) *fateHarness {
	t.Helper()
	h := &fateHarness{harness: &harness{store: newFakeStore(), dlq: newFakeDLQ(), retries: newFakeRetries()},
		session: &scriptedSession{refuse: func(string) *sender.Error { return nil }}, events: newFakeEvents()}
	p, err := New(Config{Senders: 1, BatchSize: 4, BatchLinger: time.Millisecond, RecheckInterval: 5 * time.Millisecond,
		MaxHandBackWait: 20 * time.Millisecond},
		slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), Deps{
			Store:       h.store,
			Relays:      []Relay{{Name: "p1", NewSession: func() Session { return h.session }}},
			DeadLetters: h.dlq, Retries: h.retries, Events: h.events, Composer: c,
		})
	if err != nil {
		t.Fatal(err)
	}
	h.pipeline = p
	return h
}

func templateJob(id string) job.Job {
	j := testJob(id, "")
	j.Subject, j.Text = "", ""
	j.Template = &job.TemplateRef{Name: "receipt"}
	return j
}

// TestTemplateJobIsRenderedBeforeSending: the composer's bodies are sent,
// and the events and the row name the version that rendered them.
func TestTemplateJobIsRenderedBeforeSending(t *testing.T) {
	c := &fakeComposer{}
	h := newComposeHarness(t, c)
	h.run(t, [][]byte{mustJSON(t, templateJob("t@x"))})
	if got := h.store.status("t@x"); got != idempotency.StatusSent {
		t.Fatalf("status = %s, want sent", got)
	}
	outs := h.store.row("t@x").fates
	if len(outs) != 1 || outs[0].Template != "receipt" || outs[0].TemplateVersion != 3 || outs[0].TemplateWhy != "canary" {
		t.Errorf("fate = %+v, want the template version that rendered it", outs)
	}
	for _, e := range h.events.All() {
		if e.Template == nil || e.Template.Version != 3 {
			t.Errorf("event %s lacks the template version: %+v", e.Type, e.Template)
		}
	}
}

// TestBrokenTemplateIsDeadLettered: a job no version renders ends dead
// with reason render_failed, never sent.
func TestBrokenTemplateIsDeadLettered(t *testing.T) {
	h := newComposeHarness(t, &fakeComposer{fail: errors.New("render receipt: every version failed")})
	h.run(t, [][]byte{mustJSON(t, templateJob("b@x"))})
	if got := h.store.status("b@x"); got != idempotency.StatusDead {
		t.Fatalf("status = %s, want dead", got)
	}
	if got := h.dlq.reasons(); len(got) != 1 || got[0] != deadletter.ReasonRenderFailed {
		t.Errorf("dead-letter reasons = %v, want render_failed", got)
	}
	if len(h.session.envelopes) != 0 {
		t.Error("a job that did not render was sent")
	}
}

// TestUnavailableTemplateStoreHandsBack: a store that does not answer
// makes the job wait in the worker, not die.
func TestUnavailableTemplateStoreHandsBack(t *testing.T) {
	c := &fakeComposer{fail: fmt.Errorf("templates: %w", ErrComposeUnavailable)}
	h := newComposeHarness(t, c)
	h.src = newFakeSource([][]byte{mustJSON(t, templateJob("u@x"))}, true)
	h.src.store = h.store
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.pipeline.Run(ctx, h.src) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		n := c.calls
		c.mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if c.calls < 2 {
		t.Fatalf("composer called %d times, want the job tried again after a hand-back", c.calls)
	}
	if got := h.dlq.reasons(); len(got) != 0 {
		t.Errorf("dead letters %v for a store outage", got)
	}
}
