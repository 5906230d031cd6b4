// Package inbound owns the SMTP server of the bounce domain: it accepts
// mail only for the return paths Postline sends from (bounce+<token>@Domain,
// as far as the injected TokenFunc accepts them) and for the feedback
// address (FeedbackLocalPart@Domain), parses each message with package
// bounce, gives every report the token of the address it came to (or, for
// the feedback address, of the returned original's Return-Path), and hands
// the reports to a Reports applier. When configured (Config.Unsubscribes)
// it also takes the mail sent to the unsubscribe addresses of the
// List-Unsubscribe headers, unsubscribe+<token>@Domain: such a message,
// whatever it says, unsubscribes its token's recipient, and is not read as
// a report. It relays nothing: any other recipient is refused with 550
// 5.1.1.
//
// A message the applier could not take is answered 451 4.3.0, so the
// sending MTA retries it; a message that is no report is accepted and
// counted, never bounced. Bodies are never logged.
//
// The server faces the internet, so what it holds is bounded by its
// configuration, not by how many clients connect or what they send. At
// most MaxSessions sessions are open at once, and at most
// MaxSessionsPerClient from one client (an IPv4 address or an IPv6 /64):
// a connection over either is greeted 421 4.7.0 and closed before a
// session exists (package admission counts them). Within a session a
// message is read as it streams in: only its first MaxParseBytes are held
// and parsed, the rest is counted and dropped, and one over
// MaxMessageBytes is answered 552 once its end is read, never held whole.
// A report keeps what the parser needs at its start (RFC 3464 and RFC 5965
// put the human-readable part and the machine-readable status before the
// returned original, and package bounce reads only the original's header),
// so the message data held in memory at once is at most MaxSessions x
// MaxParseBytes (25 MiB by default), plus the parser's copies of the parts
// it keeps, each no larger. A byte budget that sessions wait on, or a spool
// to disk, would bound it as well, but the first lets a few slow uploads
// stall every report behind them and the second trades memory for disk
// and a cleanup; dropping what no report needs costs nothing.
package inbound

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/admission"
	"github.com/postline/postline/internal/bounce"
	"github.com/postline/postline/internal/configerr"
	"github.com/postline/postline/internal/metricreg"
	"github.com/postline/postline/internal/report"
)

// Defaults of Config.
const (
	DefaultAddr              = ":2525"
	DefaultFeedbackLocalPart = "fbl"
	DefaultMaxMessageBytes   = bounce.MaxReportBytes
	DefaultMaxRecipients     = 50
	DefaultReadTimeout       = time.Minute
	DefaultWriteTimeout      = time.Minute
	DefaultShutdownTimeout   = 30 * time.Second
	DefaultApplyTimeout      = 30 * time.Second
	DefaultMaxSessions       = 100
	// DefaultMaxSessionsPerClient leaves room for an MTA that delivers on
	// several connections at once, and keeps ten clients from taking every
	// session.
	DefaultMaxSessionsPerClient = 10
	// DefaultMaxParseBytes holds the machine-readable parts of any report
	// seen in practice: a delivery status of MaxRecipients recipients is
	// well under 64 KiB, and bounce reads at most 64 KiB of the original
	// and 256 KiB of a prose bounce's text.
	DefaultMaxParseBytes = 256 << 10
)

// Config configures a Server.
type Config struct {
	// Addr is the TCP address to listen on; port 0 picks a free port (see
	// Server.Addr). Defaults to DefaultAddr (:2525).
	Addr string
	// Domain is the bounce domain whose addresses the server accepts.
	// Required.
	Domain string
	// FeedbackLocalPart is the local part of the address complaint
	// (ARF) reports are sent to. Defaults to DefaultFeedbackLocalPart (fbl).
	FeedbackLocalPart string
	// MaxMessageBytes is the largest message accepted (552 over it); at
	// most bounce.MaxReportBytes. Defaults to DefaultMaxMessageBytes (2 MiB).
	MaxMessageBytes int64
	// MaxRecipients is the most RCPT commands accepted per message.
	// Defaults to DefaultMaxRecipients (50).
	MaxRecipients int
	// ReadTimeout and WriteTimeout bound each read from and write to a
	// client. Default to DefaultReadTimeout and DefaultWriteTimeout (1m).
	ReadTimeout, WriteTimeout time.Duration
	// ShutdownTimeout is how long Run waits for open sessions after its
	// context ends before it closes them. Defaults to
	// DefaultShutdownTimeout (30s).
	ShutdownTimeout time.Duration
	// ApplyTimeout bounds one call of Reports.ApplyReturned; past it the
	// message is answered 451 and the sender retries. Defaults to
	// DefaultApplyTimeout (30s).
	ApplyTimeout time.Duration
	// TLSConfig, when set, offers STARTTLS. Defaults to none.
	TLSConfig *tls.Config
	// Hostname is the name the server greets with. Defaults to Domain.
	Hostname string
	// MaxSessions is the most SMTP sessions open at once; a connection
	// over it is greeted 421 4.7.0 and closed. Defaults to
	// DefaultMaxSessions (100).
	MaxSessions int
	// MaxSessionsPerClient is the most sessions open at once from one
	// client: an IPv4 address, or the /64 of an IPv6 address. Defaults to
	// DefaultMaxSessionsPerClient (10), or MaxSessions if that is lower.
	MaxSessionsPerClient int
	// MaxParseBytes is how much of a message's start is held in memory
	// and parsed; the rest, up to MaxMessageBytes, is read and dropped.
	// MaxSessions x MaxParseBytes bounds the message data held at once.
	// Defaults to DefaultMaxParseBytes (256 KiB), or MaxMessageBytes if
	// that is lower.
	MaxParseBytes int64
	// Unsubscribes takes the messages sent to the mailto addresses of the
	// List-Unsubscribe headers. Defaults to none: those addresses are
	// refused like any other.
	Unsubscribes Unsubscribes
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	cfg.Addr = cmp.Or(cfg.Addr, DefaultAddr)
	cfg.FeedbackLocalPart = cmp.Or(cfg.FeedbackLocalPart, DefaultFeedbackLocalPart)
	cfg.MaxMessageBytes = cmp.Or(cfg.MaxMessageBytes, DefaultMaxMessageBytes)
	cfg.MaxRecipients = cmp.Or(cfg.MaxRecipients, DefaultMaxRecipients)
	cfg.ReadTimeout = cmp.Or(cfg.ReadTimeout, DefaultReadTimeout)
	cfg.WriteTimeout = cmp.Or(cfg.WriteTimeout, DefaultWriteTimeout)
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, DefaultShutdownTimeout)
	cfg.ApplyTimeout = cmp.Or(cfg.ApplyTimeout, DefaultApplyTimeout)
	cfg.Hostname = cmp.Or(cfg.Hostname, cfg.Domain)
	cfg.MaxSessions = cmp.Or(cfg.MaxSessions, DefaultMaxSessions)
	cfg.MaxSessionsPerClient = cmp.Or(cfg.MaxSessionsPerClient, min(DefaultMaxSessionsPerClient, max(cfg.MaxSessions, 1)))
	cfg.MaxParseBytes = cmp.Or(cfg.MaxParseBytes, min(DefaultMaxParseBytes, max(cfg.MaxMessageBytes, 1)))
	return cfg
}

// Validate reports the first invalid field of cfg (after WithDefaults).
func (cfg Config) Validate() error {
	switch {
	case cfg.Domain == "" || strings.ContainsAny(cfg.Domain, "@ \t\r\n"):
		return configerr.Errorf("Domain", "inbound config: Domain %q is not a domain", cfg.Domain)
	case cfg.FeedbackLocalPart == "" || strings.ContainsAny(cfg.FeedbackLocalPart, "@+ \t\r\n"):
		return configerr.Errorf("FeedbackLocalPart", "inbound config: FeedbackLocalPart %q is not a plain local part", cfg.FeedbackLocalPart)
	case cfg.MaxMessageBytes < 1 || cfg.MaxMessageBytes > bounce.MaxReportBytes:
		return configerr.Errorf("MaxMessageBytes", "inbound config: MaxMessageBytes %d is not in 1..%d", cfg.MaxMessageBytes, bounce.MaxReportBytes)
	case cfg.MaxRecipients < 1:
		return configerr.Errorf("MaxRecipients", "inbound config: MaxRecipients %d is below 1", cfg.MaxRecipients)
	case cfg.ReadTimeout <= 0 || cfg.WriteTimeout <= 0 || cfg.ShutdownTimeout <= 0 || cfg.ApplyTimeout <= 0:
		return configerr.Errorf("ReadTimeout", "inbound config: ReadTimeout %v, WriteTimeout %v, ShutdownTimeout %v and ApplyTimeout %v must be positive",
			cfg.ReadTimeout, cfg.WriteTimeout, cfg.ShutdownTimeout, cfg.ApplyTimeout)
	case cfg.MaxSessions < 1:
		return configerr.Errorf("MaxSessions", "inbound config: MaxSessions %d is below 1", cfg.MaxSessions)
	case cfg.MaxSessionsPerClient < 1 || cfg.MaxSessionsPerClient > cfg.MaxSessions:
		return configerr.Errorf("MaxSessionsPerClient", "inbound config: MaxSessionsPerClient %d is not in 1..MaxSessions (%d)", cfg.MaxSessionsPerClient, cfg.MaxSessions)
	case cfg.MaxParseBytes < 1 || cfg.MaxParseBytes > cfg.MaxMessageBytes:
		return configerr.Errorf("MaxParseBytes", "inbound config: MaxParseBytes %d is not in 1..MaxMessageBytes (%d)", cfg.MaxParseBytes, cfg.MaxMessageBytes)
	}
	return nil
}

// TokenFunc extracts the token of a return path (bounce+<token>@domain),
// syntactically; ok is false for an address that is not one.
type TokenFunc func(address string) (token string, ok bool)

// Unsubscribes takes unsubscribes by mail: a message to an unsubscribe
// address unsubscribes its token's recipient, whatever it says (RFC 2369's
// mailto). Safe for concurrent use.
type Unsubscribes interface {
	// TokenOf returns the token of an unsubscribe address of the bounce
	// domain, checking the syntax only; ok is false for any other address.
	TokenOf(address string) (token string, ok bool)
	// Unsubscribe takes the unsubscribe of token. A forged or malformed
	// token is no error (the message is taken and changes nothing); an
	// error makes the server answer 451, so that the sender retries.
	Unsubscribe(ctx context.Context, token string) error
}

// Reports takes the reports of one message. An error makes the server
// answer 451, so that the sender retries the message later.
type Reports interface {
	ApplyReturned(ctx context.Context, reports []report.Report) error
}

// The results of a message (postline_inbound_messages_total{result}).
const (
	ResultReport     = "report"
	ResultNotReport  = "not_report"
	ResultUnreadable = "unreadable"
	ResultTooLarge   = "too_large"
	ResultApplyError = "apply_error"
	// ResultUnsubscribe: a message to unsubscribe addresses only, taken
	// without reading it as a report.
	ResultUnsubscribe = "unsubscribe"
)

// SessionsLimit is the limit label of the session limiter's metrics
// (postline_admission_open and postline_admission_refused_total).
const SessionsLimit = "smtp_sessions"

// Server is the bounce domain's SMTP server.
type Server struct {
	cfg     Config
	logger  *slog.Logger
	tokens  TokenFunc
	reports Reports
	srv     *smtp.Server
	limiter *admission.Limiter

	ready   chan struct{}
	started atomic.Bool
	mu      sync.Mutex
	ln      net.Listener

	ctx    context.Context // ends when Run's context does
	cancel context.CancelFunc

	messages *prometheus.CounterVec
	kinds    *prometheus.CounterVec
	rcpts    *prometheus.CounterVec
	parse    prometheus.Histogram
	cut      prometheus.Counter
}

// New returns a Server; Run starts it. reg may be nil (no metrics).
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer, tokens TokenFunc, reports Reports) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if tokens == nil || reports == nil {
		return nil, errors.New("inbound: TokenFunc and Reports are required")
	}
	set := metricreg.NewExclusiveSet(reg, "inbound")
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, logger: logger, tokens: tokens, reports: reports, ready: make(chan struct{}),
		messages: set.CounterVec("messages_total", "Messages whose data the bounce server read, by result.", "result"),
		kinds:    set.CounterVec("reports_total", "Reports read from messages, by kind and source.", "kind", "source"),
		rcpts:    set.CounterVec("recipients_total", "RCPT commands, by result (bounce, feedback, unsubscribe, refused).", "result"),
		parse:    set.Histogram("parse_seconds", "Time to parse one message.", prometheus.ExponentialBuckets(0.0001, 4, 8)),
		cut:      set.Counter("messages_cut_total", "Messages longer than MaxParseBytes, of which only the start was held and parsed."),
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("inbound: register metrics: %w", err)
	}
	var err error
	if s.limiter, err = admission.New(admission.Config{Name: SessionsLimit, Max: cfg.MaxSessions,
		MaxPerClient: cfg.MaxSessionsPerClient}, reg); err != nil {
		return nil, fmt.Errorf("inbound: %w", err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	srv := smtp.NewServer(backend{s})
	srv.Addr = cfg.Addr
	srv.Domain = cfg.Hostname
	srv.MaxMessageBytes = cfg.MaxMessageBytes
	srv.MaxRecipients = cfg.MaxRecipients
	srv.ReadTimeout = cfg.ReadTimeout
	srv.WriteTimeout = cfg.WriteTimeout
	srv.TLSConfig = cfg.TLSConfig
	srv.ErrorLog = slogLogger{logger}
	s.srv = srv
	return s, nil
}

// slogLogger passes go-smtp's internal errors to the logger.
type slogLogger struct{ l *slog.Logger }

func (l slogLogger) Printf(format string, v ...any) {
	l.l.Warn("smtp server", "error", fmt.Sprintf(format, v...))
}
func (l slogLogger) Println(v ...any) { l.l.Warn("smtp server", "error", fmt.Sprint(v...)) }

// Addr returns the address the server listens on, once Run has bound it
// (nil before).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Ready is closed once the server listens.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Run listens and serves until ctx ends, then stops accepting, waits up to
// ShutdownTimeout for open sessions and closes the rest. It returns nil
// after a shutdown on ctx. A Server runs once.
func (s *Server) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("inbound: Run called twice")
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("inbound: listen on %s: %w", s.cfg.Addr, err)
	}
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	close(s.ready)
	s.logger.Info("bounce server listening", "addr", ln.Addr().String(), "domain", s.cfg.Domain)

	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(s.limiter.Listener(ln, s.refuse)) }()
	select {
	case err := <-served:
		s.cancel()
		_ = s.srv.Close()
		return fmt.Errorf("inbound: serve: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err = s.srv.Shutdown(shut)
	s.cancel() // ends applies still running
	if err != nil {
		_ = s.srv.Close()
	}
	<-served
	return nil
}

// refuse greets a connection over a session limit with 421 4.7.0; the
// limiter closes it. A new connection's send buffer is empty, so the write
// does not wait on the client; the deadline is there all the same.
func (s *Server) refuse(c net.Conn, err error) {
	msg := "Too many sessions, try again later"
	if errors.Is(err, admission.ErrClientFull) {
		msg = "Too many sessions from your address, try again later"
	}
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(c, "421 4.7.0 %s %s\r\n", s.cfg.Hostname, msg)
	s.logger.Debug("session refused", "reason", err.Error())
}

type backend struct{ s *Server }

func (b backend) NewSession(*smtp.Conn) (smtp.Session, error) { return &session{s: b.s}, nil }

// session is one SMTP connection's transaction state.
type session struct {
	s      *Server
	tokens []string // the token of each bounce+ recipient
	// reports: a recipient that takes reports (a bounce+ or the feedback
	// address) was accepted; without one the message is not parsed.
	reports bool
	unsubs  []string // the token of each unsubscribe recipient
}

var errRefused = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "No such recipient here"}

var errTemporary = &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "Report not recorded, try again later"}

func (se *session) Mail(string, *smtp.MailOptions) error { return nil }

func (se *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	local, domain, ok := strings.Cut(to, "@")
	if !ok || !strings.EqualFold(domain, se.s.cfg.Domain) {
		se.s.rcpts.WithLabelValues("refused").Inc()
		return errRefused
	}
	if strings.EqualFold(local, se.s.cfg.FeedbackLocalPart) {
		se.reports = true
		se.s.rcpts.WithLabelValues("feedback").Inc()
		return nil
	}
	if u := se.s.cfg.Unsubscribes; u != nil {
		if token, ok := u.TokenOf(to); ok && token != "" {
			se.unsubs = append(se.unsubs, token)
			se.s.rcpts.WithLabelValues("unsubscribe").Inc()
			return nil
		}
	}
	if token, ok := se.s.tokens(to); ok && token != "" {
		se.tokens = append(se.tokens, token)
		se.reports = true
		se.s.rcpts.WithLabelValues("bounce").Inc()
		return nil
	}
	se.s.rcpts.WithLabelValues("refused").Inc()
	return errRefused
}

func (se *session) Data(r io.Reader) error {
	s := se.s
	raw, cut, err := readHead(r, s.cfg.MaxParseBytes)
	if err != nil {
		if errors.Is(err, smtp.ErrDataTooLarge) {
			s.messages.WithLabelValues(ResultTooLarge).Inc()
			return smtp.ErrDataTooLarge
		}
		return err
	}
	if cut {
		s.cut.Inc()
	}
	if len(se.unsubs) > 0 {
		if err := se.unsubscribe(); err != nil {
			return err
		}
		if !se.reports {
			s.messages.WithLabelValues(ResultUnsubscribe).Inc()
			return nil
		}
	}
	start := time.Now()
	res, err := bounce.Parse(raw)
	s.parse.Observe(time.Since(start).Seconds())
	switch {
	case errors.Is(err, bounce.ErrTooLarge):
		s.messages.WithLabelValues(ResultTooLarge).Inc()
		return smtp.ErrDataTooLarge
	case err != nil:
		s.messages.WithLabelValues(ResultUnreadable).Inc()
		// The parser's error quotes the message's header: not logged.
		s.logger.Info("unreadable message to the bounce domain", "bytes", len(raw))
		return nil
	case res.Type == bounce.TypeNotReport:
		s.messages.WithLabelValues(ResultNotReport).Inc()
		return nil
	}

	// A message to a bounce+ address is about that address's mail and
	// recipient; one to the feedback address names its mail by the
	// returned original's return path.
	// Postline sends each recipient from its own return path, so a report
	// comes to one; should a server combine several, the first names it.
	var token string
	if len(se.tokens) > 0 {
		token = se.tokens[0]
	} else if t, ok := s.tokens(res.ReturnPath); ok && res.ReturnPath != "" {
		token = t
	}
	reports := res.Reports
	for i := range reports {
		reports[i].Token = token
		s.kinds.WithLabelValues(string(reports[i].Kind), reports[i].Source).Inc()
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
	defer cancel()
	if err := s.reports.ApplyReturned(ctx, reports); err != nil {
		s.messages.WithLabelValues(ResultApplyError).Inc()
		s.logger.Warn("reports not applied; the sender will retry", "type", string(res.Type), "reports", len(reports), "error", err)
		return errTemporary
	}
	s.messages.WithLabelValues(ResultReport).Inc()
	s.logger.Debug("reports applied", "type", string(res.Type), "reports", len(reports), "token", token != "")
	return nil
}

// unsubscribe takes the unsubscribes of the message's unsubscribe
// recipients; a failure answers the whole message 451 (taking one again is
// harmless).
func (se *session) unsubscribe() error {
	s := se.s
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
	defer cancel()
	for _, token := range se.unsubs {
		if err := s.cfg.Unsubscribes.Unsubscribe(ctx, token); err != nil {
			s.messages.WithLabelValues(ResultApplyError).Inc()
			// Neither the token nor its address is logged.
			s.logger.Warn("unsubscribe not applied; the sender will retry", "unsubscribes", len(se.unsubs), "error", err)
			return errTemporary
		}
	}
	return nil
}

// readHead reads r to its end and returns its first n bytes, and whether
// there was more. The buffer grows with what arrives, never past n; what
// follows is read into a small buffer and dropped, so that the length
// limit of r (go-smtp's MaxMessageBytes) is still enforced on the whole.
func readHead(r io.Reader, n int64) (head []byte, cut bool, err error) {
	head = make([]byte, 0, min(n, 32<<10))
	for int64(len(head)) < n {
		if len(head) == cap(head) {
			grown := make([]byte, len(head), min(2*int64(cap(head)), n))
			copy(grown, head)
			head = grown
		}
		m, err := r.Read(head[len(head):cap(head)])
		head = head[:len(head)+m]
		if err == io.EOF {
			return head, false, nil
		}
		if err != nil {
			return nil, false, err
		}
	}
	rest, err := io.Copy(io.Discard, r)
	if err != nil {
		return nil, false, err
	}
	return head, rest > 0, nil
}

func (se *session) Reset()        { se.tokens, se.unsubs, se.reports = nil, nil, false }
func (se *session) Logout() error { return nil }
