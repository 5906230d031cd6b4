package sender

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/textproto"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/wneessen/go-mail"
	"github.com/wneessen/go-mail/smtp"

	"github.com/postline/postline/job"
)

// quitTimeout bounds the polite QUIT before a connection is closed, so a
// peer that vanished does not stall the next send for a full SendTimeout.
const quitTimeout = 2 * time.Second

// Relay is one configured SMTP relay. It is safe for concurrent use; the
// connections live in the Sessions it hands out.
type Relay struct {
	cfg       Config
	tls       TLSPolicy // cfg.TLS with auto resolved
	addr      string
	tlsConfig *tls.Config
	opts      []mail.Option // for each session's go-mail client, without the dialer
	logger    *slog.Logger
	metrics   *metrics
	now       func() time.Time // injectable for idle-timeout tests
}

// New returns a Relay for cfg (after WithDefaults). It does not connect.
// Metrics register on reg (nil: not registered); relays with different
// names may share one registry. A nil logger discards logs.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Relay, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("sender metrics: %w", err)
	}
	r := &Relay{
		cfg:  cfg,
		tls:  effectiveTLS(cfg.TLS, cfg.Host),
		addr: net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)),
		tlsConfig: &tls.Config{
			ServerName:         cfg.Host,
			InsecureSkipVerify: cfg.InsecureSkipVerify, //nolint:gosec // opt-in for test relays, documented on Config
			MinVersion:         tls.VersionTLS12,
		},
		logger:  logger.With("provider", cfg.Name),
		metrics: m,
		now:     time.Now,
	}
	r.opts = []mail.Option{
		mail.WithPort(cfg.Port),
		mail.WithTimeout(cfg.SendTimeout),
		mail.WithHELO(cfg.HELO),
		mail.WithTLSConfig(r.tlsConfig),
		// The session tracks idle time itself, and sends RSET only after
		// a failed transaction (see Session.transact).
		mail.WithoutNoop(),
		mail.WithoutRset(),
	}
	switch r.tls {
	case TLSMandatory:
		r.opts = append(r.opts, mail.WithTLSPolicy(mail.TLSMandatory))
	case TLSOpportunistic:
		r.opts = append(r.opts, mail.WithTLSPolicy(mail.TLSOpportunistic))
	case TLSNone:
		r.opts = append(r.opts, mail.WithTLSPolicy(mail.NoTLS))
	case TLSImplicit:
		// The session's dialer does the TLS handshake; WithSSL only stops
		// go-mail from also trying STARTTLS.
		r.opts = append(r.opts, mail.WithSSL())
	}
	if cfg.Username != "" {
		mechs := []mail.SMTPAuthType{mail.SMTPAuthPlain, mail.SMTPAuthLogin}
		if r.tls == TLSNone && isLoopback(cfg.Host) {
			mechs = []mail.SMTPAuthType{mail.SMTPAuthPlainNoEnc, mail.SMTPAuthLoginNoEnc}
		}
		r.opts = append(r.opts,
			mail.WithOpportunisticSMTPAuth(mechs...),
			mail.WithUsername(cfg.Username),
			mail.WithPassword(cfg.Password))
	}
	// Surface option errors here rather than on the first Send.
	if _, err := mail.NewClient(cfg.Host, r.opts...); err != nil {
		return nil, fmt.Errorf("sender: go-mail client: %w", err)
	}
	return r, nil
}

// Name returns the provider name (Config.Name).
func (r *Relay) Name() string { return r.cfg.Name }

// NewSession returns a session: one SMTP connection, dialled lazily and
// reused, for ONE goroutine. Close it when done.
func (r *Relay) NewSession() *Session {
	s := &Session{relay: r}
	opts := append(r.opts[:len(r.opts):len(r.opts)], mail.WithDialContextFunc(s.dialContext))
	s.client, s.clientErr = mail.NewClient(r.cfg.Host, opts...)
	if s.clientErr == nil {
		s.client.ErrorHandlerRegistry.SetDefaultHandler(&s.replies)
	}
	return s
}

// Session is one reusable SMTP connection to a Relay. It is not safe for
// concurrent use: each sending goroutine owns one.
type Session struct {
	relay     *Relay
	client    *mail.Client // one per session: its dialer writes session state
	clientErr error

	sc       *smtp.Client // nil when not connected
	sent     int          // transactions on sc
	lastUsed time.Time    // end of the last transaction on sc

	// Set by dialContext during a dial.
	dialStage string

	replies replyRecorder

	mu   sync.Mutex   // guards conn, which a context watcher reads
	conn *watchedConn // the TCP connection under sc
}

// Send builds the message from the job and sends it, dialling or
// re-dialling as needed. A connection that failed (network error, 421, a
// dead connection) is closed and the next Send redials.
//
// A kept connection that turns out to have died while idle (no reply or 421
// to MAIL FROM, before anything of the message was accepted) is redialled
// once within the same Send, transparently: the caller only sees the error
// of the fresh connection, if any. Failure returns *Error.
//
// ctx bounds the whole call: when it ends, the connection's I/O is cut short
// and the connection dropped.
func (s *Session) Send(ctx context.Context, j *job.Job) (err error) {
	start := time.Now()
	defer func() { s.relay.metrics.observeSend(time.Since(start), err) }()

	msg, buildErr := Message(j)
	if buildErr != nil {
		return &Error{Provider: s.relay.cfg.Name, Stage: StageBuild, Err: buildErr}
	}
	if ctx.Err() != nil {
		return withContext(ctx, &Error{Provider: s.relay.cfg.Name, Stage: StageConn, Err: ctx.Err()})
	}
	s.retire()

	fresh := s.sc == nil
	if fresh {
		if e := s.dial(ctx); e != nil {
			return e
		}
	}
	e := s.transact(ctx, msg)
	if e == nil {
		return nil
	}
	if fresh || !e.staleConnection() || ctx.Err() != nil {
		return e
	}
	s.relay.logger.Debug("smtp connection died while idle; redialling", "error", e.Error())
	if e := s.dial(ctx); e != nil {
		return e
	}
	if e := s.transact(ctx, msg); e != nil {
		return e
	}
	return nil
}

// Close says QUIT and closes the connection, if any. The session may be
// used again: the next Send dials.
func (s *Session) Close() error {
	if s.sc == nil {
		return nil
	}
	err := s.quit()
	s.closeConn()
	if err != nil {
		return fmt.Errorf("smtp %s: quit: %w", s.relay.cfg.Name, err)
	}
	return nil
}

// retire closes a kept connection that has carried MaxMessagesPerConn
// transactions or sat idle for IdleTimeout: a server may have dropped it
// (idle) and spreading load over relay nodes needs fresh connections.
func (s *Session) retire() {
	if s.sc == nil {
		return
	}
	reason := ""
	switch {
	case s.relay.cfg.MaxMessagesPerConn > 0 && s.sent >= s.relay.cfg.MaxMessagesPerConn:
		reason = "max messages per connection"
	case s.relay.now().Sub(s.lastUsed) > s.relay.cfg.IdleTimeout:
		reason = "idle"
	default:
		return
	}
	if err := s.quit(); err != nil {
		s.relay.logger.Debug("smtp quit failed", "reason", reason, "error", err)
	}
	s.closeConn()
}

// dial connects, says EHLO and does STARTTLS and AUTH, all within
// DialTimeout (and ctx).
func (s *Session) dial(ctx context.Context) *Error {
	name := s.relay.cfg.Name
	if s.clientErr != nil {
		s.relay.metrics.dialError.Inc()
		return &Error{Provider: name, Stage: StageDial, Err: s.clientErr}
	}
	dctx, cancel := context.WithTimeout(ctx, s.relay.cfg.DialTimeout)
	defer cancel()

	s.dialStage = ""
	s.replies.reset()
	stop := context.AfterFunc(dctx, s.abort)
	sc, err := s.client.DialToSMTPClientWithContext(dctx)
	if !stop() && err == nil {
		// The watcher fired as the dial finished: the connection's deadline
		// is poisoned.
		err = dctx.Err()
	}
	if err != nil {
		// go-mail does not close a connection whose greeting, EHLO,
		// STARTTLS or AUTH failed.
		s.closeConn()
		s.relay.metrics.dialError.Inc()
		return withContext(dctx, dialError(name, err, s.dialStage, s.replies.failedCmd))
	}
	s.sc = sc
	s.sent = 0
	s.lastUsed = s.relay.now()
	s.relay.metrics.dialOK.Inc()
	s.relay.metrics.open.Inc()
	s.relay.logger.Debug("smtp connection opened", "tls", string(s.relay.tls))
	return nil
}

// dialContext is the session's go-mail dialer. It does the implicit TLS
// handshake itself and wraps the TCP connection so a context watcher can cut
// its I/O short.
func (s *Session) dialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", s.relay.addr)
	if err != nil {
		s.dialStage = StageDial
		return nil, err
	}
	wc := &watchedConn{Conn: raw}
	s.mu.Lock()
	s.conn = wc
	s.mu.Unlock()
	if ctx.Err() != nil {
		wc.abort() // the watcher may have run before s.conn was set
	}
	if s.relay.tls != TLSImplicit {
		return wc, nil
	}
	tc := tls.Client(wc, s.relay.tlsConfig)
	if err := tc.HandshakeContext(ctx); err != nil {
		s.dialStage = StageTLS
		return nil, err
	}
	return tc, nil
}

// transact sends msg on the open connection. On failure it drops the
// connection if it cannot be trusted any more, and otherwise resets the
// transaction so the next message starts clean.
func (s *Session) transact(ctx context.Context, msg *mail.Msg) *Error {
	s.mu.Lock()
	wc := s.conn
	s.mu.Unlock()
	if wc != nil {
		wc.writeFailed.Store(false)
	}
	stop := context.AfterFunc(ctx, s.abort)
	err := s.client.SendWithSMTPClient(s.sc, msg)
	aborted := !stop()
	s.sent++
	s.lastUsed = s.relay.now()
	if err == nil {
		if aborted {
			// Delivered, but the watcher poisoned the connection's deadline.
			s.closeConn()
		}
		return nil
	}
	// Without a connection to ask, a write failure cannot be ruled out;
	// assuming none errs toward not sending the message twice.
	wroteAll := wc == nil || !wc.writeFailed.Load()
	e := withContext(ctx, sendError(s.relay.cfg.Name, err, wroteAll))
	if e.Ambiguous {
		s.relay.metrics.ambiguousDataEnd.Inc()
		s.relay.logger.Warn("smtp: no reply to the end of the message; the relay may have accepted it",
			"message_id", msg.GetMessageID(), "error", e.Error())
	}
	switch {
	case aborted || e.dropsConnection() || e.Stage == StageConn:
		s.closeConn()
	default:
		// go-mail resets after a failed MAIL or RCPT but not after a
		// rejected DATA; with WithoutRset it never resets after success.
		// One more RSET after any failure keeps a rejected recipient out of
		// the next message, and proves the connection still works.
		if rerr := s.sc.Reset(); rerr != nil {
			s.relay.logger.Debug("smtp RSET after failed transaction failed; closing connection", "error", rerr)
			s.closeConn()
		}
	}
	return e
}

// quit says QUIT within quitTimeout.
func (s *Session) quit() error {
	if err := s.sc.UpdateDeadline(quitTimeout); err != nil {
		return err
	}
	return s.client.CloseWithSMTPClient(s.sc)
}

// closeConn closes the TCP connection under the session, if any.
func (s *Session) closeConn() {
	s.mu.Lock()
	c := s.conn
	s.conn = nil
	s.mu.Unlock()
	if c != nil {
		_ = c.Close() // closing is all that is left to do; a second close errors harmlessly
	}
	if s.sc != nil {
		s.sc = nil
		s.relay.metrics.open.Dec()
		s.relay.logger.Debug("smtp connection closed")
	}
}

// abort cuts the current connection's I/O short; it runs on a context
// watcher's goroutine.
func (s *Session) abort() {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		c.abort()
	}
}

// aLongTimeAgo is a deadline in the past: I/O fails at once.
var aLongTimeAgo = time.Unix(1, 0)

// watchedConn is a net.Conn whose deadlines can be forced into the past for
// good: go-mail resets the deadline before each command, which would
// otherwise undo a cancellation. It also notes failed writes, which tell a
// message whose final dot never left from one whose reply never came (see
// Error.Ambiguous); under TLS it carries the records, and a failed record
// write leaves its end unsent just the same.
type watchedConn struct {
	net.Conn
	mu      sync.Mutex
	aborted bool

	writeFailed atomic.Bool // a Write failed since the session last cleared it
}

// Write implements net.Conn.
func (c *watchedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.writeFailed.Store(true)
	}
	return n, err
}

func (c *watchedConn) abort() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.aborted = true
	_ = c.Conn.SetDeadline(aLongTimeAgo) // a closed connection has no I/O left to cut
}

func (c *watchedConn) deadline(t time.Time) time.Time {
	if c.aborted {
		return aLongTimeAgo
	}
	return t
}

// SetDeadline implements net.Conn.
func (c *watchedConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.SetDeadline(c.deadline(t))
}

// SetReadDeadline implements net.Conn.
func (c *watchedConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.SetReadDeadline(c.deadline(t))
}

// SetWriteDeadline implements net.Conn.
func (c *watchedConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.SetWriteDeadline(c.deadline(t))
}

// replyRecorder is the session's go-mail error-reply handler: it notes which
// command got an error reply (go-mail's dial errors do not say) and passes
// the error through unchanged.
type replyRecorder struct {
	failedCmd string
}

func (r *replyRecorder) reset() { r.failedCmd = "" }

// HandleError implements smtp.ResponseErrorHandler.
func (r *replyRecorder) HandleError(_, command string, _ *textproto.Conn, err error) error {
	r.failedCmd = command
	return err
}
