package delivery

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/job"
)

// TestEventsCarryTheAttemptsReply: a failed send's reply reaches the
// deferred, failed and dead events of the recipients it leaves, code 0
// and what failed for a failure without a reply, with the addresses a
// relay echoes masked out.
func TestEventsCarryTheAttemptsReply(t *testing.T) {
	tests := []struct {
		name    string
		err     *sender.Error
		attempt string
		want    event.Type
		reply   event.Reply
	}{
		{"a 451 4.7.1 defers the mail",
			&sender.Error{Relay: "p1", Stage: sender.StageMail, Code: 451, Enhanced: "4.7.1", Text: "try later"},
			"1", event.Deferred, event.Reply{Code: 451, Status: "4.7.1", Text: "try later"}},
		{"a network error defers it with code 0, the relay's address left out",
			&sender.Error{Relay: "p1", Stage: sender.StageDial, Err: errors.New("dial tcp 192.0.2.7:25: connect: connection refused")},
			"1", event.Deferred, event.Reply{Text: "no reply at dial"}},
		{"a 550 at DATA fails it, echoed addresses masked",
			&sender.Error{Relay: "p1", Stage: sender.StageData, Code: 550, Enhanced: "5.7.1",
				Text: "message refused for <b@example.com> and bcc@example.net"},
			"1", event.Failed, event.Reply{Code: 550, Status: "5.7.1", Text: "message refused for <[address]> and [address]"}},
		{"a 452 on the last attempt makes it dead",
			&sender.Error{Relay: "p1", Stage: sender.StageData, Code: 452, Enhanced: "4.3.1", Text: "insufficient storage"},
			"3", event.Dead, event.Reply{Code: 452, Status: "4.3.1", Text: "insufficient storage"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, events := newReplyHarness(t, tt.err)
			headers := []kafka.Header{{Key: jobheader.KeyAttempt, Value: []byte(tt.attempt)}}
			h.store.seed("r@x", mustJSON(t, testJob("r@x", "hi")), jobheader.Attempt(headers))
			h.runMessages(t, []consumer.Message{message(t, "r@x", headers)})

			all := events.All()
			if len(all) != 1 {
				t.Fatalf("events = %+v, want one %s event", all, tt.want)
			}
			e := all[0]
			if e.Type != tt.want || e.Provider != "p1" {
				t.Errorf("event %s from %q, want %s from p1", e.Type, e.Provider, tt.want)
			}
			if e.Reply == nil || *e.Reply != tt.reply {
				t.Errorf("reply = %+v, want %+v", e.Reply, tt.reply)
			}
		})
	}
}

// TestDeferredRecipientsCarryTheirOwnReply: recipients refused for now at
// RCPT each carry their own refusal, which names their own address only.
func TestDeferredRecipientsCarryTheirOwnReply(t *testing.T) {
	h := newFateHarness(t, func(addr string) *sender.Error {
		switch addr {
		case "full@example.com":
			return &sender.Error{Relay: "p1", Stage: sender.StageRcpt, Code: 452, Enhanced: "4.2.2", Text: "<full@example.com>: mailbox full"}
		case "grey@example.com":
			return &sender.Error{Relay: "p1", Stage: sender.StageRcpt, Code: 450, Enhanced: "4.7.1", Text: "<grey@example.com>: greylisted"}
		}
		return nil
	}, nil)
	h.run(t, [][]byte{mustJSON(t, multiJob("g@x", "ok@example.com", "full@example.com", "grey@example.com"))})
	got := map[string]string{}
	for _, e := range h.events.All() {
		switch {
		case e.Type == event.Accepted && e.Reply != nil:
			t.Errorf("accepted event carries a reply: %+v", e.Reply)
		case e.Type == event.Deferred && e.Reply == nil:
			t.Errorf("deferred event of %s lacks its reply", e.Recipient)
		case e.Type == event.Deferred:
			got[e.Recipient] = e.Reply.Status + " " + e.Reply.Text
			if !strings.Contains(e.Reply.Text, e.Recipient) {
				t.Errorf("%s carries another recipient's reply %q", e.Recipient, e.Reply.Text)
			}
		}
	}
	if got["full@example.com"] != "4.2.2 <full@example.com>: mailbox full" || got["grey@example.com"] != "4.7.1 <grey@example.com>: greylisted" {
		t.Errorf("deferred replies = %v", got)
	}
}

func TestMaskAddresses(t *testing.T) {
	tests := []struct{ in, want string }{
		{"try later", "try later"},
		{"<a.b+tag@example.com>: Recipient address rejected", "<[address]>: Recipient address rejected"},
		{"from bounce+m-a@bounces.test, to \"x@y\"; ok", "from [address], to \"[address]\"; ok"},
		{"see https://example.com/help", "see https://example.com/help"},
	}
	for _, tt := range tests {
		if got := maskAddresses(tt.in); got != tt.want {
			t.Errorf("maskAddresses(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// newReplyHarness is a pipeline whose one relay fails every send with
// err, writing its events to the returned writer.
func newReplyHarness(t *testing.T, err *sender.Error) (*harness, *fakeEvents) {
	t.Helper()
	h := &harness{store: newFakeStore(), smtp: newFakeSMTP(always(err)), dlq: newFakeDLQ(), retries: newFakeRetries()}
	events := newFakeEvents()
	limit := RetryLimit{MaxAttempts: 3, MaxAge: time.Hour}
	p, perr := New(Config{Senders: 1, BatchSize: 4, BatchLinger: time.Millisecond, RecheckInterval: 5 * time.Millisecond,
		ResendBase: time.Millisecond, ConfirmWindow: time.Hour,
		RetryLimits: map[job.Priority]RetryLimit{job.PriorityUrgent: limit, job.PriorityNormal: limit, job.PriorityBulk: limit}},
		slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), Deps{
			Store:       h.store,
			Relays:      []Relay{{Name: "p1", NewSession: func() Session { return h.smtp }}},
			DeadLetters: h.dlq,
			Retries:     h.retries,
			Events:      events,
		})
	if perr != nil {
		t.Fatal(perr)
	}
	h.pipeline = p
	return h, events
}
