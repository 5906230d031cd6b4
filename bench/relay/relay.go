// Package relay owns a throttling SMTP relay on loopback for benchmarks and
// tests of retry and pacing policies: a real go-smtp server on a TCP port
// that models a provider's limits and faults, with counters of what it did.
//
//   - capacity: a token bucket of Rate messages per second (Burst deep)
//     shared by all connections; an empty bucket answers 450 4.7.1 "rate
//     limit exceeded, try again in N seconds" at RCPT (or DATA), N being
//     the bucket's refill time;
//   - connections: beyond MaxConns open connections a new one gets 421 4.7.0
//     at the greeting and is closed; with HangUpAbove, connections get in
//     but only the oldest HangUpAbove open ones are served: a younger one is
//     hung up (421 4.7.0) at MAIL, Postfix's scenario;
//   - faults: a seeded share of transactions dropped with 421 4.4.2 at the
//     end of DATA, a seeded share answered 451 4.3.0 there without a
//     disconnect, and a share of recipient addresses rejected with 550
//     5.1.1, chosen by a hash so retries are rejected again.
//
// The bucket's rate can be changed while the relay runs (SetRate), as a
// provider that lowers a sender's limit does.
//
// Latency is modelled two ways: ReplyDelay before each MAIL, RCPT and
// final-dot reply (a relay's own work per command), RoundTripDelay before
// each write of replies (the network's, once per round trip). Replies are
// written when the relay has read all the input it has, so replies to
// pipelined commands (RFC 2920, advertised with Pipelining) share a write;
// the counters say how many commands, reply writes and reads each
// transaction took.
//
// Accepted messages are counted, time-stamped and their Message-IDs noted,
// then discarded: the relay delivers nothing. It is not a scripted test
// server (internal/smtptest is) and knows nothing of jobs, Kafka or the
// sender.
package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
	"golang.org/x/time/rate"
)

// shutdownTimeout bounds Close's wait for connection goroutines.
const shutdownTimeout = 5 * time.Second

// Relay is a running relay. Its methods are safe for concurrent use.
type Relay struct {
	cfg    Config
	logger *slog.Logger
	srv    *smtp.Server
	ln     net.Listener
	served chan struct{} // closed when Serve returned
	once   sync.Once

	mu    sync.Mutex
	lim   *rate.Limiter // nil: unlimited
	rng   *rand.Rand
	open  map[*trackedConn]struct{}
	seq   uint64 // connections admitted so far, for their age
	stats Stats
}

// Start validates cfg (after WithDefaults), listens on cfg.Addr and serves
// until Close. A nil logger discards logs.
func Start(cfg Config, logger *slog.Logger) (*Relay, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("relay: listen on %s: %w", cfg.Addr, err)
	}
	r := &Relay{
		cfg:    cfg,
		logger: logger,
		served: make(chan struct{}),
		open:   make(map[*trackedConn]struct{}),
	}
	r.ln = &listener{Listener: ln, r: r}
	r.resetLocked(time.Now())

	r.srv = smtp.NewServer(backend{r})
	r.srv.Domain = cfg.Domain
	r.srv.ReadTimeout = cfg.IdleTimeout
	r.srv.WriteTimeout = 10 * time.Second
	r.srv.MaxRecipients = 100
	r.srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelDebug)

	go func() {
		defer close(r.served)
		_ = r.srv.Serve(r.ln) // returns when Close closes the listener
	}()
	logger.Info("relay listening", "addr", r.Addr(), "rate", cfg.Rate, "burst", cfg.Burst,
		"max_conns", cfg.MaxConns, "hang_up_above", cfg.HangUpAbove,
		"transient_drop", cfg.TransientDrop, "transient_reply", cfg.TransientReply, "permanent_reject", cfg.PermanentReject, "seed", cfg.Seed,
		"reply_delay", cfg.ReplyDelay, "round_trip_delay", cfg.RoundTripDelay, "pipelining", cfg.Pipelining)
	return r, nil
}

// Addr returns the host:port the relay listens on.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Host returns the IP address the relay listens on.
func (r *Relay) Host() string { return r.ln.Addr().(*net.TCPAddr).IP.String() }

// Port returns the TCP port the relay listens on.
func (r *Relay) Port() int { return r.ln.Addr().(*net.TCPAddr).Port }

// Config returns the relay's configuration, defaults filled in.
func (r *Relay) Config() Config { return r.cfg }

// Close stops accepting, closes every connection without a reply and waits
// for the connection goroutines. Later calls return nil.
func (r *Relay) Close() error {
	var err error
	r.once.Do(func() {
		_ = r.ln.Close() // makes Serve return; its error says so
		<-r.served
		r.dropConnections()
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		// The listener is closed already, so Shutdown only waits; its
		// listener error is expected.
		if serr := r.srv.Shutdown(ctx); errors.Is(serr, context.DeadlineExceeded) {
			err = fmt.Errorf("relay: connection goroutines did not stop within %s", shutdownTimeout)
		}
	})
	return err
}

// Stats returns a snapshot of the counters since Start or the last Reset.
func (r *Relay) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Open = len(r.open)
	s.AcceptedAt = append([]time.Time(nil), r.stats.AcceptedAt...)
	s.AcceptedIDs = append([]string(nil), r.stats.AcceptedIDs...)
	s.ThrottledAt = append([]time.Time(nil), r.stats.ThrottledAt...)
	s.RefusedAt = append([]time.Time(nil), r.stats.RefusedAt...)
	s.RateChanges = append([]RateChange(nil), r.stats.RateChanges...)
	return s
}

// SetRate changes the token bucket to perSecond messages per second and
// burst tokens from now on, as a provider that lowers or restores a
// sender's limit does; perSecond 0 makes the relay unlimited. Tokens
// already in the bucket stay, capped at the new burst; a relay that was
// unlimited gets a full bucket. Reset goes back to the Config's rate. The
// change is recorded in Stats.RateChanges.
func (r *Relay) SetRate(perSecond float64, burst int) error {
	switch {
	case math.IsNaN(perSecond) || perSecond < 0 || math.IsInf(perSecond, 1):
		return fmt.Errorf("relay: SetRate: rate %v must be 0 (unlimited) or a positive number", perSecond)
	case perSecond > 0 && burst < 1:
		return fmt.Errorf("relay: SetRate: burst %d must be at least 1", burst)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	switch {
	case perSecond == 0:
		r.lim = nil
	case r.lim == nil:
		r.lim = rate.NewLimiter(rate.Limit(perSecond), burst)
	default:
		r.lim.SetLimitAt(now, rate.Limit(perSecond))
		r.lim.SetBurstAt(now, burst)
	}
	r.stats.RateChanges = append(r.stats.RateChanges, RateChange{At: now, Rate: perSecond, Burst: burst})
	r.logger.Info("relay rate changed", "rate", perSecond, "burst", burst)
	return nil
}

// Reset zeroes the counters, refills the token bucket and reseeds the drop
// generator, so one relay can serve several runs that start alike. Open
// connections stay open; PeakOpen restarts from their number.
func (r *Relay) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resetLocked(time.Now())
}

func (r *Relay) resetLocked(now time.Time) {
	r.stats = Stats{Since: now, PeakOpen: len(r.open)}
	r.lim = nil
	if r.cfg.Rate > 0 && !math.IsInf(r.cfg.Rate, 1) {
		r.lim = rate.NewLimiter(rate.Limit(r.cfg.Rate), r.cfg.Burst)
	}
	r.rng = rand.New(rand.NewPCG(uint64(r.cfg.Seed), 0x9e3779b97f4a7c15))
}

// admit registers a new connection, or refuses it at the greeting when
// MaxConns are open; it returns nil for a refused connection.
func (r *Relay) admit(c net.Conn) *trackedConn {
	r.mu.Lock()
	r.stats.Connections++
	if r.cfg.MaxConns > 0 && len(r.open) >= r.cfg.MaxConns {
		r.stats.Refused++
		r.stats.RefusedAt = append(r.stats.RefusedAt, time.Now())
		r.mu.Unlock()
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		line := fmt.Sprintf("421 4.7.0 %s Error: too many connections from %s\r\n", r.cfg.Domain, host)
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = io.WriteString(c, line)
		_ = c.Close()
		r.logger.Debug("relay refused a connection", "reason", "max_conns", "limit", r.cfg.MaxConns)
		return nil
	}
	r.seq++
	tc := &trackedConn{Conn: c, r: r, seq: r.seq}
	r.open[tc] = struct{}{}
	r.stats.PeakOpen = max(r.stats.PeakOpen, len(r.open))
	r.mu.Unlock()
	return tc
}

func (r *Relay) forget(tc *trackedConn) {
	r.mu.Lock()
	delete(r.open, tc)
	r.mu.Unlock()
}

func (r *Relay) dropConnections() {
	r.mu.Lock()
	conns := make([]*trackedConn, 0, len(r.open))
	for c := range r.open {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// shouldHangUp counts and reports a session to hang up on at MAIL: one
// that has at least HangUpAbove older connections open beside it.
func (r *Relay) shouldHangUp(c net.Conn) bool {
	if r.cfg.HangUpAbove <= 0 {
		return false
	}
	tc, ok := c.(*trackedConn)
	if !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.open) <= r.cfg.HangUpAbove {
		return false
	}
	older := 0
	for o := range r.open {
		if o.seq < tc.seq {
			older++
		}
	}
	if older < r.cfg.HangUpAbove {
		return false
	}
	r.stats.HungUp++
	return true
}

// count updates the counters with f.
func (r *Relay) count(f func(*Stats)) {
	r.mu.Lock()
	f(&r.stats)
	r.mu.Unlock()
}

// reject counts a permanently rejected recipient.
func (r *Relay) reject() {
	r.mu.Lock()
	r.stats.PermanentRejects++
	r.mu.Unlock()
}

// takeToken takes a token from the bucket, or counts a throttled command
// and returns the time until a token will be there.
func (r *Relay) takeToken() (wait time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lim == nil {
		return 0, true
	}
	now := time.Now()
	res := r.lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		r.stats.Throttled++
		r.stats.ThrottledAt = append(r.stats.ThrottledAt, now)
		return d, false
	}
	return 0, true
}

// verdict is how a transaction that got past the bucket ends.
type verdict int

const (
	accept    verdict = iota
	drop              // 421 4.4.2 and disconnect
	transient         // the transient reply, connection kept
)

// finish decides a transaction that got past the bucket with one draw of
// the seeded generator, recording id when it is accepted.
func (r *Relay) finish(id string) verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cfg.TransientDrop > 0 || r.cfg.TransientReply > 0 {
		switch x := r.rng.Float64(); {
		case x < r.cfg.TransientDrop:
			r.stats.TransientDrops++
			return drop
		case x < r.cfg.TransientDrop+r.cfg.TransientReply:
			r.stats.TransientReplies++
			return transient
		}
	}
	r.stats.Accepted++
	r.stats.AcceptedAt = append(r.stats.AcceptedAt, time.Now())
	r.stats.AcceptedIDs = append(r.stats.AcceptedIDs, id)
	return accept
}

// messageID is the Message-ID of a header without its angle brackets, so
// benchmarks can match an accepted message to the job that produced it.
func messageID(h textproto.MIMEHeader) string {
	return strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(h.Get("Message-ID")), "<"), ">")
}

// throttleError is the reply to a command that found the bucket empty.
func (r *Relay) throttleError(wait time.Duration) *smtp.SMTPError {
	secs := max(1, int(math.Ceil(wait.Seconds())))
	return &smtp.SMTPError{
		Code:         r.cfg.ThrottleCode,
		EnhancedCode: parseEnhanced(r.cfg.ThrottleEnhanced),
		Message:      strings.ReplaceAll(r.cfg.ThrottleText, SecondsPlaceholder, strconv.Itoa(secs)),
	}
}

// hangUp writes a 421 reply and closes the connection, the way a relay
// that sheds load does. The connection stops counting as open before the
// reply goes out, so a client that redials at once is not refused for it.
// go-smtp writes the returned error to the closed connection, which fails
// harmlessly.
func hangUp(c *smtp.Conn, enhanced smtp.EnhancedCode, text string) error {
	nc := c.Conn()
	if tc, ok := nc.(*trackedConn); ok {
		tc.release()
	}
	_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(nc, "421 %d.%d.%d %s\r\n", enhanced[0], enhanced[1], enhanced[2], text)
	_ = c.Close()
	return &smtp.SMTPError{Code: 421, EnhancedCode: enhanced, Message: text}
}

func parseEnhanced(s string) smtp.EnhancedCode {
	var ec smtp.EnhancedCode
	for i, p := range strings.SplitN(s, ".", 3) {
		n, err := strconv.Atoi(p)
		if err != nil {
			return smtp.NoEnhancedCode
		}
		ec[i] = n
	}
	return ec
}

type backend struct{ r *Relay }

func (b backend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	return &session{r: b.r, c: c}, nil
}

// session is one SMTP session; go-smtp calls it from one goroutine.
type session struct {
	r      *Relay
	c      *smtp.Conn
	tokend bool // this transaction took its token (AtRcpt)
}

var _ smtp.Session = (*session)(nil)

// delay waits the configured ReplyDelay before a reply.
func (s *session) delay() {
	if d := s.r.cfg.ReplyDelay; d > 0 {
		time.Sleep(d) // the modelled latency itself, not a wait for an event
	}
}

func (s *session) Mail(string, *smtp.MailOptions) error {
	s.r.count(func(st *Stats) { st.Transactions++; st.EnvelopeCommands++ })
	s.delay()
	if s.r.shouldHangUp(s.c.Conn()) {
		s.r.logger.Debug("relay hung up a session", "reason", "hang_up_above", "limit", s.r.cfg.HangUpAbove)
		return hangUp(s.c, smtp.EnhancedCode{4, 7, 0},
			s.r.cfg.Domain+" Error: too many connections, closing transmission channel")
	}
	return nil
}

func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.r.count(func(st *Stats) { st.EnvelopeCommands++ })
	s.delay()
	if s.r.cfg.Rejects(to) {
		s.r.reject()
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1},
			Message: "Recipient address rejected: User unknown in local recipient table"}
	}
	if s.r.cfg.ThrottleAt == AtRcpt && !s.tokend {
		wait, ok := s.r.takeToken()
		if !ok {
			return s.r.throttleError(wait)
		}
		s.tokend = true
	}
	return nil
}

func (s *session) Data(body io.Reader) error {
	s.r.count(func(st *Stats) { st.EnvelopeCommands++ })
	// A malformed header only costs the Message-ID: the relay is not a
	// content filter.
	br := bufio.NewReader(body)
	header, _ := textproto.NewReader(br).ReadMIMEHeader()
	if _, err := io.Copy(io.Discard, br); err != nil {
		return err
	}
	s.delay()
	if s.r.cfg.ThrottleAt == AtData {
		if wait, ok := s.r.takeToken(); !ok {
			return s.r.throttleError(wait)
		}
	}
	switch s.r.finish(messageID(header)) {
	case drop:
		return hangUp(s.c, smtp.EnhancedCode{4, 4, 2}, s.r.cfg.Domain+" Connection dropped, closing transmission channel")
	case transient:
		return &smtp.SMTPError{Code: s.r.cfg.TransientReplyCode, EnhancedCode: parseEnhanced(s.r.cfg.TransientReplyEnhanced),
			Message: s.r.cfg.TransientReplyText}
	}
	return nil
}

func (s *session) Reset() { s.tokend = false }

func (s *session) Logout() error { return nil }

// listener admits or refuses each connection before go-smtp sees it, so a
// refused connection never gets a 220 greeting.
type listener struct {
	net.Listener
	r *Relay
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := l.r.admit(c); tc != nil {
			return tc, nil
		}
	}
}

// pipeliningLine is how go-smtp, which always offers PIPELINING, lists it
// in its EHLO reply: one write, right after the greeting line.
const pipeliningLine = "250-PIPELINING\r\n"

// trackedConn leaves the relay's open set when closed, by either side. It
// holds the replies go-smtp writes (one write per line) until go-smtp next
// reads from the connection, which it does only when it has processed all
// the input it read: a client's pipelined commands get their replies in one
// write, after one RoundTripDelay.
type trackedConn struct {
	net.Conn
	r    *Relay
	seq  uint64 // admission order: lower is older
	once sync.Once

	mu      sync.Mutex
	pending []byte // replies not written yet
	closed  bool
}

// Write holds p for the next flush; it leaves PIPELINING out of the EHLO
// reply unless the relay advertises it.
func (c *trackedConn) Write(p []byte) (int, error) {
	if !c.r.cfg.Pipelining && string(p) == pipeliningLine {
		return len(p), nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	c.pending = append(c.pending, p...)
	return len(p), nil
}

// Read writes the replies held so far, then reads.
func (c *trackedConn) Read(p []byte) (int, error) {
	if err := c.flush(c.r.cfg.RoundTripDelay); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.r.count(func(st *Stats) { st.Reads++ })
	}
	return n, err
}

// flush writes the replies held, after wait.
func (c *trackedConn) flush(wait time.Duration) error {
	c.mu.Lock()
	out := c.pending
	c.pending = nil
	c.mu.Unlock()
	if len(out) == 0 {
		return nil
	}
	if wait > 0 {
		time.Sleep(wait) // the modelled latency itself, not a wait for an event
	}
	c.r.count(func(st *Stats) { st.ReplyWrites++ })
	_, err := c.Conn.Write(out)
	return err
}

// Close writes the replies held (a 421 before a hang-up) and closes.
func (c *trackedConn) Close() error {
	_ = c.flush(0) // a peer that is gone cannot take its last reply anyway
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	err := c.Conn.Close()
	c.release()
	return err
}

// release removes the connection from the open set, once.
func (c *trackedConn) release() { c.once.Do(func() { c.r.forget(c) }) }
