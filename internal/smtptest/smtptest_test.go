package smtptest_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"go.uber.org/goleak"

	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// send runs one transaction on c and returns the first error.
func send(c *smtp.Client, from string, to []string, id string) error {
	if err := c.Mail(from, nil); err != nil {
		return err
	}
	for _, r := range to {
		if err := c.Rcpt(r, nil); err != nil {
			return err
		}
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "Message-ID: <%s>\r\nSubject: hi\r\n\r\nbody\r\n", id); err != nil {
		return err
	}
	return w.Close()
}

func dial(t *testing.T, s *smtptest.Server) *smtp.Client {
	t.Helper()
	c, err := smtp.Dial(s.Addr())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestServerRecordsMessages(t *testing.T) {
	s := smtptest.NewServer(t)
	if s.Host() != "127.0.0.1" || s.Port() == 0 || s.Addr() != fmt.Sprintf("127.0.0.1:%d", s.Port()) {
		t.Fatalf("address: host %q port %d addr %q", s.Host(), s.Port(), s.Addr())
	}
	c1 := dial(t, s)
	if err := send(c1, "a@example.com", []string{"b@example.com", "c@example.com"}, "one@example.com"); err != nil {
		t.Fatalf("send 1: %v", err)
	}
	c2 := dial(t, s)
	if err := send(c2, "a@example.com", []string{"d@example.com"}, "two@example.com"); err != nil {
		t.Fatalf("send 2: %v", err)
	}
	if err := c1.Quit(); err != nil {
		t.Fatalf("quit: %v", err)
	}

	if s.Count() != 2 || s.Connections() != 2 {
		t.Fatalf("Count %d Connections %d, want 2 and 2", s.Count(), s.Connections())
	}
	msgs := s.Messages()
	first, second := msgs[0], msgs[1]
	if first.Conn != 1 || first.From != "a@example.com" || strings.Join(first.To, ",") != "b@example.com,c@example.com" ||
		first.MessageID != "one@example.com" || first.TLS || first.Username != "" {
		t.Errorf("first message: %+v", first)
	}
	if second.Conn != 2 || second.MessageID != "two@example.com" {
		t.Errorf("second message: %+v", second)
	}
	h, err := first.Header()
	if err != nil || h.Get("Subject") != "hi" {
		t.Errorf("Header: %v, subject %q", err, h.Get("Subject"))
	}
	testkit.Eventually(t, 5*time.Second, "the quit connection to close", func() bool { return s.Active() == 1 })
}

func TestServerScript(t *testing.T) {
	tests := []struct {
		name      string
		script    smtptest.ScriptFunc
		wantCode  int
		wantEnh   smtp.EnhancedCode
		wantCount int
	}{
		{
			name: "rcpt rejected permanently",
			script: func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbRcpt && c.Arg == "bad@example.com" {
					return &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "no such user"}
				}
				return nil
			},
			wantCode: 550, wantEnh: smtp.EnhancedCode{5, 1, 1},
		},
		{
			name: "data rejected without enhanced code",
			script: func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbData && c.Arg == "m@example.com" {
					return &smtptest.Reply{Code: 554, Text: "spam"}
				}
				return nil
			},
			// go-smtp's client reports a reply without a status as EnhancedCodeNotSet.
			wantCode: 554, wantEnh: smtp.EnhancedCodeNotSet,
		},
		{
			name: "mail throttled",
			script: func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbMail {
					return &smtptest.Reply{Code: 451, Enhanced: "4.7.1", Text: "slow down"}
				}
				return nil
			},
			wantCode: 451, wantEnh: smtp.EnhancedCode{4, 7, 1},
		},
		{
			name: "2xx and nil replies accept",
			script: func(c smtptest.Command) *smtptest.Reply {
				if c.Verb == smtptest.VerbRcpt {
					return &smtptest.Reply{Code: 250}
				}
				return nil
			},
			wantCount: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := smtptest.NewServer(t, smtptest.WithScript(tt.script))
			err := send(dial(t, s), "a@example.com", []string{"ok@example.com", "bad@example.com"}, "m@example.com")
			if s.Count() != tt.wantCount {
				t.Errorf("Count = %d, want %d", s.Count(), tt.wantCount)
			}
			if tt.wantCode == 0 {
				if err != nil {
					t.Fatalf("send: %v", err)
				}
				return
			}
			var se *smtp.SMTPError
			if !errors.As(err, &se) {
				t.Fatalf("send error %v, want *smtp.SMTPError", err)
			}
			if se.Code != tt.wantCode || se.EnhancedCode != tt.wantEnh {
				t.Errorf("reply %d %v, want %d %v", se.Code, se.EnhancedCode, tt.wantCode, tt.wantEnh)
			}
		})
	}
}

func TestServerScriptAttemptsAndConnections(t *testing.T) {
	var seen []smtptest.Command
	s := smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		if c.Verb != smtptest.VerbRcpt {
			return nil
		}
		seen = append(seen, c) // one client at a time in this test
		if c.Attempt == 1 {
			return &smtptest.Reply{Code: 421, Enhanced: "4.3.2", Text: "going away", Disconnect: true}
		}
		return nil
	}))

	err := send(dial(t, s), "a@example.com", []string{"x@example.com"}, "m@example.com")
	var se *smtp.SMTPError
	if !errors.As(err, &se) || se.Code != 421 {
		t.Fatalf("first attempt: %v, want 421", err)
	}
	testkit.Eventually(t, 5*time.Second, "the server to hang up", func() bool { return s.Active() == 0 })

	if err := send(dial(t, s), "a@example.com", []string{"x@example.com"}, "m@example.com"); err != nil {
		t.Fatalf("second attempt: %v", err)
	}
	want := []smtptest.Command{
		{Verb: smtptest.VerbRcpt, Arg: "x@example.com", Conn: 1, Attempt: 1},
		{Verb: smtptest.VerbRcpt, Arg: "x@example.com", Conn: 2, Attempt: 2},
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("commands %+v, want %+v", seen, want)
	}
	if got := s.Messages(); len(got) != 1 || got[0].Conn != 2 {
		t.Errorf("messages %+v, want one on connection 2", got)
	}
}

func TestServerDelay(t *testing.T) {
	const delay = 150 * time.Millisecond
	s := smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		if c.Verb == smtptest.VerbData {
			return &smtptest.Reply{Delay: delay}
		}
		return nil
	}))
	start := time.Now()
	if err := send(dial(t, s), "a@example.com", []string{"x@example.com"}, "m@example.com"); err != nil {
		t.Fatalf("send: %v", err)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("send took %v, want at least %v", took, delay)
	}
}

func TestServerAuth(t *testing.T) {
	tests := []struct {
		name     string
		auth     sasl.Client
		wantCode int // of the first failing command, 0 for success
	}{
		{"no auth", nil, 530},
		{"wrong password", sasl.NewPlainClient("", "user", "wrong"), 535},
		{"right password", sasl.NewPlainClient("", "user", "secret"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := smtptest.NewServer(t, smtptest.WithAuth("user", "secret"))
			c := dial(t, s)
			if !c.SupportsAuth(sasl.Plain) {
				t.Fatal("server does not offer AUTH PLAIN")
			}
			err := func() error {
				if tt.auth != nil {
					if err := c.Auth(tt.auth); err != nil {
						return err
					}
				}
				return send(c, "a@example.com", []string{"x@example.com"}, "m@example.com")
			}()
			if tt.wantCode == 0 {
				if err != nil {
					t.Fatalf("send: %v", err)
				}
				if m := s.Messages(); len(m) != 1 || m[0].Username != "user" {
					t.Errorf("messages %+v, want one from user", m)
				}
				return
			}
			var se *smtp.SMTPError
			if !errors.As(err, &se) || se.Code != tt.wantCode {
				t.Fatalf("error %v, want code %d", err, tt.wantCode)
			}
		})
	}
}

func TestServerTLS(t *testing.T) {
	t.Run("starttls", func(t *testing.T) {
		s := smtptest.NewServer(t, smtptest.WithStartTLS())
		c, err := smtp.DialStartTLS(s.Addr(), &tls.Config{RootCAs: s.RootCAs(), ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer c.Close()
		if err := send(c, "a@example.com", []string{"x@example.com"}, "m@example.com"); err != nil {
			t.Fatalf("send: %v", err)
		}
		if m := s.Messages(); len(m) != 1 || !m[0].TLS || m[0].Conn != 1 {
			t.Errorf("messages %+v, want one over TLS on connection 1", m)
		}
	})
	t.Run("implicit", func(t *testing.T) {
		s := smtptest.NewServer(t, smtptest.WithImplicitTLS())
		c, err := smtp.DialTLS(s.Addr(), &tls.Config{RootCAs: s.RootCAs(), ServerName: "localhost"})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer c.Close()
		if ok, _ := c.Extension("STARTTLS"); ok {
			t.Error("implicit TLS server offers STARTTLS")
		}
		if err := send(c, "a@example.com", []string{"x@example.com"}, "m@example.com"); err != nil {
			t.Fatalf("send: %v", err)
		}
		if m := s.Messages(); len(m) != 1 || !m[0].TLS {
			t.Errorf("messages %+v, want one over TLS", m)
		}
	})
	t.Run("plain server offers no starttls", func(t *testing.T) {
		s := smtptest.NewServer(t)
		if ok, _ := dial(t, s).Extension("STARTTLS"); ok || s.RootCAs() != nil {
			t.Error("plain server offers STARTTLS")
		}
	})
}

func TestServerClosesConnections(t *testing.T) {
	t.Run("idle timeout", func(t *testing.T) {
		s := smtptest.NewServer(t, smtptest.WithIdleTimeout(100*time.Millisecond))
		c := dial(t, s)
		if err := c.Hello("client.example.com"); err != nil {
			t.Fatalf("hello: %v", err)
		}
		testkit.Eventually(t, 5*time.Second, "the idle connection to close", func() bool { return s.Active() == 0 })
		if err := c.Noop(); err == nil {
			t.Error("NOOP on an idle-closed connection succeeded")
		}
	})
	t.Run("drop", func(t *testing.T) {
		s := smtptest.NewServer(t)
		c := dial(t, s)
		if err := c.Hello("client.example.com"); err != nil {
			t.Fatalf("hello: %v", err)
		}
		testkit.Eventually(t, 5*time.Second, "the connection to be tracked", func() bool { return s.Active() == 1 })
		if n := s.DropConnections(); n != 1 {
			t.Errorf("DropConnections = %d, want 1", n)
		}
		if s.Active() != 0 {
			t.Errorf("Active = %d after drop", s.Active())
		}
		if err := c.Noop(); err == nil {
			t.Error("NOOP on a dropped connection succeeded")
		}
		if s.Connections() != 1 {
			t.Errorf("Connections = %d, want 1", s.Connections())
		}
	})
}
