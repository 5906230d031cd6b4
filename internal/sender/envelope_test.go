package sender_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/smtptest"
)

// TestSendToRefusedRecipientLeavesTheOthers checks that a relay refusing
// one recipient at RCPT refuses that recipient only: the message goes to
// the others, and the refusal carries the relay's reply.
func TestSendToRefusedRecipientLeavesTheOthers(t *testing.T) {
	srv := smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		switch {
		case c.Verb == smtptest.VerbRcpt && strings.HasPrefix(c.Arg, "gone@"):
			return &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "no such user"}
		case c.Verb == smtptest.VerbRcpt && strings.HasPrefix(c.Arg, "full@"):
			return &smtptest.Reply{Code: 452, Enhanced: "4.2.2", Text: "mailbox full"}
		}
		return nil
	}))
	relay, _ := newRelay(t, srv, sender.Config{})
	s := newSession(t, relay)
	j := simpleJob(t, 1, "a@example.com", "Gone <gone@example.com>", "full@example.com", "b@example.com")

	res, err := s.SendTo(context.Background(), j, sender.Recipients(j, ""))
	if err != nil {
		t.Fatalf("SendTo: %v", err)
	}
	if !slices.Equal(res.Accepted, []int{0, 3}) {
		t.Errorf("Accepted = %v, want [0 3]", res.Accepted)
	}
	if len(res.Refused) != 2 || res.Refused[0].Index != 1 || res.Refused[1].Index != 2 {
		t.Fatalf("Refused = %+v, want indexes 1 and 2", res.Refused)
	}
	if e := res.Refused[0].Err; e.Code != 550 || e.Enhanced != "5.1.1" || e.Stage != sender.StageRcpt {
		t.Errorf("refusal 1 = %+v, want 550 5.1.1 at rcpt", e)
	}
	if e := res.Refused[1].Err; e.Code != 452 || e.Enhanced != "4.2.2" {
		t.Errorf("refusal 2 = %+v, want 452 4.2.2", e)
	}
	msgs := srv.Messages()
	if len(msgs) != 1 || !slices.Equal(msgs[0].To, []string{"a@example.com", "b@example.com"}) {
		t.Fatalf("relay received %+v, want one message to a and b", msgs)
	}
	// Send, the all-or-error form, reports the first refusal.
	if err := s.Send(context.Background(), simpleJob(t, 2, "gone@example.com")); err == nil || !strings.Contains(err.Error(), "550 5.1.1") {
		t.Errorf("Send to a refused recipient = %v, want the 550", err)
	}
}

// TestSendToReturnPathPerRecipient checks that recipients with return
// paths of their own get one transaction each, on the same connection,
// with the same message bytes.
func TestSendToReturnPathPerRecipient(t *testing.T) {
	srv := smtptest.NewServer(t)
	relay, _ := newRelay(t, srv, sender.Config{})
	s := newSession(t, relay)
	j := simpleJob(t, 1, "a@example.com", "b@example.com")
	j.Cc = []string{"c@example.com"}
	rcpts := []sender.Recipient{
		{Address: "a@example.com", ReturnPath: "bounce+aaa@bounces.example"},
		{Address: "b@example.com", ReturnPath: "bounce+bbb@bounces.example"},
		{Address: "c@example.com"},
	}
	res, err := s.SendTo(context.Background(), j, rcpts)
	if err != nil || !slices.Equal(res.Accepted, []int{0, 1, 2}) {
		t.Fatalf("SendTo = %+v, %v; want all accepted", res, err)
	}
	msgs := srv.Messages()
	if len(msgs) != 3 || srv.Connections() != 1 {
		t.Fatalf("%d messages on %d connections, want 3 on 1", len(msgs), srv.Connections())
	}
	want := []struct{ from, to string }{
		{"bounce+aaa@bounces.example", "a@example.com"},
		{"bounce+bbb@bounces.example", "b@example.com"},
		{"sender@example.com", "c@example.com"},
	}
	for i, w := range want {
		if msgs[i].From != w.from || !slices.Equal(msgs[i].To, []string{w.to}) {
			t.Errorf("transaction %d: MAIL FROM %s RCPT %v, want %s %s", i, msgs[i].From, msgs[i].To, w.from, w.to)
		}
		if string(msgs[i].Data) != string(msgs[0].Data) {
			t.Errorf("transaction %d carried other bytes than the first", i)
		}
	}
}

// TestSendToFailureMidwayKeepsTheAccepted checks that when a later
// transaction fails, the recipients of the earlier ones are still reported
// accepted, and the rest are not.
func TestSendToFailureMidwayKeepsTheAccepted(t *testing.T) {
	srv := smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		if c.Verb == smtptest.VerbMail && strings.HasPrefix(c.Arg, "bounce+bbb") {
			return &smtptest.Reply{Code: 451, Enhanced: "4.3.0", Text: "try later"}
		}
		return nil
	}))
	relay, _ := newRelay(t, srv, sender.Config{})
	s := newSession(t, relay)
	j := simpleJob(t, 1, "a@example.com", "b@example.com", "c@example.com")
	rcpts := []sender.Recipient{
		{Address: "a@example.com", ReturnPath: "bounce+aaa@bounces.example"},
		{Address: "b@example.com", ReturnPath: "bounce+bbb@bounces.example"},
		{Address: "c@example.com", ReturnPath: "bounce+ccc@bounces.example"},
	}
	res, err := s.SendTo(context.Background(), j, rcpts)
	var e *sender.Error
	if err == nil || !errors.As(err, &e) || e.Stage != sender.StageMail || e.Code != 451 {
		t.Fatalf("SendTo error = %v, want 451 at mail", err)
	}
	if !slices.Equal(res.Accepted, []int{0}) || len(res.Refused) != 0 {
		t.Errorf("Result = %+v, want only recipient 0 accepted", res)
	}
}

// TestSendTimeoutBoundsEachTransaction: a kept connection lives longer
// than SendTimeout; each transaction must get the whole timeout again.
func TestSendTimeoutBoundsEachTransaction(t *testing.T) {
	srv := smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		if c.Verb == smtptest.VerbMail {
			return &smtptest.Reply{Delay: 80 * time.Millisecond}
		}
		return nil
	}))
	relay, _ := newRelay(t, srv, sender.Config{SendTimeout: 300 * time.Millisecond})
	s := newSession(t, relay)
	for i := range 6 { // about 500 ms on one connection, 80 ms each
		if err := s.Send(context.Background(), simpleJob(t, i)); err != nil {
			t.Fatalf("send %d on a connection older than SendTimeout: %v", i, err)
		}
	}
	if srv.Connections() != 1 {
		t.Errorf("%d connections, want the one kept", srv.Connections())
	}
}
