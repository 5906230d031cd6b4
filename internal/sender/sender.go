package sender

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/textproto"
	"slices"
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
	dkim      *dkimMetrics
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
	dm, err := newDKIMMetrics(reg)
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
		logger:  logger.With("relay", cfg.Name),
		metrics: m,
		dkim:    dm,
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

// Name returns the relay name (Config.Name).
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
	// ahead is the envelope written behind the last message on sc, its
	// replies not read yet (see SendToThen); nil when there is none.
	ahead *envelope

	// Set by dialContext during a dial.
	dialStage string

	replies replyRecorder

	// rendered holds the message of the send in progress; kept between
	// sends (up to keptRenderBytes) so that rendering does not grow a new
	// buffer for every mail.
	rendered bytes.Buffer
	// copy holds the copy of the message with a recipient's
	// List-Unsubscribe headers, kept like rendered.
	copy bytes.Buffer
	// signed and signedCopy hold the signed message and the signed copy,
	// kept like rendered.
	signed, signedCopy []byte

	mu   sync.Mutex   // guards conn, which a context watcher reads
	conn *watchedConn // the TCP connection under sc
}

// keptRenderBytes is the largest rendering buffer a session keeps for its
// next mail: a typical mail fits, and a session that sent one large mail
// does not hold its size for good.
const keptRenderBytes = 256 << 10

// Send sends the job to all of its recipients with its From address as the
// return path: SendTo with Recipients(j). It fails with the first
// refusal when the relay refused a recipient at RCPT, even if it took the
// others; use SendTo to learn which recipients went out.
func (s *Session) Send(ctx context.Context, j *job.Job) error {
	res, err := s.SendTo(ctx, j, Recipients(j, ""))
	if err != nil {
		return err
	}
	if len(res.Refused) > 0 {
		return res.Refused[0].Err
	}
	return nil
}

// SendTo builds the message from the job once (DKIM-signed, see
// Config.DKIM) and sends it to rcpts, dialling or re-dialling as needed:
// one transaction per distinct return path, in the order the recipients
// first use it, so that recipients with return paths of their own (VERP)
// each get theirs. Recipients with List-Unsubscribe URIs of their own
// (Recipient.ListUnsubscribe) get a copy each: their headers on top of the
// one message, signed per copy. The message's headers
// (To, Cc) are the job's whatever rcpts holds.
//
// A relay that refuses a recipient at RCPT (a 4xx or 5xx other than 421)
// refuses that recipient only: the others of the transaction go on, and
// the refusal is in Result.Refused. Any other failure (MAIL FROM, DATA, the
// message, the connection) ends the call with err, a *Error: the recipients
// in neither Result.Accepted nor Result.Refused were not sent because of
// it, and the relay took those in Result.Accepted before it happened.
//
// A kept connection that turns out to have died while idle (no reply or 421
// to the first MAIL FROM, before anything was accepted) is redialled once
// within the same call, transparently. A connection that failed (network
// error, 421) is closed and the next call redials.
//
// ctx bounds the whole call: when it ends, the connection's I/O is cut short
// and the connection dropped.
func (s *Session) SendTo(ctx context.Context, j *job.Job, rcpts []Recipient) (res Result, err error) {
	res, _, err = s.SendToThen(ctx, j, rcpts, nil)
	return res, err
}

// Then is asked, as the message of a send ends, for the mail to send next
// on the same connection (see SendToThen). It returns ok false when there
// is none; a mail it returns is the caller's to send, whether or not the
// session put its envelope on the wire.
type Then func() (j *job.Job, rcpts []Recipient, ok bool)

// SendToThen is SendTo that keeps the connection busy: on a relay that
// advertises PIPELINING it asks then, as this mail's message ends, for the
// next mail, and writes that mail's envelope (MAIL FROM, RCPT TO, DATA) in
// the same write as this message's final dot. One write and one round trip
// a mail instead of two. chained reports whether it did: the caller must
// then send that mail next, on this session, with SendTo or SendToThen and
// the same recipients, before anything else. It does not chain a mail with
// more than one return path, or behind the last transaction a connection
// may carry (Config.MaxMessagesPerConn).
//
// The end of this mail's transaction does not depend on the next: the
// relay ends a transaction at its final dot, accepted or not, so the next
// envelope starts a transaction of its own. When the reply to the final dot
// drops the connection (421, no reply), the next mail was not sent and its
// SendTo dials again.
func (s *Session) SendToThen(ctx context.Context, j *job.Job, rcpts []Recipient, then Then) (res Result, chained bool, err error) {
	start := time.Now()
	defer func() { s.relay.metrics.observeSend(time.Since(start), err) }()

	name := s.relay.cfg.Name
	txs := transactions(rcpts, j.From)
	if s.ahead != nil && !s.ahead.matches(j.MessageID, txs, rcpts) {
		// The caller broke SendToThen's contract: the relay waits for the
		// content of another mail. Hanging up is the only way out of DATA
		// without sending it.
		s.relay.logger.Warn("smtp: a chained mail was not sent next; dropping the connection",
			"message_id", j.MessageID, "chained_message_id", s.ahead.messageID)
		s.closeConn()
	}
	if len(rcpts) == 0 {
		return Result{}, false, &Error{Relay: name, Stage: StageBuild, Err: errNoRecipients}
	}
	// Recipients with List-Unsubscribe URIs of their own get copies of
	// their own (one transaction each: the URIs name one recipient), the
	// message built once and each copy signed; the others share one copy.
	copies := slices.ContainsFunc(txs, func(tx transaction) bool { return len(tx.unsubscribe) > 0 })
	var body []byte
	buildErr := s.relay.checkUnsubscribe(rcpts)
	if buildErr == nil {
		body, buildErr = s.relay.build(j, &s.rendered, !copies)
	}
	var (
		shared   []byte // the signed copy of the transactions without URIs
		sharedBy string // the domain that signed it
	)
	if buildErr == nil && !copies {
		shared, sharedBy, buildErr = s.relay.sign(j, body, &s.signed)
	}
	defer func() {
		if s.rendered.Cap() > keptRenderBytes {
			s.rendered = bytes.Buffer{} // a large mail's buffer is not kept
		}
		if s.copy.Cap() > keptRenderBytes {
			s.copy = bytes.Buffer{}
		}
		if cap(s.signed) > keptRenderBytes {
			s.signed = nil
		}
		if cap(s.signedCopy) > keptRenderBytes {
			s.signedCopy = nil
		}
	}()
	if buildErr == nil && ctx.Err() != nil {
		buildErr = withContext(ctx, &Error{Relay: name, Stage: StageConn, Err: ctx.Err()})
	}
	if buildErr != nil {
		if s.ahead != nil {
			s.closeConn() // the relay waits in DATA for a message that will not come
		}
		return Result{}, false, buildErr
	}
	s.retire()

	first := true
	for i, tx := range txs {
		var next Then // only the last transaction chains the next mail
		if i == len(txs)-1 {
			next = then
		}
		txBody, signedBy, e := s.bodyFor(j, body, tx, &shared, &sharedBy)
		if e != nil {
			if s.ahead != nil {
				s.closeConn() // the relay waits in DATA for a message that will not come
			}
			return res, false, e
		}
		accepted, refused, e, dialErr := s.transactDialling(ctx, j.MessageID, txBody, tx, rcpts, next, first)
		if dialErr != nil {
			return res, false, dialErr
		}
		first = false
		for _, k := range accepted {
			res.Accepted = append(res.Accepted, tx.indexes[k])
		}
		if len(accepted) > 0 && signedBy != "" {
			res.DKIMDomain = signedBy // every copy of a mail is signed by its From domain's key
		}
		for _, r := range refused {
			res.Refused = append(res.Refused, Refusal{Index: tx.indexes[r.Index], Err: r.Err})
		}
		if e != nil {
			return res, s.ahead != nil, e
		}
	}
	return res, s.ahead != nil, nil
}

// bodyFor is the signed message of tx and the domain that signed it: a
// copy of its own when tx has List-Unsubscribe URIs, else the shared copy
// (signed by *sharedBy), signed on first use.
func (s *Session) bodyFor(j *job.Job, body []byte, tx transaction, shared *[]byte, sharedBy *string) ([]byte, string, *Error) {
	if len(tx.unsubscribe) > 0 {
		return s.relay.copyFor(j, body, tx.unsubscribe, &s.copy, &s.signedCopy)
	}
	if *shared == nil {
		var e *Error
		if *shared, *sharedBy, e = s.relay.sign(j, body, &s.signed); e != nil {
			return nil, "", e
		}
	}
	return *shared, *sharedBy, nil
}

// transactDialling runs tx, dialling first when the session has no
// connection. When the first transaction of a send finds a kept connection
// dead (it died while idle), it dials again and retries once. dialErr is a
// failed dial, in which case nothing was sent.
func (s *Session) transactDialling(ctx context.Context, messageID string, body []byte, tx transaction, rcpts []Recipient, next Then, first bool) (accepted []int, refused []Refusal, e, dialErr *Error) {
	fresh := s.sc == nil
	if fresh {
		if e := s.dial(ctx); e != nil {
			return nil, nil, nil, e
		}
	}
	accepted, refused, e = s.transact(ctx, messageID, body, tx.from, tx.addrs(rcpts), next)
	if e != nil && first && !fresh && e.staleConnection() && ctx.Err() == nil {
		s.relay.logger.Debug("smtp connection died while idle; redialling", "error", e.Error())
		if e := s.dial(ctx); e != nil {
			return nil, nil, nil, e
		}
		accepted, refused, e = s.transact(ctx, messageID, body, tx.from, tx.addrs(rcpts), next)
	}
	return accepted, refused, e, nil
}

// Close says QUIT and closes the connection, if any. The session may be
// used again: the next Send dials.
func (s *Session) Close() error {
	if s.sc == nil {
		return nil
	}
	if s.ahead != nil {
		// The relay waits in DATA for a chained mail's content: QUIT would
		// be taken for it. Hanging up ends the transaction unsent.
		s.closeConn()
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
	if s.sc == nil || s.ahead != nil {
		return // a chained mail's envelope is on the wire; its chaining checked the limits
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
		return &Error{Relay: name, Stage: StageDial, Err: s.clientErr}
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
	if n := s.relay.cfg.Notify; n != "" {
		sc.SetDSNRcptNotifyOption(n)
		sc.SetDSNMailReturnOption("HDRS")
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

// transact runs one mail transaction on the open connection: MAIL FROM
// from, RCPT TO each of to, and DATA with body when the relay took at least
// one recipient. It returns the indexes into to the relay took and the
// ones it refused. On failure it drops the connection if it cannot be
// trusted any more, and otherwise resets the transaction so the next one
// starts clean.
func (s *Session) transact(ctx context.Context, messageID string, body []byte, from string, to []string, next Then) (accepted []int, refused []Refusal, e *Error) {
	s.mu.Lock()
	wc := s.conn
	s.mu.Unlock()
	if wc != nil {
		wc.writeFailed.Store(false)
	}
	stop := context.AfterFunc(ctx, s.abort)
	accepted, refused, e = s.exchange(body, from, to, next)
	aborted := !stop()
	s.sent++
	s.lastUsed = s.relay.now()
	if e == nil {
		if aborted {
			// Delivered, but the watcher poisoned the connection's deadline.
			s.closeConn()
		}
		if len(accepted) == 0 {
			s.resetAfterFailure()
		}
		return accepted, refused, nil
	}
	if e.dataEnd && e.Code == 0 {
		// Without a connection to ask, a write failure cannot be ruled
		// out; assuming none errs toward not sending the message twice.
		e.Ambiguous = wc == nil || !wc.writeFailed.Load()
	}
	e = withContext(ctx, e)
	if e.Ambiguous {
		s.relay.metrics.ambiguousDataEnd.Inc()
		s.relay.logger.Warn("smtp: no reply to the end of the message; the relay may have accepted it",
			"message_id", messageID, "error", e.Error())
	}
	switch {
	case aborted || e.dropsConnection() || e.Stage == StageConn:
		s.closeConn()
	case s.ahead == nil:
		s.resetAfterFailure()
		// With a chained envelope behind a refused message there is nothing
		// to reset: the relay ended that transaction at the final dot.
	}
	return accepted, refused, e
}

// rcptReplies takes the reply to each of n RCPT commands from reply, in
// order, and sorts the recipients into accepted (their indexes) and
// refused. No reply, or 421, means the relay is closing the connection,
// which is about the relay, not that recipient: the replies after it will
// not come and the recipients it took never got the message, so none is
// accepted and that reply is returned as e. exchange and exchangePipelined
// share it.
func rcptReplies(name string, n int, reply func(i int) error) (accepted []int, refused []Refusal, e *Error) {
	for i := range n {
		err := reply(i)
		if err == nil {
			accepted = append(accepted, i)
			continue
		}
		re := replyError(name, StageRcpt, err)
		if re.dropsConnection() {
			return nil, refused, re
		}
		refused = append(refused, Refusal{Index: i, Err: re})
	}
	return accepted, refused, nil
}

// exchange says the commands of one transaction (see transact), one
// command per round trip, or grouped when the relay advertised PIPELINING
// (see exchangeWithPipelining).
func (s *Session) exchange(body []byte, from string, to []string, next Then) (accepted []int, refused []Refusal, e *Error) {
	name := s.relay.cfg.Name
	// SendTimeout bounds each transaction, not the connection's life: a
	// kept connection carries up to MaxMessagesPerConn of them.
	if err := s.sc.UpdateDeadline(s.relay.cfg.SendTimeout); err != nil {
		return nil, nil, replyError(name, StageConn, err)
	}
	if s.pipelining() {
		return s.exchangeWithPipelining(body, from, to, next)
	}
	if err := s.sc.Mail("<" + from + ">"); err != nil {
		return nil, nil, replyError(name, StageMail, err)
	}
	accepted, refused, e = rcptReplies(name, len(to), func(i int) error {
		return s.sc.Rcpt("<" + to[i] + ">")
	})
	if e != nil {
		return nil, refused, e
	}
	if len(accepted) == 0 {
		return nil, refused, nil
	}
	w, err := s.sc.Data()
	if err != nil {
		return nil, refused, replyError(name, StageData, err)
	}
	if _, err := w.Write(body); err != nil {
		_ = w.Close() // the write error is the one that matters
		return nil, refused, replyError(name, StageBody, err)
	}
	if err := w.Close(); err != nil {
		e := replyError(name, StageBody, err)
		e.dataEnd = true
		return nil, refused, e
	}
	return accepted, refused, nil
}

// resetAfterFailure sends RSET after a transaction that did not end in an
// accepted message: it keeps a rejected envelope out of the next
// transaction, and proves the connection still works. A failed RSET closes
// the connection.
func (s *Session) resetAfterFailure() {
	if s.sc == nil {
		return
	}
	if err := s.sc.Reset(); err != nil {
		s.relay.logger.Debug("smtp RSET after failed transaction failed; closing connection", "error", err)
		s.closeConn()
	}
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
	s.ahead = nil
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
