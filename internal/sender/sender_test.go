package sender_test

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testkit"
)

func TestSessionReusesOneConnection(t *testing.T) {
	srv := smtptest.NewServer(t)
	relay, reg := newRelay(t, srv, sender.Config{})
	s := newSession(t, relay)
	ctx := context.Background()

	const n = 50
	for i := range n {
		if err := s.Send(ctx, testJob(t, i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if srv.Connections() != 1 || srv.Count() != n {
		t.Fatalf("Connections %d Count %d, want 1 and %d", srv.Connections(), srv.Count(), n)
	}

	var dec mime.WordDecoder
	for i, m := range srv.Messages() {
		j := testJob(t, i)
		if m.MessageID != j.MessageID {
			t.Errorf("message %d: Message-ID %q, want %q", i, m.MessageID, j.MessageID)
		}
		if m.From != "sender@example.com" {
			t.Errorf("message %d: envelope from %q", i, m.From)
		}
		if want := []string{"to@example.com", "cc@example.com", "bcc@example.com"}; !slices.Equal(m.To, want) {
			t.Errorf("message %d: envelope to %q, want %q", i, m.To, want)
		}
		h, parts := parseMessage(t, m.Data)
		if subj, err := dec.DecodeHeader(h.Get("Subject")); err != nil || subj != j.Subject {
			t.Errorf("message %d: subject %q (%v), want %q", i, subj, err, j.Subject)
		}
		if h.Get("Bcc") != "" || strings.Contains(string(m.Data), "bcc@example.com") {
			t.Errorf("message %d: Bcc recipient visible in the message", i)
		}
		for key, want := range map[string]string{
			"To":               `"Ada" <to@example.com>`,
			"Cc":               "<cc@example.com>",
			"Reply-To":         "<reply@example.com>",
			"X-Campaign":       "spring",
			"List-Unsubscribe": "<mailto:unsubscribe@example.com>",
		} {
			if got := h.Get(key); got != want {
				t.Errorf("message %d: %s = %q, want %q", i, key, got, want)
			}
		}
		if _, err := h.Date(); err != nil {
			t.Errorf("message %d: Date: %v", i, err)
		}
		got := map[string]string{}
		for _, p := range parts {
			got[p.mediaType+" "+p.filename] = string(p.body)
		}
		want := map[string]string{
			"multipart/mixed ":                  "",
			"multipart/alternative ":            "",
			"text/plain ":                       j.Text,
			"text/html ":                        j.HTML,
			"text/csv report.csv":               "a,b\n1,2\n",
			"application/octet-stream blob.bin": "\x00\x01\x02\xff",
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("message %d: parts %q, want %q", i, got, want)
		}
	}

	if got := value(t, reg, "postline_sender_dials_total", "result", "ok"); got != 1 {
		t.Errorf("dials_total{ok} = %v, want 1", got)
	}
	if got := value(t, reg, "postline_sender_connections_open", "", ""); got != 1 {
		t.Errorf("connections_open = %v, want 1", got)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := value(t, reg, "postline_sender_connections_open", "", ""); got != 0 {
		t.Errorf("connections_open after Close = %v, want 0", got)
	}
	testkit.Eventually(t, 5*time.Second, "QUIT to close the server side", func() bool { return srv.Active() == 0 })
}

func TestSessionTransactionFailures(t *testing.T) {
	// Each case sends three messages on one session: the second one fails
	// as scripted, the first and third succeed.
	tests := []struct {
		name          string
		reply         *smtptest.Reply
		verb          string // where the reply is scripted, for the second message only
		wantCode      int
		wantEnhanced  string
		wantText      string
		wantStage     string
		wantPermanent bool
		wantConns     int // after the third message
	}{
		{
			name:  "rcpt 550 permanent",
			reply: &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "no such user"}, verb: smtptest.VerbRcpt,
			wantCode: 550, wantEnhanced: "5.1.1", wantText: "no such user", wantStage: sender.StageRcpt,
			wantPermanent: true, wantConns: 1,
		},
		{
			name:  "rcpt 550 without enhanced status",
			reply: &smtptest.Reply{Code: 550, Text: "unknown user"}, verb: smtptest.VerbRcpt,
			wantCode: 550, wantText: "unknown user", wantStage: sender.StageRcpt,
			wantPermanent: true, wantConns: 1,
		},
		{
			name:  "rcpt 452 mailbox full",
			reply: &smtptest.Reply{Code: 452, Enhanced: "4.2.2", Text: "mailbox full"}, verb: smtptest.VerbRcpt,
			wantCode: 452, wantEnhanced: "4.2.2", wantText: "mailbox full", wantStage: sender.StageRcpt,
			wantConns: 1,
		},
		{
			name:  "mail 451 throttled",
			reply: &smtptest.Reply{Code: 451, Enhanced: "4.7.1", Text: "rate limited"}, verb: smtptest.VerbMail,
			wantCode: 451, wantEnhanced: "4.7.1", wantText: "rate limited", wantStage: sender.StageMail,
			wantConns: 1,
		},
		{
			name:  "mail 553 sender rejected",
			reply: &smtptest.Reply{Code: 553, Enhanced: "5.7.1", Text: "sender not allowed"}, verb: smtptest.VerbMail,
			wantCode: 553, wantEnhanced: "5.7.1", wantText: "sender not allowed", wantStage: sender.StageMail,
			wantPermanent: true, wantConns: 1,
		},
		{
			name:  "content 554 rejected after the final dot",
			reply: &smtptest.Reply{Code: 554, Enhanced: "5.7.1", Text: "looks like spam"}, verb: smtptest.VerbData,
			wantCode: 554, wantEnhanced: "5.7.1", wantText: "looks like spam", wantStage: sender.StageBody,
			wantPermanent: true, wantConns: 1,
		},
		{
			name:  "rcpt 421 and disconnect",
			reply: &smtptest.Reply{Code: 421, Enhanced: "4.3.2", Text: "shutting down", Disconnect: true}, verb: smtptest.VerbRcpt,
			wantCode: 421, wantEnhanced: "4.3.2", wantText: "shutting down", wantStage: sender.StageRcpt,
			wantConns: 2,
		},
		{
			name:  "disconnect without reply after the final dot",
			reply: &smtptest.Reply{Disconnect: true}, verb: smtptest.VerbData,
			wantStage: sender.StageBody, wantConns: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const bad = "bad@example.com"
			var failID string
			srv := smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
				switch {
				case c.Verb != tt.verb:
				case c.Verb == smtptest.VerbRcpt && c.Arg == bad,
					c.Verb == smtptest.VerbMail && c.Attempt == 2,
					c.Verb == smtptest.VerbData && c.Arg == failID:
					return tt.reply
				}
				return nil
			}))
			relay, _ := newRelay(t, srv, sender.Config{Name: "relay1"})
			s := newSession(t, relay)
			ctx := context.Background()

			if err := s.Send(ctx, simpleJob(t, 1)); err != nil {
				t.Fatalf("first send: %v", err)
			}
			second := simpleJob(t, 2, "good@example.com", bad)
			failID = second.MessageID
			err := s.Send(ctx, second)
			var se *sender.Error
			if !errors.As(err, &se) {
				t.Fatalf("second send: %v, want *sender.Error", err)
			}
			if se.Relay != "relay1" || se.Code != tt.wantCode || se.Enhanced != tt.wantEnhanced ||
				se.Text != tt.wantText || se.Stage != tt.wantStage || (failure.Classify(se).Class == failure.Permanent) != tt.wantPermanent {
				t.Errorf("error %+v (permanent %v), want code %d enhanced %q text %q stage %s permanent %v",
					se, (failure.Classify(se).Class == failure.Permanent), tt.wantCode, tt.wantEnhanced, tt.wantText, tt.wantStage, tt.wantPermanent)
			}
			if strings.Contains(se.Error(), "@example.com") {
				t.Errorf("Error() %q shows an address", se.Error())
			}
			if se.Code != 0 && !strings.Contains(se.Error(), fmt.Sprint(se.Code)) {
				t.Errorf("Error() %q does not show the reply code", se.Error())
			}

			third := simpleJob(t, 3, "third@example.com")
			if err := s.Send(ctx, third); err != nil {
				t.Fatalf("third send on the same session: %v", err)
			}
			if got := srv.Connections(); got != tt.wantConns {
				t.Errorf("Connections = %d, want %d", got, tt.wantConns)
			}
			msgs := srv.Messages()
			last := msgs[len(msgs)-1]
			if last.MessageID != third.MessageID || !slices.Equal(last.To, []string{"third@example.com"}) {
				t.Errorf("third message %q to %q: the failed transaction leaked into it", last.MessageID, last.To)
			}
		})
	}
}

func TestSessionRedialsDeadIdleConnection(t *testing.T) {
	tests := []struct {
		name      string
		opts      []smtptest.Option
		kill      func(*smtptest.Server)
		wantErr   bool // the fresh connection fails too
		wantConns int
	}{
		{
			name:      "server idle timeout (421 then close)",
			opts:      []smtptest.Option{smtptest.WithIdleTimeout(100 * time.Millisecond)},
			kill:      func(*smtptest.Server) {}, // waiting for the server's timeout is enough
			wantConns: 2,
		},
		{
			name:      "connection dropped without a reply",
			kill:      func(srv *smtptest.Server) { srv.DropConnections() },
			wantConns: 2,
		},
		{
			name: "421 and disconnect on MAIL of a kept connection",
			opts: []smtptest.Option{smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbMail && c.Attempt == 2 {
					return &smtptest.Reply{Code: 421, Enhanced: "4.4.2", Text: "idle too long", Disconnect: true}
				}
				return nil
			})},
			wantConns: 2,
		},
		{
			name: "redials only once",
			opts: []smtptest.Option{smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbMail && c.Attempt > 1 {
					return &smtptest.Reply{Code: 421, Enhanced: "4.3.2", Text: "going down", Disconnect: true}
				}
				return nil
			})},
			wantErr:   true,
			wantConns: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := smtptest.NewServer(t, tt.opts...)
			relay, _ := newRelay(t, srv, sender.Config{})
			s := newSession(t, relay)
			ctx := context.Background()
			if err := s.Send(ctx, simpleJob(t, 1)); err != nil {
				t.Fatalf("first send: %v", err)
			}
			if tt.kill != nil {
				tt.kill(srv)
				testkit.Eventually(t, 5*time.Second, "the server to close the connection", func() bool { return srv.Active() == 0 })
			}
			err := s.Send(ctx, simpleJob(t, 2))
			if tt.wantErr {
				var se *sender.Error
				if !errors.As(err, &se) || se.Code != 421 || (failure.Classify(se).Class == failure.Permanent) {
					t.Fatalf("second send: %v, want a non-permanent 421", err)
				}
			} else if err != nil {
				t.Fatalf("second send: %v, want a transparent redial", err)
			}
			if got := srv.Connections(); got != tt.wantConns {
				t.Errorf("Connections = %d, want %d", got, tt.wantConns)
			}
		})
	}
}

func TestSessionMaxMessagesPerConn(t *testing.T) {
	srv := smtptest.NewServer(t)
	relay, _ := newRelay(t, srv, sender.Config{MaxMessagesPerConn: 3})
	s := newSession(t, relay)
	for i := range 7 {
		if err := s.Send(context.Background(), simpleJob(t, i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if srv.Connections() != 3 {
		t.Errorf("Connections = %d, want 3 for 7 messages at 3 per connection", srv.Connections())
	}
	testkit.Eventually(t, 5*time.Second, "retired connections to be closed", func() bool { return srv.Active() == 1 })
	var perConn [4]int
	for _, m := range srv.Messages() {
		perConn[m.Conn]++
	}
	if perConn != [4]int{0, 3, 3, 1} {
		t.Errorf("messages per connection %v, want [0 3 3 1]", perConn)
	}
}

func TestSessionAuth(t *testing.T) {
	tests := []struct {
		name               string
		username, password string
		wantCode           int
		wantStage          string
	}{
		{name: "correct credentials", username: "user", password: "secret"},
		{name: "wrong password", username: "user", password: "wrong", wantCode: 535, wantStage: sender.StageAuth},
		{name: "no credentials", wantCode: 530, wantStage: sender.StageMail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := smtptest.NewServer(t, smtptest.WithAuth("user", "secret"))
			relay, reg := newRelay(t, srv, sender.Config{Username: tt.username, Password: tt.password})
			s := newSession(t, relay)
			err := s.Send(context.Background(), simpleJob(t, 1))
			if tt.wantCode == 0 {
				if err != nil {
					t.Fatalf("send: %v", err)
				}
				if m := srv.Messages(); len(m) != 1 || m[0].Username != "user" {
					t.Errorf("messages %+v, want one sent as user", m)
				}
				return
			}
			var se *sender.Error
			if !errors.As(err, &se) {
				t.Fatalf("send: %v, want *sender.Error", err)
			}
			if se.Code != tt.wantCode || se.Stage != tt.wantStage || (failure.Classify(se).Class == failure.Permanent) {
				t.Errorf("error %+v permanent %v, want code %d stage %s, not permanent", se, (failure.Classify(se).Class == failure.Permanent), tt.wantCode, tt.wantStage)
			}
			if strings.Contains(se.Error(), tt.password) && tt.password != "" {
				t.Errorf("Error() %q shows the password", se.Error())
			}
			if tt.wantStage == sender.StageAuth {
				if got := value(t, reg, "postline_sender_dials_total", "result", "error"); got != 1 {
					t.Errorf("dials_total{error} = %v, want 1", got)
				}
				testkit.Eventually(t, 5*time.Second, "the failed connection to close", func() bool { return srv.Active() == 0 })
			}
			if srv.Count() != 0 {
				t.Errorf("Count = %d, want 0", srv.Count())
			}
		})
	}
}

func TestSessionDialClosedPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	relay, err := sender.New(sender.Config{Host: "127.0.0.1", Port: port, DialTimeout: 2 * time.Second}, testLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(t, relay)
	err = s.Send(context.Background(), simpleJob(t, 1))
	var se *sender.Error
	if !errors.As(err, &se) {
		t.Fatalf("send: %v, want *sender.Error", err)
	}
	var opErr *net.OpError
	if se.Code != 0 || se.Stage != sender.StageDial || (failure.Classify(se).Class == failure.Permanent) || !errors.As(err, &opErr) {
		t.Errorf("error %+v permanent %v, want code 0 stage dial wrapping *net.OpError, not permanent", se, (failure.Classify(se).Class == failure.Permanent))
	}
	if got := value(t, reg, "postline_sender_dials_total", "result", "error"); got != 1 {
		t.Errorf("dials_total{error} = %v, want 1", got)
	}
	if got := value(t, reg, "postline_sender_connections_open", "", ""); got != 0 {
		t.Errorf("connections_open = %v, want 0", got)
	}
}

func TestSessionTLS(t *testing.T) {
	tests := []struct {
		name      string
		server    []smtptest.Option
		cfg       sender.Config
		wantTLS   bool
		wantStage string // "" for success
	}{
		{
			name:    "mandatory starttls",
			server:  []smtptest.Option{smtptest.WithStartTLS()},
			cfg:     sender.Config{TLS: sender.TLSMandatory, InsecureSkipVerify: true},
			wantTLS: true,
		},
		{
			name:    "mandatory starttls with auth plain",
			server:  []smtptest.Option{smtptest.WithStartTLS(), smtptest.WithAuth("user", "secret")},
			cfg:     sender.Config{TLS: sender.TLSMandatory, InsecureSkipVerify: true, Username: "user", Password: "secret"},
			wantTLS: true,
		},
		{
			name:      "mandatory with an untrusted certificate",
			server:    []smtptest.Option{smtptest.WithStartTLS()},
			cfg:       sender.Config{TLS: sender.TLSMandatory},
			wantStage: sender.StageTLS,
		},
		{
			name:      "mandatory without starttls offered",
			cfg:       sender.Config{TLS: sender.TLSMandatory},
			wantStage: sender.StageTLS,
		},
		{
			name:    "opportunistic with starttls offered",
			server:  []smtptest.Option{smtptest.WithStartTLS()},
			cfg:     sender.Config{TLS: sender.TLSOpportunistic, InsecureSkipVerify: true},
			wantTLS: true,
		},
		{
			name: "opportunistic without starttls offered",
			cfg:  sender.Config{TLS: sender.TLSOpportunistic},
		},
		{
			name:   "auto on loopback does not use starttls",
			server: []smtptest.Option{smtptest.WithStartTLS()},
			cfg:    sender.Config{TLS: sender.TLSAuto},
		},
		{
			name:    "implicit",
			server:  []smtptest.Option{smtptest.WithImplicitTLS()},
			cfg:     sender.Config{TLS: sender.TLSImplicit, InsecureSkipVerify: true},
			wantTLS: true,
		},
		{
			name:      "implicit with an untrusted certificate",
			server:    []smtptest.Option{smtptest.WithImplicitTLS()},
			cfg:       sender.Config{TLS: sender.TLSImplicit},
			wantStage: sender.StageTLS,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := smtptest.NewServer(t, tt.server...)
			relay, _ := newRelay(t, srv, tt.cfg)
			s := newSession(t, relay)
			err := s.Send(context.Background(), simpleJob(t, 1))
			if tt.wantStage != "" {
				var se *sender.Error
				if !errors.As(err, &se) || se.Stage != tt.wantStage || se.Code != 0 || (failure.Classify(se).Class == failure.Permanent) {
					t.Fatalf("send: %v, want a non-permanent code 0 error at stage %s", err, tt.wantStage)
				}
				testkit.Eventually(t, 5*time.Second, "the failed connection to close", func() bool { return srv.Active() == 0 })
				return
			}
			if err != nil {
				t.Fatalf("send: %v", err)
			}
			if m := srv.Messages(); len(m) != 1 || m[0].TLS != tt.wantTLS {
				t.Errorf("messages %+v, want one with TLS %v", m, tt.wantTLS)
			}
		})
	}
}

func TestSessionContext(t *testing.T) {
	srv := smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		if c.Verb == smtptest.VerbData && strings.HasPrefix(c.Arg, "s1.") {
			return &smtptest.Reply{Delay: time.Minute} // cut short when the server closes
		}
		return nil
	}))
	relay, _ := newRelay(t, srv, sender.Config{})
	s := newSession(t, relay)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Send(cancelled, simpleJob(t, 0))
	var se *sender.Error
	if !errors.As(err, &se) || !errors.Is(err, context.Canceled) || (failure.Classify(se).Class == failure.Permanent) || srv.Connections() != 0 {
		t.Fatalf("send with a cancelled context: %v, want a non-permanent error wrapping context.Canceled and no dial", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = s.Send(ctx, simpleJob(t, 1))
	if !errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) || se.Code != 0 || (failure.Classify(se).Class == failure.Permanent) {
		t.Fatalf("send past the deadline: %v, want a non-permanent code 0 error wrapping DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("send took %v after its deadline", took)
	}
	if err := s.Send(context.Background(), simpleJob(t, 2)); err != nil {
		t.Fatalf("send after the timeout: %v", err)
	}
	if srv.Connections() != 2 {
		t.Errorf("Connections = %d, want 2: the timed-out connection must not be reused", srv.Connections())
	}
}

func TestSessionsInParallel(t *testing.T) {
	srv := smtptest.NewServer(t)
	relay, reg := newRelay(t, srv, sender.Config{})
	const sessions, perSession = 8, 100
	var wg sync.WaitGroup
	errs := make(chan error, 2*sessions)
	for g := range sessions {
		wg.Go(func() {
			s := relay.NewSession()
			defer func() {
				if err := s.Close(); err != nil {
					errs <- err
				}
			}()
			for i := range perSession {
				if err := s.Send(context.Background(), simpleJob(t, g*perSession+i)); err != nil {
					errs <- fmt.Errorf("session %d message %d: %w", g, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if srv.Count() != sessions*perSession || srv.Connections() != sessions {
		t.Errorf("Count %d Connections %d, want %d and %d", srv.Count(), srv.Connections(), sessions*perSession, sessions)
	}
	ids := map[string]bool{}
	for _, m := range srv.Messages() {
		ids[m.MessageID] = true
	}
	if len(ids) != sessions*perSession {
		t.Errorf("%d distinct Message-IDs, want %d", len(ids), sessions*perSession)
	}
	if n := testutil.CollectAndCount(reg, "postline_sender_send_duration_seconds"); n != 2 {
		t.Errorf("send_duration_seconds has %d series, want 2 (ok, error)", n)
	}
}

func TestSessionBuildError(t *testing.T) {
	srv := smtptest.NewServer(t)
	relay, _ := newRelay(t, srv, sender.Config{})
	s := newSession(t, relay)
	j := simpleJob(t, 1)
	j.Subject = "hi\r\nBcc: victim@example.com"
	err := s.Send(context.Background(), j)
	var se *sender.Error
	if !errors.As(err, &se) || se.Stage != sender.StageBuild || !(failure.Classify(se).Class == failure.Permanent) {
		t.Fatalf("send: %v, want a permanent build error", err)
	}
	if srv.Connections() != 0 {
		t.Errorf("Connections = %d: a job that cannot be built must not dial", srv.Connections())
	}
}

func TestMetricsLint(t *testing.T) {
	srv := smtptest.NewServer(t)
	reg := prometheus.NewRegistry()
	for _, name := range []string{"primary", "backup"} {
		relay, err := sender.New(sender.Config{Name: name, Host: srv.Host(), Port: srv.Port()}, nil, reg)
		if err != nil {
			t.Fatalf("New(%s) on a shared registry: %v", name, err)
		}
		s := relay.NewSession()
		if err := s.Send(context.Background(), simpleJob(t, len(name))); err != nil {
			t.Fatalf("send: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if relay.Name() != name {
			t.Errorf("Name() = %q, want %q", relay.Name(), name)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	if n := testutil.CollectAndCount(reg, "postline_sender_dials_total"); n != 4 {
		t.Errorf("dials_total has %d series, want 4 (2 relays x ok, error)", n)
	}
}

// value returns the value of one counter or gauge series in reg, selected
// by one label besides provider ("" for the only series).
func value(t *testing.T, reg *prometheus.Registry, name, label, want string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				match = match || lp.GetName() == label && lp.GetValue() == want
			}
			if match {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, want)
	return 0
}
