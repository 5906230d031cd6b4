package unsubscribe

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/testkit/writertest"
)

var t0 = time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)

// fakeEvents is the events writer's stand-in, which passes the writers'
// suite (writertest): it refuses a batch with an event that does not
// validate, and fails every call while told to.
type fakeEvents struct {
	*writertest.Recorder[event.Event]
}

func (f *fakeEvents) published() []event.Event { return f.All() }

// fakeLists is a suppression list in memory, keyed as the table is, with
// Add's precedence rule.
type fakeLists struct {
	mu                sync.Mutex
	entries           map[suppression.Key]suppression.Entry
	failList, failAdd error
}

func newFakeLists() *fakeLists {
	return &fakeLists{entries: map[suppression.Key]suppression.Entry{}}
}

func (f *fakeLists) List(_ context.Context, flt suppression.Filter) ([]suppression.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failList != nil {
		return nil, f.failList
	}
	var out []suppression.Entry
	for k, e := range f.entries {
		if (flt.Tenant == nil || *flt.Tenant == k.Tenant) && (flt.Stream == "" || flt.Stream == k.Stream) &&
			strings.HasPrefix(k.Address, flt.AddressPrefix) && (out == nil || k.Address < out[0].Address) {
			out = []suppression.Entry{e}
		}
	}
	return out, nil
}

func (f *fakeLists) Add(_ context.Context, entries []suppression.Entry) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failAdd != nil {
		return 0, f.failAdd
	}
	n := 0
	for _, e := range entries {
		if err := e.Validate(); err != nil {
			return 0, err
		}
		if old, ok := f.entries[e.Key()]; !ok || suppression.Supersedes(e, old, t0) {
			f.entries[e.Key()] = e
			n++
		}
	}
	return n, nil
}

func newTestApplier(t *testing.T, lists Lists) (*Applier, *Signer, *fakeEvents, *prometheus.Registry, *bytes.Buffer) {
	t.Helper()
	s := newSigner(t, key1)
	ev := &fakeEvents{writertest.Events()}
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	a, err := NewApplier(Config{NowFunc: func() time.Time { return t0 }}, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		reg, s, ev, lists)
	if err != nil {
		t.Fatal(err)
	}
	return a, s, ev, reg, &logs
}

func requests(a *Applier, c Channel, r Result) float64 {
	return testutil.ToFloat64(a.requests.WithLabelValues(string(c), string(r)))
}

func TestApply(t *testing.T) {
	tok := sampleToken()
	bulkKey := suppression.Key{Tenant: "acme", Stream: suppression.StreamBulk, Address: "ada.lovelace@example.net"}
	tests := []struct {
		name string
		// before are the entries already on the lists.
		before      []suppression.Entry
		token       func(s *Signer) string
		channel     Channel
		want        Result
		wantEvent   bool
		wantReason  suppression.Reason // of bulkKey's entry after, "" for none
		wantSource  string
		otherStream bool // the transactional stream gets no entry
	}{
		{name: "a one-click POST", token: signed(tok), channel: ChannelPost, want: ResultOK, wantEvent: true,
			wantReason: suppression.ReasonUnsubscribe, wantSource: SourceOneClick},
		{name: "by mail", token: signed(tok), channel: ChannelMailto, want: ResultOK, wantEvent: true,
			wantReason: suppression.ReasonUnsubscribe, wantSource: SourceMailto},
		{name: "already unsubscribed", token: signed(tok), channel: ChannelPost, want: ResultReplayed,
			before:     []suppression.Entry{{Tenant: "acme", Stream: suppression.StreamBulk, Address: "ada.lovelace@example.net", Reason: suppression.ReasonUnsubscribe, Source: SourceMailto}},
			wantReason: suppression.ReasonUnsubscribe, wantSource: SourceMailto},
		{name: "already suppressed more strongly", token: signed(tok), channel: ChannelPost, want: ResultReplayed,
			before:     []suppression.Entry{{Tenant: "acme", Stream: suppression.StreamBulk, Address: "ada.lovelace@example.net", Reason: suppression.ReasonComplaint, Source: "arf"}},
			wantReason: suppression.ReasonComplaint, wantSource: "arf"},
		{name: "a soft bounce gives way", token: signed(tok), channel: ChannelPost, want: ResultOK, wantEvent: true,
			before: []suppression.Entry{{Tenant: "acme", Stream: suppression.StreamBulk, Address: "ada.lovelace@example.net", Reason: suppression.ReasonSoftBounce,
				Source: "dsn", ExpiresAt: t0.Add(time.Hour)}},
			wantReason: suppression.ReasonUnsubscribe, wantSource: SourceOneClick},
		{name: "unsubscribed on another tenant only", token: signed(tok), channel: ChannelPost, want: ResultOK, wantEvent: true,
			before:     []suppression.Entry{{Tenant: "other", Stream: suppression.StreamBulk, Address: "ada.lovelace@example.net", Reason: suppression.ReasonUnsubscribe, Source: SourceOneClick}},
			wantReason: suppression.ReasonUnsubscribe, wantSource: SourceOneClick},
		{name: "a longer address of the same start is another address", token: signed(tok), channel: ChannelPost, want: ResultOK, wantEvent: true,
			before:     []suppression.Entry{{Tenant: "acme", Stream: suppression.StreamBulk, Address: "ada.lovelace@example.network", Reason: suppression.ReasonUnsubscribe, Source: SourceOneClick}},
			wantReason: suppression.ReasonUnsubscribe, wantSource: SourceOneClick},
		{name: "forged", token: func(*Signer) string { s, _ := newSigner(t, key2).Sign(tok); return s }, channel: ChannelPost, want: ResultForged},
		{name: "malformed", token: func(*Signer) string { return "not-a-token" }, channel: ChannelMailto, want: ResultMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lists := newFakeLists()
			if _, err := lists.Add(t.Context(), tt.before); err != nil {
				t.Fatal(err)
			}
			a, s, ev, _, logs := newTestApplier(t, lists)
			token := tt.token(s)
			got, err := a.Apply(t.Context(), tt.channel, token)
			if got != tt.want || err != nil {
				t.Fatalf("Apply = %s, %v; want %s", got, err, tt.want)
			}
			if n := requests(a, tt.channel, tt.want); n != 1 {
				t.Errorf("requests{%s,%s} = %v, want 1", tt.channel, tt.want, n)
			}
			evs := ev.published()
			if !tt.wantEvent {
				if len(evs) != 0 {
					t.Errorf("published %+v, want nothing", evs)
				}
			} else if len(evs) != 1 || !reflect.DeepEqual(evs[0], wantEvent(tok)) {
				t.Errorf("published %+v, want %+v", evs, wantEvent(tok))
			}
			e, ok := lists.entries[bulkKey]
			if tt.wantReason == "" && ok {
				t.Errorf("entry %+v, want none", e)
			}
			if tt.wantReason != "" && (e.Reason != tt.wantReason || e.Source != tt.wantSource) {
				t.Errorf("entry %+v, want reason %s from %s", e, tt.wantReason, tt.wantSource)
			}
			if tt.wantEvent && e.MessageID != tok.MessageID {
				t.Errorf("entry %+v, want the mail's Message-ID", e)
			}
			for k := range lists.entries {
				if k.Stream != suppression.StreamBulk {
					t.Errorf("an entry on stream %q; an unsubscribe touches its own stream only", k.Stream)
				}
			}
			for _, secret := range []string{token, "lovelace"} {
				if strings.Contains(strings.ToLower(logs.String()), secret) {
					t.Errorf("the logs hold %q: %s", secret, logs)
				}
			}
		})
	}
}

func signed(tok Token) func(*Signer) string {
	return func(s *Signer) string {
		out, err := s.Sign(tok)
		if err != nil {
			panic(err)
		}
		return out
	}
}

func wantEvent(tok Token) event.Event {
	return event.Event{Schema: event.Schema, ID: event.NewLifeID(tok.MessageID, tok.Life, tok.Recipient, event.Unsubscribed, 0),
		Type: event.Unsubscribed, At: t0, MessageID: tok.MessageID, Tenant: tok.Tenant, Stream: tok.Stream,
		Recipient: tok.Address, RecipientIndex: tok.Recipient}
}

func TestApplyTwiceMakesOneEvent(t *testing.T) {
	lists := newFakeLists()
	a, s, ev, _, _ := newTestApplier(t, lists)
	token := signed(sampleToken())(s)
	for i, want := range []Result{ResultOK, ResultReplayed, ResultReplayed} {
		if got, err := a.Apply(t.Context(), ChannelPost, token); got != want || err != nil {
			t.Fatalf("Apply #%d = %s, %v; want %s", i+1, got, err, want)
		}
	}
	if got, err := a.Apply(t.Context(), ChannelMailto, strings.ToUpper(token)); got != ResultReplayed || err != nil {
		t.Fatalf("the same token by mail = %s, %v; want replayed", got, err)
	}
	if n := len(ev.published()); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
}

// TestApplyFailures: a failure of the lists or the topic is an error the
// caller answers with "try again", and the retry finishes the job without
// a second event ID.
func TestApplyFailures(t *testing.T) {
	boom := errors.New("boom")
	for _, tt := range []struct {
		name       string
		fail       func(*fakeLists, *fakeEvents)
		eventFirst bool // the event went out before the failure
	}{
		{"the list cannot be read", func(l *fakeLists, _ *fakeEvents) { l.failList = boom }, false},
		{"the topic fails", func(_ *fakeLists, e *fakeEvents) { e.Fail(-1, boom) }, false},
		{"the entry cannot be added", func(l *fakeLists, _ *fakeEvents) { l.failAdd = boom }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lists := newFakeLists()
			a, s, ev, _, _ := newTestApplier(t, lists)
			tt.fail(lists, ev)
			token := signed(sampleToken())(s)
			got, err := a.Apply(t.Context(), ChannelPost, token)
			if got != ResultError || !errors.Is(err, boom) {
				t.Fatalf("Apply = %s, %v; want error wrapping boom", got, err)
			}
			if strings.Contains(err.Error(), token) || strings.Contains(strings.ToLower(err.Error()), "lovelace") {
				t.Fatalf("the error %q holds the token or the address", err)
			}
			if n := len(ev.published()); (n == 1) != tt.eventFirst {
				t.Fatalf("%d events before the retry", n)
			}
			lists.failList, lists.failAdd = nil, nil
			ev.Fail(0, nil)
			if got, err := a.Apply(t.Context(), ChannelPost, token); got != ResultOK || err != nil {
				t.Fatalf("the retry = %s, %v; want ok", got, err)
			}
			ids := map[string]bool{}
			for _, e := range ev.published() {
				ids[e.ID] = true
			}
			if len(ids) != 1 || len(lists.entries) != 1 {
				t.Fatalf("event IDs %v and entries %v after the retry; want one of each", ids, lists.entries)
			}
			if n := requests(a, ChannelPost, ResultError); n != 1 {
				t.Errorf("requests{post,error} = %v, want 1", n)
			}
		})
	}
}

func TestCheckChangesNothing(t *testing.T) {
	lists := newFakeLists()
	a, s, ev, _, _ := newTestApplier(t, lists)
	got, r := a.Check(ChannelGet, signed(sampleToken())(s))
	if r != ResultOK || got != sampleToken() {
		t.Fatalf("Check = %+v, %s", got, r)
	}
	if _, r := a.Check(ChannelGet, "zzzz"); r != ResultMalformed {
		t.Fatalf("Check of junk = %s, want malformed", r)
	}
	if len(ev.published()) != 0 || len(lists.entries) != 0 {
		t.Fatal("Check changed something")
	}
	if requests(a, ChannelGet, ResultOK) != 1 || requests(a, ChannelGet, ResultMalformed) != 1 {
		t.Fatal("Check did not count")
	}
}

func TestMetricsLint(t *testing.T) {
	_, _, _, reg, _ := newTestApplier(t, newFakeLists())
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	if n, _ := testutil.GatherAndCount(reg, "postline_unsubscribe_requests_total"); n != len(Channels)*len(Results) {
		t.Errorf("%d series from the start, want %d", n, len(Channels)*len(Results))
	}
}
