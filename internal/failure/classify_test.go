package failure_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/job"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// want is the part of a Verdict a test checks.
type want struct {
	class    failure.Class
	provider bool
	timeout  bool
	rule     string
}

func check(t *testing.T, err error, w want) failure.Verdict {
	t.Helper()
	if err == nil {
		t.Fatal("no error to classify")
	}
	v := failure.Classify(err)
	if v.Class != w.class || v.RelayFault != w.provider || v.Timeout != w.timeout || v.Rule != w.rule {
		t.Errorf("Classify(%v) = {Class:%s RelayFault:%v Timeout:%v Rule:%s}, want {%s %v %v %s}",
			err, v.Class, v.RelayFault, v.Timeout, v.Rule, w.class, w.provider, w.timeout, w.rule)
	}
	if loaded := loadedDefault(t).Classify(err); loaded != v {
		t.Errorf("the rules loaded from a copy of the default file give %+v, the default %+v", loaded, v)
	}
	return v
}

// loadedDefault loads a copy of the default rules file from disk, as an
// operator's file is loaded.
func loadedDefault(t *testing.T) *failure.RuleSet {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, failure.DefaultRulesYAML(), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := failure.LoadRules(path)
	if err != nil {
		t.Fatalf("LoadRules(copy of the default): %v", err)
	}
	return s
}

// listen returns a loopback listener and runs serve on every connection it
// accepts. At the end of the test it stops accepting and closes the
// connections serve left open.
func listen(t *testing.T, serve func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn // owned by the accept goroutine until done closes
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			serve(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close() // most are closed already
		}
	})
	return ln
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestClassifyRealNetworkErrors builds each network failure for real on
// loopback rather than trusting hand-made error values.
func TestClassifyRealNetworkErrors(t *testing.T) {
	provider := func(rule string) want { return want{failure.Transient, true, false, rule} }

	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		_, err = net.Dial("tcp", addr)
		check(t, err, provider(failure.RuleRefused))
	})

	t.Run("dial timeout", func(t *testing.T) {
		ln := listen(t, func(c net.Conn) { _ = c.Close() })
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		var d net.Dialer
		_, err := d.DialContext(ctx, "tcp", ln.Addr().String())
		check(t, err, want{failure.Transient, true, true, failure.RuleTimeout})
	})

	t.Run("read timeout", func(t *testing.T) {
		ln := listen(t, func(net.Conn) {}) // accepts, never answers
		c := dial(t, ln.Addr().String())
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		check(t, err, want{failure.Transient, true, true, failure.RuleTimeout})
	})

	t.Run("EOF", func(t *testing.T) {
		ln := listen(t, func(c net.Conn) { _ = c.Close() })
		c := dial(t, ln.Addr().String())
		_, err := c.Read(make([]byte, 1))
		if !errors.Is(err, io.EOF) {
			t.Fatalf("read = %v, want EOF", err)
		}
		check(t, fmt.Errorf("read greeting: %w", err), provider(failure.RuleConnectionLost))
	})

	t.Run("reset and broken pipe", func(t *testing.T) {
		ln := listen(t, func(c net.Conn) {
			_ = c.(*net.TCPConn).SetLinger(0) // close with RST
			_ = c.Close()
		})
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil { // the RST can beat connect's return
			check(t, err, provider(failure.RuleConnectionLost))
			return
		}
		defer func() { _ = c.Close() }()
		// Writes fail once the RST has arrived: ECONNRESET or EPIPE.
		deadline := time.Now().Add(5 * time.Second)
		for err == nil && time.Now().Before(deadline) {
			_, err = c.Write([]byte("EHLO me\r\n"))
		}
		check(t, err, provider(failure.RuleConnectionLost))
		_, err = c.Read(make([]byte, 1))
		check(t, err, provider(failure.RuleConnectionLost))
	})

	t.Run("TLS handshake against plain SMTP", func(t *testing.T) {
		ln := listen(t, func(c net.Conn) {
			_, _ = io.WriteString(c, "220 plain.example ESMTP\r\n")
			_ = c.Close()
		})
		c := dial(t, ln.Addr().String())
		err := tls.Client(c, &tls.Config{ServerName: "localhost", MinVersion: tls.VersionTLS12}).Handshake()
		check(t, err, provider(failure.RuleTLS))
	})
}

// newRelay returns a relay for srv (TLS none on loopback unless cfg says).
func newRelay(t *testing.T, srv *smtptest.Server, cfg sender.Config) *sender.Session {
	t.Helper()
	cfg.Host, cfg.Port = srv.Host(), srv.Port()
	r, err := sender.New(cfg, nil, nil)
	if err != nil {
		t.Fatalf("sender.New: %v", err)
	}
	s := r.NewSession()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func testJob(t *testing.T) *job.Job {
	return &job.Job{
		Version:   job.SchemaVersion,
		MessageID: strings.ReplaceAll(t.Name(), "/", ".") + "@test.postline",
		From:      "sender@example.com",
		To:        []string{"to@example.com"},
		Subject:   "classify",
		Text:      "hello",
	}
}

// reply scripts every command with verb to get r.
func reply(verb string, r smtptest.Reply) smtptest.Option {
	return smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		if c.Verb != verb {
			return nil
		}
		return &r
	})
}

// TestClassifyThroughSender classifies the errors the real sender returns
// against a scripted SMTP server over TCP.
func TestClassifyThroughSender(t *testing.T) {
	tests := []struct {
		name     string
		opts     []smtptest.Option
		cfg      sender.Config
		ctx      func() (context.Context, context.CancelFunc)
		want     want
		code     int
		enhanced string
		retry    time.Duration
	}{
		{
			name: "421 4.7.0 to MAIL",
			opts: []smtptest.Option{reply(smtptest.VerbMail, smtptest.Reply{Code: 421, Enhanced: "4.7.0", Text: "Too many connections, try again in 30 seconds"})},
			want: want{failure.Throttled, true, false, "throttle-text"}, code: 421, enhanced: "4.7.0", retry: 30 * time.Second,
		},
		{
			name: "550 5.1.1 to RCPT",
			opts: []smtptest.Option{reply(smtptest.VerbRcpt, smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "no such user"})},
			want: want{failure.Permanent, false, false, "recipient-unknown"}, code: 550, enhanced: "5.1.1",
		},
		{
			name: "550 5.7.1 temporary rate limit to DATA",
			opts: []smtptest.Option{reply(smtptest.VerbData, smtptest.Reply{Code: 550, Enhanced: "5.7.1", Text: "Temporary rate limit, try again in 60 seconds"})},
			want: want{failure.Throttled, true, false, "temporary-rate-limit"}, code: 550, enhanced: "5.7.1", retry: time.Minute,
		},
		{
			name: "535 5.7.8 to AUTH",
			opts: []smtptest.Option{smtptest.WithAuth("user", "right")},
			cfg:  sender.Config{Username: "user", Password: "wrong"},
			want: want{failure.Auth, true, false, "auth-credentials-invalid"}, code: 535, enhanced: "5.7.8",
		},
		{
			name: "530 5.7.0 to MAIL without AUTH",
			opts: []smtptest.Option{smtptest.WithAuth("user", "right")},
			want: want{failure.Auth, true, false, "auth-required"}, code: 530, enhanced: "5.7.0",
		},
		{
			name: "554 to AUTH: the relay refuses us",
			opts: []smtptest.Option{smtptest.WithAuth("user", "right"), reply(smtptest.VerbAuth, smtptest.Reply{Code: 554, Enhanced: "5.7.1", Text: "Access denied for your network"})},
			cfg:  sender.Config{Username: "user", Password: "right"},
			want: want{failure.Auth, true, false, failure.RuleRelayRefused}, code: 554, enhanced: "5.7.1",
		},
		// The server has the whole message when the script sees DATA: a
		// failure now may follow a delivery, and must not be resent.
		{
			name: "connection dropped without a reply to the final dot",
			opts: []smtptest.Option{reply(smtptest.VerbData, smtptest.Reply{Disconnect: true})},
			want: want{failure.Unknown, true, false, failure.RuleAmbiguousDataEnd},
		},
		{
			name: "connection dropped without a reply to the final dot (STARTTLS)",
			opts: []smtptest.Option{smtptest.WithStartTLS(), reply(smtptest.VerbData, smtptest.Reply{Disconnect: true})},
			cfg:  sender.Config{TLS: sender.TLSMandatory, InsecureSkipVerify: true},
			want: want{failure.Unknown, true, false, failure.RuleAmbiguousDataEnd},
		},
		{
			name: "read timeout waiting for the reply to the final dot",
			opts: []smtptest.Option{reply(smtptest.VerbData, smtptest.Reply{Delay: time.Minute})},
			cfg:  sender.Config{SendTimeout: 100 * time.Millisecond},
			want: want{failure.Unknown, true, true, failure.RuleAmbiguousDataEnd},
		},
		{
			name: "read timeout waiting for the reply to the final dot (implicit TLS)",
			opts: []smtptest.Option{smtptest.WithImplicitTLS(), reply(smtptest.VerbData, smtptest.Reply{Delay: time.Minute})},
			cfg:  sender.Config{TLS: sender.TLSImplicit, InsecureSkipVerify: true, SendTimeout: 100 * time.Millisecond},
			want: want{failure.Unknown, true, true, failure.RuleAmbiguousDataEnd},
		},
		{
			name: "context deadline waiting for the reply to the final dot",
			opts: []smtptest.Option{reply(smtptest.VerbData, smtptest.Reply{Delay: time.Minute})},
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 100*time.Millisecond)
			},
			want: want{failure.Unknown, true, true, failure.RuleAmbiguousDataEnd},
		},
		{
			name: "context deadline while waiting for RCPT",
			opts: []smtptest.Option{reply(smtptest.VerbRcpt, smtptest.Reply{Delay: time.Minute})},
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 100*time.Millisecond)
			},
			want: want{failure.Transient, true, true, failure.RuleTimeout},
		},
		{
			name: "context canceled while waiting for RCPT",
			opts: []smtptest.Option{reply(smtptest.VerbRcpt, smtptest.Reply{Delay: time.Minute})},
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(100*time.Millisecond, cancel)
				return ctx, cancel
			},
			want: want{failure.Unknown, false, false, failure.RuleCanceled},
		},
		{
			name: "untrusted certificate (implicit TLS)",
			opts: []smtptest.Option{smtptest.WithImplicitTLS()},
			cfg:  sender.Config{TLS: sender.TLSImplicit},
			want: want{failure.Transient, true, false, failure.RuleTLS},
		},
		{
			name: "untrusted certificate (STARTTLS)",
			opts: []smtptest.Option{smtptest.WithStartTLS()},
			cfg:  sender.Config{TLS: sender.TLSMandatory},
			want: want{failure.Transient, true, false, failure.RuleTLS},
		},
		{
			name: "STARTTLS required but not offered",
			cfg:  sender.Config{TLS: sender.TLSMandatory},
			want: want{failure.Transient, true, false, failure.RuleTLS},
		},
		{
			name: "implicit TLS against a plain-text relay",
			cfg:  sender.Config{TLS: sender.TLSImplicit, DialTimeout: 2 * time.Second},
			want: want{failure.Transient, true, false, failure.RuleTLS},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := smtptest.NewServer(t, tt.opts...)
			s := newRelay(t, srv, tt.cfg)
			ctx, cancel := context.WithCancel(context.Background())
			if tt.ctx != nil {
				ctx, cancel = tt.ctx()
			}
			defer cancel()
			err := s.Send(ctx, testJob(t))
			v := check(t, err, tt.want)
			if v.Code != tt.code || v.Enhanced != tt.enhanced || v.RetryAfter != tt.retry {
				t.Errorf("Code %d Enhanced %q RetryAfter %s, want %d %q %s", v.Code, v.Enhanced, v.RetryAfter, tt.code, tt.enhanced, tt.retry)
			}
			if srv.Count() != 0 {
				t.Errorf("server accepted %d messages, want 0", srv.Count())
			}
		})
	}

	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		r, err := sender.New(sender.Config{Host: "127.0.0.1", Port: port}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		s := r.NewSession()
		defer func() { _ = s.Close() }()
		check(t, s.Send(context.Background(), testJob(t)), want{failure.Transient, true, false, failure.RuleRefused})
	})

	t.Run("job that cannot be built", func(t *testing.T) {
		s := newRelay(t, smtptest.NewServer(t), sender.Config{})
		j := testJob(t)
		j.From = "not an address"
		check(t, s.Send(context.Background(), j), want{failure.Permanent, false, false, failure.RuleBuild})
	})
}

// TestStagesMatchSender pins the stage names Classify relies on to
// sender's.
func TestStagesMatchSender(t *testing.T) {
	for _, stage := range []string{sender.StageBuild, sender.StageHello, sender.StageTLS, sender.StageAuth} {
		e := &sender.Error{Stage: stage, Code: 554}
		v := failure.Classify(e)
		switch stage {
		case sender.StageBuild:
			if v.Class != failure.Permanent {
				t.Errorf("554 at %s = %s, want permanent", stage, v.Class)
			}
		default:
			if v.Rule != failure.RuleRelayRefused {
				t.Errorf("554 at %s matched %q, want %s: stage names drifted", stage, v.Rule, failure.RuleRelayRefused)
			}
		}
	}
	if v := failure.Classify(&sender.Error{Stage: sender.StageBuild, Err: errors.New("bad")}); v.Rule != failure.RuleBuild {
		t.Errorf("build error matched %q, want %s", v.Rule, failure.RuleBuild)
	}
}

// Compile-time check: *sender.Error is what Classify looks for.
var (
	_ failure.Reply     = (*sender.Error)(nil)
	_ failure.Staged    = (*sender.Error)(nil)
	_ failure.Ambiguous = (*sender.Error)(nil)
)
