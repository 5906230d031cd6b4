package sender_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/emersion/go-smtp"

	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/smtptest"
)

// TestSessionTransactionsWithPipelining runs the envelope's cases against a
// server that advertises PIPELINING, one that does not, and one that does
// to a relay configured with pipelining off: the results are the same, and
// only with PIPELINING advertised and not turned off does the envelope go
// out in one write.
// Each case sends one mail to good@, bad@ and other@ that the script
// answers, then a clean mail on the same session that must not inherit
// anything of the first.
func TestSessionTransactionsWithPipelining(t *testing.T) {
	const (
		good  = "good@example.com"
		bad   = "bad@example.com"
		other = "other@example.com"
	)
	tests := []struct {
		name         string
		script       func(c smtptest.Command) *smtptest.Reply // for the first mail only
		wantAccepted []int
		wantRefused  map[int]int // index -> reply code
		wantCode     int         // of the error, 0 for none
		wantStage    string
		wantClass    failure.Class
		wantConns    int // after the second mail
	}{
		{
			name:         "all accepted",
			wantAccepted: []int{0, 1, 2},
			wantConns:    1,
		},
		{
			name: "one recipient refused 550",
			script: func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbRcpt && c.Arg == bad {
					return &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "no such user"}
				}
				return nil
			},
			wantAccepted: []int{0, 2},
			wantRefused:  map[int]int{1: 550},
			wantConns:    1,
		},
		{
			name: "one recipient refused 452, one 550",
			script: func(c smtptest.Command) *smtptest.Reply {
				switch {
				case c.Verb == smtptest.VerbRcpt && c.Arg == bad:
					return &smtptest.Reply{Code: 452, Enhanced: "4.2.2", Text: "mailbox full"}
				case c.Verb == smtptest.VerbRcpt && c.Arg == other:
					return &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "no such user"}
				}
				return nil
			},
			wantAccepted: []int{0},
			wantRefused:  map[int]int{1: 452, 2: 550},
			wantConns:    1,
		},
		{
			name: "every recipient refused",
			script: func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbRcpt {
					return &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "no such user"}
				}
				return nil
			},
			wantRefused: map[int]int{0: 550, 1: 550, 2: 550},
			wantConns:   1,
		},
		{
			name: "MAIL refused 451",
			script: func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbMail {
					return &smtptest.Reply{Code: 451, Enhanced: "4.7.1", Text: "rate limited"}
				}
				return nil
			},
			wantCode: 451, wantStage: sender.StageMail, wantClass: failure.Throttled,
			wantConns: 1,
		},
		{
			name: "MAIL refused 553",
			script: func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbMail {
					return &smtptest.Reply{Code: 553, Enhanced: "5.7.1", Text: "sender not allowed"}
				}
				return nil
			},
			wantCode: 553, wantStage: sender.StageMail, wantClass: failure.Permanent,
			wantConns: 1,
		},
		{
			name: "421 and disconnect at the second RCPT",
			script: func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbRcpt && c.Arg == bad {
					return &smtptest.Reply{Code: 421, Enhanced: "4.3.2", Text: "shutting down", Disconnect: true}
				}
				return nil
			},
			// good@ was taken at RCPT before the 421, but the message never
			// went: reporting it accepted would lose its mail.
			wantAccepted: nil,
			wantCode:     421, wantStage: sender.StageRcpt, wantClass: failure.Transient,
			wantConns: 2,
		},
		{
			name: "content refused 554 after the final dot",
			script: func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbData {
					return &smtptest.Reply{Code: 554, Enhanced: "5.7.1", Text: "looks like spam"}
				}
				return nil
			},
			wantCode: 554, wantStage: sender.StageBody, wantClass: failure.Permanent,
			wantConns: 1,
		},
	}
	modes := []struct {
		name                 string
		advertise, turnedOff bool
		pipelining           bool // the envelope goes out grouped
	}{
		{"pipelining", true, false, true},
		{"not advertised", false, false, false},
		{"turned off", true, true, false},
	}
	for _, mode := range modes {
		pipelining := mode.pipelining
		for _, tt := range tests {
			t.Run(mode.name+"/"+tt.name, func(t *testing.T) {
				var mu sync.Mutex
				second := false // the script answers the first mail only
				ln := newPipeliningListener(t, mode.advertise)
				srv := smtptest.NewServer(t, smtptest.WithListener(ln), smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
					mu.Lock()
					defer mu.Unlock()
					if second || tt.script == nil {
						return nil
					}
					return tt.script(c)
				}))
				relay, _ := newRelay(t, srv, sender.Config{Name: "relay1", NoPipelining: mode.turnedOff})
				s := newSession(t, relay)
				ctx := context.Background()

				j := simpleJob(t, 1, good, bad, other)
				res, err := s.SendTo(ctx, j, sender.Recipients(j, ""))
				if !slices.Equal(res.Accepted, tt.wantAccepted) {
					t.Errorf("Accepted %v, want %v", res.Accepted, tt.wantAccepted)
				}
				gotRefused := map[int]int{}
				for _, r := range res.Refused {
					gotRefused[r.Index] = r.Err.Code
					if r.Err.Stage != sender.StageRcpt {
						t.Errorf("refusal of %d at stage %s, want %s", r.Index, r.Err.Stage, sender.StageRcpt)
					}
				}
				if fmt.Sprint(gotRefused) != fmt.Sprint(orEmpty(tt.wantRefused)) {
					t.Errorf("Refused %v, want %v", gotRefused, tt.wantRefused)
				}
				var se *sender.Error
				switch {
				case tt.wantCode == 0 && err != nil:
					t.Fatalf("SendTo: %v, want no error", err)
				case tt.wantCode != 0 && !errors.As(err, &se):
					t.Fatalf("SendTo: %v, want a *sender.Error with code %d", err, tt.wantCode)
				case tt.wantCode != 0:
					if se.Code != tt.wantCode || se.Stage != tt.wantStage || failure.Classify(se).Class != tt.wantClass {
						t.Errorf("error %v (stage %s, class %v), want code %d stage %s class %v",
							se, se.Stage, failure.Classify(se).Class, tt.wantCode, tt.wantStage, tt.wantClass)
					}
				}

				mu.Lock()
				second = true
				mu.Unlock()
				next := simpleJob(t, 2, "next@example.com")
				if err := s.Send(ctx, next); err != nil {
					t.Fatalf("next mail on the same session: %v", err)
				}
				if got := srv.Connections(); got != tt.wantConns {
					t.Errorf("Connections = %d, want %d", got, tt.wantConns)
				}
				msgs := srv.Messages()
				last := msgs[len(msgs)-1]
				if last.MessageID != next.MessageID || !slices.Equal(last.To, []string{"next@example.com"}) {
					t.Errorf("next message %q to %q: the first transaction leaked into it", last.MessageID, last.To)
				}
				if delivered := len(msgs) == 2; delivered != (len(tt.wantAccepted) > 0 && tt.wantCode == 0) {
					t.Errorf("server took %d messages: the first delivered %v, want %v", len(msgs), delivered, !delivered)
				} else if delivered && (msgs[0].MessageID != j.MessageID || len(msgs[0].To) != len(tt.wantAccepted)) {
					t.Errorf("first message %q to %d recipients, want %q to %d", msgs[0].MessageID, len(msgs[0].To), j.MessageID, len(tt.wantAccepted))
				}

				// The envelope of the first mail: in one read with PIPELINING
				// (loopback delivers one small write in one segment), one
				// command per read without.
				env := ln.envelopeRead()
				grouped := strings.Contains(env, "RCPT TO:") && strings.Contains(env, "DATA\r\n")
				if grouped != pipelining {
					t.Errorf("first read with MAIL FROM was %q: grouped %v, want %v", env, grouped, pipelining)
				}
			})
		}
	}
}

func orEmpty(m map[int]int) map[int]int {
	if m == nil {
		return map[int]int{}
	}
	return m
}

// pipeliningListener hands smtptest connections that hide PIPELINING from
// the EHLO reply (go-smtp always offers it) when told to, and notes what
// the server read from the client.
type pipeliningListener struct {
	net.Listener
	advertise bool

	mu    sync.Mutex
	reads [][]byte
}

func newPipeliningListener(t *testing.T, advertise bool) *pipeliningListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &pipeliningListener{Listener: ln, advertise: advertise}
}

func (l *pipeliningListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &pipeliningConn{Conn: c, l: l}, nil
}

// envelopeRead returns the first read that holds a MAIL FROM.
func (l *pipeliningListener) envelopeRead() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.reads {
		if bytes.Contains(r, []byte("MAIL FROM:")) {
			return string(r)
		}
	}
	return ""
}

type pipeliningConn struct {
	net.Conn
	l *pipeliningListener
}

func (c *pipeliningConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.l.mu.Lock()
		c.l.reads = append(c.l.reads, append([]byte(nil), p[:n]...))
		c.l.mu.Unlock()
	}
	return n, err
}

// Write drops the EHLO reply's PIPELINING line, which go-smtp writes on
// its own.
func (c *pipeliningConn) Write(p []byte) (int, error) {
	if !c.l.advertise && string(p) == "250-PIPELINING\r\n" {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// TestPipeliningEnvelopeMatchesGoMail checks that the envelope written with PIPELINING
// says what go-mail's Mail and Rcpt say, parameters included, against a
// server offering 8BITMIME, SMTPUTF8 and DSN (as Postfix does) with NOTIFY
// configured.
func TestPipeliningEnvelopeMatchesGoMail(t *testing.T) {
	commands := map[bool][]string{}
	for _, pipelining := range []bool{false, true} {
		ln := newPipeliningListener(t, pipelining)
		srv := smtp.NewServer(discardBackend{})
		srv.Domain = "dsn.localhost"
		srv.EnableSMTPUTF8, srv.EnableDSN = true, true
		srv.ErrorLog = log.New(io.Discard, "", 0)
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })

		host, port := ln.Addr().(*net.TCPAddr).IP.String(), ln.Addr().(*net.TCPAddr).Port
		relay, err := sender.New(sender.Config{Host: host, Port: port, Notify: "SUCCESS,FAILURE"}, testLogger(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		s := newSession(t, relay)
		j := simpleJob(t, 1, "a@example.com", "b@example.com")
		if err := s.Send(context.Background(), j); err != nil {
			t.Fatalf("pipelining=%v: %v", pipelining, err)
		}
		ln.mu.Lock()
		for _, r := range ln.reads {
			for _, line := range strings.Split(string(r), "\r\n") {
				if strings.HasPrefix(line, "MAIL ") || strings.HasPrefix(line, "RCPT ") {
					commands[pipelining] = append(commands[pipelining], line)
				}
			}
		}
		ln.mu.Unlock()
	}
	if len(commands[false]) != 3 || !slices.Equal(commands[true], commands[false]) {
		t.Errorf("envelope with PIPELINING %q, go-mail's %q: want the same three commands", commands[true], commands[false])
	}
	if !strings.Contains(commands[true][0], "RET=HDRS") || !strings.Contains(commands[true][1], "NOTIFY=SUCCESS,FAILURE") {
		t.Errorf("envelope %q lacks the DSN parameters", commands[true])
	}
}

// discardBackend accepts every mail and drops it.
type discardBackend struct{}

func (discardBackend) NewSession(*smtp.Conn) (smtp.Session, error) { return discardSession{}, nil }

type discardSession struct{}

func (discardSession) Mail(string, *smtp.MailOptions) error { return nil }
func (discardSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (discardSession) Data(r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	return err
}
func (discardSession) Reset()        {}
func (discardSession) Logout() error { return nil }
