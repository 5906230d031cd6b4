// Package smtptest owns a scripted, in-process SMTP server for fast tests of
// SMTP clients: a real go-smtp server on a loopback TCP port that records the
// messages it accepts and lets a test decide, command by command, what to
// reply (a code, a delay, a dropped connection). It can require AUTH and
// offer STARTTLS or implicit TLS with a certificate generated in memory.
//
// It is test support only: it never delivers mail anywhere, and it does not
// know the sender package or jobs.
package smtptest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/mail"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// The verbs a ScriptFunc sees.
const (
	VerbAuth = "AUTH"
	VerbMail = "MAIL"
	VerbRcpt = "RCPT"
	VerbData = "DATA"
)

// Command is one client command offered to a ScriptFunc.
type Command struct {
	// Verb is VerbAuth, VerbMail, VerbRcpt or VerbData.
	Verb string
	// Arg is the username for AUTH, the reverse path for MAIL, the recipient
	// for RCPT and the Message-ID (without angle brackets) for DATA. DATA is
	// offered after the whole message has been read, so the script decides
	// the reply to the final dot.
	Arg string
	// Conn is the 1-based index of the connection, in accept order.
	Conn int
	// Attempt counts the commands with this Verb and Arg the server has seen
	// on any connection, this one included (1 the first time).
	Attempt int
}

// Reply is what a ScriptFunc wants the server to answer.
//
// A nil Reply, or one with Code 0 or a 2xx Code, lets the command proceed as
// normal (after Delay). A 4xx or 5xx Code rejects the command with exactly
// that code, Enhanced status ("" sends none) and Text.
type Reply struct {
	Code     int
	Enhanced string // RFC 3463 status such as "5.1.1"; "" sends the reply without one
	Text     string // Defaults to "scripted reply".
	// Disconnect closes the connection right after a rejecting reply (or,
	// with a Code below 400, without any reply), the way a server that is
	// shutting down does.
	Disconnect bool
	// Delay holds the reply back (cut short when the server closes).
	Delay time.Duration
}

// ScriptFunc decides the reply to a command. It is called from the server's
// connection goroutines, possibly concurrently.
type ScriptFunc func(Command) *Reply

// Received is a message the server accepted.
type Received struct {
	Conn      int      // index of the connection it arrived on
	From      string   // envelope sender
	To        []string // envelope recipients
	Data      []byte   // the message as transmitted, CRLF line endings
	MessageID string   // Message-ID header without angle brackets, "" if none
	TLS       bool     // whether the connection was encrypted
	Username  string   // authenticated user, "" if none
}

// Header parses the header of the message.
func (r Received) Header() (mail.Header, error) {
	m, err := mail.ReadMessage(bytes.NewReader(r.Data))
	if err != nil {
		return nil, err
	}
	return m.Header, nil
}

// Option configures a Server.
type Option func(*config)

type config struct {
	script      ScriptFunc
	username    string
	password    string
	requireAuth bool
	startTLS    bool
	implicitTLS bool
	idleTimeout time.Duration
	listener    net.Listener
}

// WithScript installs f to decide the replies to AUTH, MAIL, RCPT and DATA.
func WithScript(f ScriptFunc) Option { return func(c *config) { c.script = f } }

// WithAuth offers AUTH PLAIN and requires a successful login with these
// credentials before MAIL (530 5.7.0 otherwise). Wrong credentials get
// 535 5.7.8. AUTH is allowed without TLS, as on a loopback test relay.
func WithAuth(username, password string) Option {
	return func(c *config) {
		c.requireAuth = true
		c.username, c.password = username, password
	}
}

// WithStartTLS offers STARTTLS with a self-signed certificate for
// 127.0.0.1, ::1 and localhost generated in memory (see RootCAs).
func WithStartTLS() Option { return func(c *config) { c.startTLS = true } }

// WithImplicitTLS makes the server speak TLS from the first byte (SMTPS,
// as on port 465) with the in-memory certificate.
func WithImplicitTLS() Option { return func(c *config) { c.implicitTLS = true } }

// WithIdleTimeout makes the server answer "421 4.4.2 Idle timeout" and
// close a connection that sends no command for d, as real MTAs do.
func WithIdleTimeout(d time.Duration) Option { return func(c *config) { c.idleTimeout = d } }

// WithListener serves on l (a fixed address, such as the destination a
// relay under test forwards to) instead of a new one on 127.0.0.1:0. The
// server closes it.
func WithListener(l net.Listener) Option { return func(c *config) { c.listener = l } }

// Server is a running scripted SMTP server. Its methods are safe for
// concurrent use.
type Server struct {
	cfg   config
	srv   *smtp.Server
	ln    net.Listener
	roots *x509.CertPool
	done  chan struct{} // closed when the server shuts down

	mu       sync.Mutex
	conns    int                       // connections accepted so far
	open     map[*trackedConn]struct{} // connections not yet closed
	attempts map[string]int
	messages []Received
}

// NewServer starts a server on 127.0.0.1:0 and stops it in t.Cleanup,
// closing every connection and waiting for its goroutines.
func NewServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{
		done:     make(chan struct{}),
		open:     make(map[*trackedConn]struct{}),
		attempts: make(map[string]int),
	}
	for _, o := range opts {
		o(&s.cfg)
	}

	var tlsConfig *tls.Config
	if s.cfg.startTLS || s.cfg.implicitTLS {
		cert, roots, err := selfSigned()
		if err != nil {
			t.Fatalf("smtptest: generate certificate: %v", err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		s.roots = roots
	}

	inner := s.cfg.listener
	if inner == nil {
		var err error
		if inner, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatalf("smtptest: listen: %v", err)
		}
	}
	var ln net.Listener = &trackedListener{Listener: inner, s: s}
	s.ln = ln
	if s.cfg.implicitTLS {
		ln = tls.NewListener(ln, tlsConfig)
	}

	s.srv = smtp.NewServer(backend{s})
	s.srv.Domain = "smtptest.localhost"
	s.srv.AllowInsecureAuth = true
	s.srv.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.ReadTimeout = s.cfg.idleTimeout
	if s.cfg.startTLS {
		s.srv.TLSConfig = tlsConfig
	}

	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = s.srv.Serve(ln) // returns when the listener is closed below
	}()

	t.Cleanup(func() {
		close(s.done)
		_ = s.ln.Close()
		<-served // no Accept in flight: every accepted connection is tracked
		s.DropConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// Shutdown waits for the connection goroutines; the listener is
		// already closed, so its error is expected and ignored.
		if err := s.srv.Shutdown(ctx); errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("smtptest: connection goroutines did not stop: %v", err)
		}
	})
	return s
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Host returns the server's IP address, "127.0.0.1".
func (s *Server) Host() string { return s.ln.Addr().(*net.TCPAddr).IP.String() }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// RootCAs returns a pool holding the server's self-signed certificate, or
// nil when the server offers no TLS.
func (s *Server) RootCAs() *x509.CertPool { return s.roots }

// Messages returns a copy of the messages accepted so far, in order.
func (s *Server) Messages() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Received, len(s.messages))
	copy(out, s.messages)
	return out
}

// Count returns the number of messages accepted so far.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.messages)
}

// Connections returns the number of connections accepted so far.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// Active returns the number of connections currently open.
func (s *Server) Active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// DropConnections closes every open connection abruptly, without a reply,
// the way a crashed server or a NAT timeout does. It returns how many it
// closed.
func (s *Server) DropConnections() int {
	s.mu.Lock()
	conns := make([]*trackedConn, 0, len(s.open))
	for c := range s.open {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	return len(conns)
}

// script asks the ScriptFunc about a command; it returns nil to proceed.
// A rejecting reply is returned as an error for go-smtp to send. When the
// reply says Disconnect, the reply is written and the connection closed here.
func (s *Server) script(c *smtp.Conn, verb, arg string) error {
	if s.cfg.script == nil {
		return nil
	}
	s.mu.Lock()
	key := verb + "\x00" + arg
	s.attempts[key]++
	cmd := Command{Verb: verb, Arg: arg, Conn: connIndex(c), Attempt: s.attempts[key]}
	s.mu.Unlock()

	r := s.cfg.script(cmd)
	if r == nil {
		return nil
	}
	if r.Delay > 0 {
		timer := time.NewTimer(r.Delay)
		select {
		case <-timer.C:
		case <-s.done:
			timer.Stop()
		}
	}
	reject := r.Code >= 400
	if r.Disconnect {
		if reject {
			_, _ = io.WriteString(c.Conn(), r.line())
		}
		_ = c.Close()
		return &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 4, 2}, Message: "disconnected"}
	}
	if !reject {
		return nil
	}
	return r.smtpError()
}

func (r *Reply) text() string {
	if r.Text == "" {
		return "scripted reply"
	}
	return r.Text
}

func (r *Reply) enhanced() smtp.EnhancedCode {
	parts := strings.Split(r.Enhanced, ".")
	if len(parts) != 3 {
		return smtp.NoEnhancedCode
	}
	var ec smtp.EnhancedCode
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return smtp.NoEnhancedCode
		}
		ec[i] = n
	}
	return ec
}

func (r *Reply) smtpError() *smtp.SMTPError {
	return &smtp.SMTPError{Code: r.Code, EnhancedCode: r.enhanced(), Message: r.text()}
}

func (r *Reply) line() string {
	if r.enhanced() == smtp.NoEnhancedCode {
		return fmt.Sprintf("%d %s\r\n", r.Code, r.text())
	}
	return fmt.Sprintf("%d %s %s\r\n", r.Code, r.Enhanced, r.text())
}

type backend struct{ s *Server }

func (b backend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	return &session{s: b.s, c: c}, nil
}

// session is one SMTP session; go-smtp calls it from one goroutine. A new
// session starts after STARTTLS, which also forgets a previous AUTH.
type session struct {
	s    *Server
	c    *smtp.Conn
	user string
	from string
	to   []string
}

var (
	_ smtp.Session     = (*session)(nil)
	_ smtp.AuthSession = (*session)(nil)
)

func (ss *session) AuthMechanisms() []string {
	if !ss.s.cfg.requireAuth {
		return nil
	}
	return []string{sasl.Plain}
}

func (ss *session) Auth(mech string) (sasl.Server, error) {
	if mech != sasl.Plain || !ss.s.cfg.requireAuth {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(_, username, password string) error {
		if err := ss.s.script(ss.c, VerbAuth, username); err != nil {
			return err
		}
		if username != ss.s.cfg.username || password != ss.s.cfg.password {
			return smtp.ErrAuthFailed
		}
		ss.user = username
		return nil
	}), nil
}

func (ss *session) Mail(from string, _ *smtp.MailOptions) error {
	if ss.s.cfg.requireAuth && ss.user == "" {
		return &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "Authentication required"}
	}
	if err := ss.s.script(ss.c, VerbMail, from); err != nil {
		return err
	}
	ss.from = from
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if err := ss.s.script(ss.c, VerbRcpt, to); err != nil {
		return err
	}
	ss.to = append(ss.to, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	id := ""
	if m, err := mail.ReadMessage(bytes.NewReader(data)); err == nil {
		id = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(m.Header.Get("Message-Id")), "<"), ">")
	}
	if err := ss.s.script(ss.c, VerbData, id); err != nil {
		return err
	}
	_, isTLS := ss.c.TLSConnectionState()
	rec := Received{
		Conn:      connIndex(ss.c),
		From:      ss.from,
		To:        append([]string(nil), ss.to...),
		Data:      data,
		MessageID: id,
		TLS:       isTLS,
		Username:  ss.user,
	}
	ss.s.mu.Lock()
	ss.s.messages = append(ss.s.messages, rec)
	ss.s.mu.Unlock()
	return nil
}

func (ss *session) Reset() {
	ss.from = ""
	ss.to = nil
}

func (ss *session) Logout() error { return nil }

// trackedListener numbers and tracks the connections it accepts.
type trackedListener struct {
	net.Listener
	s *Server
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	l.s.conns++
	tc := &trackedConn{Conn: c, s: l.s, index: l.s.conns}
	l.s.open[tc] = struct{}{}
	return tc, nil
}

type trackedConn struct {
	net.Conn
	s     *Server
	index int
	once  sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.open, c)
		c.s.mu.Unlock()
	})
	return err
}

// connIndex finds the accept index of a go-smtp connection, under TLS too.
func connIndex(c *smtp.Conn) int {
	nc := c.Conn()
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	if tc, ok := nc.(*trackedConn); ok {
		return tc.index
	}
	return 0
}
