package sender_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/job"
)

// TestSendToThenChainsTheNextEnvelope sends mail A with SendToThen offering
// mail B, then B, then a clean mail C, against a server that advertises
// PIPELINING and answers as each case scripts. B's envelope goes out in
// the same write as A's final dot when the session can chain it; whatever
// A's reply, B's fate is its own, and C does not inherit anything of either.
func TestSendToThenChainsTheNextEnvelope(t *testing.T) {
	tests := []struct {
		name string
		// script answers every mail; refuse matches what it refuses.
		script      func(c smtptest.Command) *smtptest.Reply
		cfg         sender.Config
		twoPaths    bool // B has a recipient with a return path of its own
		wantChained bool
		wantAErr    int      // A's reply code when it fails, 0 for none
		wantBErr    int      // B's reply code when it fails
		wantBRefuse bool     // B's recipient refused at RCPT
		wantTaken   []string // message IDs the server took, by their letter
		wantConns   int
	}{
		{
			name:        "both accepted",
			wantChained: true,
			wantTaken:   []string{"A", "B", "C"},
			wantConns:   1,
		},
		{
			name: "A refused at its final dot: B goes on the same connection",
			script: func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbData && strings.HasPrefix(c.Arg, "A.") {
					return &smtptest.Reply{Code: 554, Enhanced: "5.7.1", Text: "looks like spam"}
				}
				return nil
			},
			wantChained: true,
			wantAErr:    554,
			wantTaken:   []string{"B", "C"},
			wantConns:   1,
		},
		{
			name: "A's final dot gets 421 and a hang-up: B redials",
			script: func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbData && strings.HasPrefix(c.Arg, "A.") {
					return &smtptest.Reply{Code: 421, Enhanced: "4.3.2", Text: "shutting down", Disconnect: true}
				}
				return nil
			},
			wantChained: false,
			wantAErr:    421,
			wantTaken:   []string{"B", "C"},
			wantConns:   2,
		},
		{
			name: "B's recipient refused at RCPT",
			script: func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbRcpt && c.Arg == "b@example.com" {
					return &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "no such user"}
				}
				return nil
			},
			wantChained: true,
			wantBRefuse: true,
			wantTaken:   []string{"A", "C"},
			wantConns:   1,
		},
		{
			name: "B's MAIL FROM refused",
			script: func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbMail && c.Arg == "b-sender@example.com" {
					return &smtptest.Reply{Code: 553, Enhanced: "5.7.1", Text: "sender not allowed"}
				}
				return nil
			},
			wantChained: true,
			wantBErr:    553,
			wantTaken:   []string{"A", "C"},
			wantConns:   1,
		},
		{
			name:        "B has two return paths: not chained",
			twoPaths:    true,
			wantChained: false,
			wantTaken:   []string{"A", "B", "B", "C"}, // one transaction a return path
			wantConns:   1,
		},
		{
			name:        "A is the connection's last transaction: not chained",
			cfg:         sender.Config{MaxMessagesPerConn: 1},
			wantChained: false,
			wantTaken:   []string{"A", "B", "C"},
			wantConns:   3,
		},
		{
			name:        "pipelining turned off: not chained",
			cfg:         sender.Config{NoPipelining: true},
			wantChained: false,
			wantTaken:   []string{"A", "B", "C"},
			wantConns:   1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln := newPipeliningListener(t, true)
			srv := smtptest.NewServer(t, smtptest.WithListener(ln), smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
				if tt.script == nil {
					return nil
				}
				return tt.script(c)
			}))
			cfg := tt.cfg
			cfg.Name = "relay1"
			relay, reg := newRelay(t, srv, cfg)
			s := newSession(t, relay)
			ctx := context.Background()

			a, b, c := letterJob(t, "A"), letterJob(t, "B"), letterJob(t, "C")
			b.From = "b-sender@example.com"
			b.To = []string{"b@example.com"}
			bRcpts := sender.Recipients(b, "")
			if tt.twoPaths {
				b.To = append(b.To, "b2@example.com")
				bRcpts = sender.Recipients(b, "")
				bRcpts[1].ReturnPath = "bounce+b2@example.com"
			}
			asked := 0
			_, chained, err := s.SendToThen(ctx, a, sender.Recipients(a, ""), func() (*job.Job, []sender.Recipient, bool) {
				asked++
				return b, bRcpts, true
			})
			if chained != tt.wantChained {
				t.Errorf("chained = %v, want %v (then asked %d times)", chained, tt.wantChained, asked)
			}
			checkCode(t, "A", err, tt.wantAErr)

			res, err := s.SendTo(ctx, b, bRcpts)
			checkCode(t, "B", err, tt.wantBErr)
			if refused := len(res.Refused) == 1 && res.Refused[0].Err.Code == 550; refused != tt.wantBRefuse {
				t.Errorf("B's result %+v: refused at RCPT %v, want %v", res, refused, tt.wantBRefuse)
			}
			if err := s.Send(ctx, c); err != nil {
				t.Fatalf("C on the same session: %v", err)
			}

			var taken []string
			for _, m := range srv.Messages() {
				taken = append(taken, m.MessageID[:1])
			}
			if !slices.Equal(taken, tt.wantTaken) {
				t.Errorf("server took %v, want %v", taken, tt.wantTaken)
			}
			if got := srv.Connections(); got != tt.wantConns {
				t.Errorf("Connections = %d, want %d", got, tt.wantConns)
			}
			// B's envelope was written behind A's message when it was chained,
			// and also when A's reply then hung up on it. Loopback delivers
			// one small write in one segment: one read holds both.
			written := tt.wantChained || tt.wantAErr == 421
			together := ln.readWith("\r\n.\r\nMAIL FROM:<b-sender@example.com>")
			if together != written {
				t.Errorf("A's final dot and B's MAIL FROM in one read: %v, want %v", together, written)
			}
			want := 0.0
			if written {
				want = 1
			}
			const metric = `
# HELP postline_sender_chained_envelopes_total Envelopes written in the same write as the end of the message before them on a connection (pipelining across mails), by provider.
# TYPE postline_sender_chained_envelopes_total counter
postline_sender_chained_envelopes_total{provider="relay1"} `
			if err := testutil.GatherAndCompare(reg, strings.NewReader(metric+strconv.FormatFloat(want, 'f', -1, 64)+"\n"),
				"postline_sender_chained_envelopes_total"); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestChainedMailNotSentNext breaks SendToThen's contract: after B was
// chained, the caller sends C instead. The relay waits in DATA for B's
// content, so the session hangs up (the relay drops B unsent) and C goes
// on a new connection; closing a session with a chained mail does the same
// without a QUIT the relay would take for content.
func TestChainedMailNotSentNext(t *testing.T) {
	for _, closeFirst := range []bool{false, true} {
		name := "C sent instead"
		if closeFirst {
			name = "session closed"
		}
		t.Run(name, func(t *testing.T) {
			srv := smtptest.NewServer(t)
			relay, _ := newRelay(t, srv, sender.Config{Name: "relay1"})
			s := newSession(t, relay)
			ctx := context.Background()
			a, b, c := letterJob(t, "A"), letterJob(t, "B"), letterJob(t, "C")
			_, chained, err := s.SendToThen(ctx, a, sender.Recipients(a, ""), func() (*job.Job, []sender.Recipient, bool) {
				return b, sender.Recipients(b, ""), true
			})
			if err != nil || !chained {
				t.Fatalf("SendToThen: chained %v, %v", chained, err)
			}
			if closeFirst {
				if err := s.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
			}
			if err := s.Send(ctx, c); err != nil {
				t.Fatalf("C: %v", err)
			}
			var taken []string
			for _, m := range srv.Messages() {
				taken = append(taken, m.MessageID[:1])
			}
			if !slices.Equal(taken, []string{"A", "C"}) || srv.Connections() != 2 {
				t.Errorf("server took %v on %d connections, want [A C] on 2", taken, srv.Connections())
			}
		})
	}
}

// TestSendToThenWithNothingNext: a then with no mail leaves the session as
// SendTo would, and a relay that does not advertise PIPELINING is never
// asked.
func TestSendToThenWithNothingNext(t *testing.T) {
	for _, advertise := range []bool{true, false} {
		ln := newPipeliningListener(t, advertise)
		srv := smtptest.NewServer(t, smtptest.WithListener(ln))
		relay, _ := newRelay(t, srv, sender.Config{Name: "relay1"})
		s := newSession(t, relay)
		asked := 0
		for _, letter := range []string{"A", "B"} {
			j := letterJob(t, letter)
			_, chained, err := s.SendToThen(context.Background(), j, sender.Recipients(j, ""), func() (*job.Job, []sender.Recipient, bool) {
				asked++
				return nil, nil, false
			})
			if err != nil || chained {
				t.Fatalf("advertised %v: SendToThen(%s): chained %v, %v", advertise, letter, chained, err)
			}
		}
		if wantAsked := map[bool]int{true: 2, false: 0}[advertise]; asked != wantAsked {
			t.Errorf("advertised %v: then asked %d times, want %d", advertise, asked, wantAsked)
		}
		if srv.Count() != 2 || srv.Connections() != 1 {
			t.Errorf("advertised %v: %d messages on %d connections, want 2 on 1", advertise, srv.Count(), srv.Connections())
		}
	}
}

// letterJob is a one-recipient mail whose Message-ID starts with letter.
func letterJob(t *testing.T, letter string) *job.Job {
	j := simpleJob(t, 0, strings.ToLower(letter)+"@example.com")
	j.MessageID = letter + "." + j.MessageID
	return j
}

// checkCode fails the test unless err is a *sender.Error with reply code
// want, or nil when want is 0.
func checkCode(t *testing.T, what string, err error, want int) {
	t.Helper()
	var se *sender.Error
	switch {
	case want == 0 && err != nil:
		t.Errorf("%s: %v, want no error", what, err)
	case want != 0 && (!errors.As(err, &se) || se.Code != want):
		t.Errorf("%s: %v, want a reply %d", what, err, want)
	}
}

// readWith reports whether one read of the server held s.
func (l *pipeliningListener) readWith(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.reads, func(r []byte) bool { return strings.Contains(string(r), s) })
}

func TestChainable(t *testing.T) {
	j := &job.Job{From: "Sender <sender@example.com>"}
	tests := []struct {
		name  string
		from  string
		rcpts []sender.Recipient
		want  bool
	}{
		{"one recipient", "", []sender.Recipient{{Address: "a@example.com"}}, true},
		{"two recipients, the job's From", "", []sender.Recipient{{Address: "a@example.com"}, {Address: "b@example.com"}}, true},
		{"two recipients, one VERP path", "", []sender.Recipient{
			{Address: "a@example.com", ReturnPath: "b+1@example.com"}, {Address: "b@example.com", ReturnPath: "b+1@example.com"}}, true},
		{"a return path each", "", []sender.Recipient{
			{Address: "a@example.com", ReturnPath: "b+1@example.com"}, {Address: "b@example.com", ReturnPath: "b+2@example.com"}}, false},
		{"no recipients", "", nil, false},
		{"a line break in an address", "", []sender.Recipient{{Address: "a@example.com\r\nRSET"}}, false},
		{"a line break in a return path", "", []sender.Recipient{{Address: "a@example.com", ReturnPath: "b@example.com\n"}}, false},
		{"a line break in From", "sender@example.com\r\nRSET", []sender.Recipient{{Address: "a@example.com"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jj := *j
			if tt.from != "" {
				jj.From = tt.from
			}
			if got := sender.Chainable(&jj, tt.rcpts); got != tt.want {
				t.Errorf("Chainable = %v, want %v", got, tt.want)
			}
		})
	}
}
