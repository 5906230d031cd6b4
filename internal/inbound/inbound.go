// Package inbound owns the SMTP server of the bounce domain: it accepts
// mail only for the return paths Postline sends from (bounce+<token>@Domain,
// as far as the injected TokenFunc accepts them) and for the feedback
// address (FeedbackLocalPart@Domain), parses each message with package
// bounce, gives every report the token of the address it came to (or, for
// the feedback address, of the returned original's Return-Path), and hands
// the reports to a Reports applier. It relays nothing: any other
// recipient is refused with 550 5.1.1.
//
// A message the applier could not take is answered 451 4.3.0, so the
// sending MTA retries it; a message that is no report is accepted and
// counted, never bounced. Bodies are never logged.
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

	"github.com/postline/postline/internal/bounce"
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
	return cfg
}

// Validate reports the first invalid field of cfg (after WithDefaults).
func (cfg Config) Validate() error {
	switch {
	case cfg.Domain == "" || strings.ContainsAny(cfg.Domain, "@ \t\r\n"):
		return fmt.Errorf("inbound config: Domain %q is not a domain", cfg.Domain)
	case cfg.FeedbackLocalPart == "" || strings.ContainsAny(cfg.FeedbackLocalPart, "@+ \t\r\n"):
		return fmt.Errorf("inbound config: FeedbackLocalPart %q is not a plain local part", cfg.FeedbackLocalPart)
	case cfg.MaxMessageBytes < 1 || cfg.MaxMessageBytes > bounce.MaxReportBytes:
		return fmt.Errorf("inbound config: MaxMessageBytes %d is not in 1..%d", cfg.MaxMessageBytes, bounce.MaxReportBytes)
	case cfg.MaxRecipients < 1:
		return fmt.Errorf("inbound config: MaxRecipients %d is below 1", cfg.MaxRecipients)
	case cfg.ReadTimeout <= 0 || cfg.WriteTimeout <= 0 || cfg.ShutdownTimeout <= 0 || cfg.ApplyTimeout <= 0:
		return fmt.Errorf("inbound config: ReadTimeout %v, WriteTimeout %v, ShutdownTimeout %v and ApplyTimeout %v must be positive",
			cfg.ReadTimeout, cfg.WriteTimeout, cfg.ShutdownTimeout, cfg.ApplyTimeout)
	}
	return nil
}

// TokenFunc extracts the token of a return path (bounce+<token>@domain),
// syntactically; ok is false for an address that is not one.
type TokenFunc func(address string) (token string, ok bool)

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
)

// Server is the bounce domain's SMTP server.
type Server struct {
	cfg     Config
	logger  *slog.Logger
	tokens  TokenFunc
	reports Reports
	srv     *smtp.Server

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
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, logger: logger, tokens: tokens, reports: reports, ready: make(chan struct{}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "postline", Subsystem: "inbound",
			Name: "messages_total", Help: "Messages whose data the bounce server read, by result."}, []string{"result"}),
		kinds: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "postline", Subsystem: "inbound",
			Name: "reports_total", Help: "Reports read from messages, by kind and source."}, []string{"kind", "source"}),
		rcpts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "postline", Subsystem: "inbound",
			Name: "recipients_total", Help: "RCPT commands, by result (bounce, feedback, refused)."}, []string{"result"}),
		parse: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "postline", Subsystem: "inbound",
			Name: "parse_seconds", Help: "Time to parse one message.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 8)}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{s.messages, s.kinds, s.rcpts, s.parse} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("inbound: register metrics: %w", err)
			}
		}
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
	go func() { served <- s.srv.Serve(ln) }()
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

type backend struct{ s *Server }

func (b backend) NewSession(*smtp.Conn) (smtp.Session, error) { return &session{s: b.s}, nil }

// session is one SMTP connection's transaction state.
type session struct {
	s      *Server
	tokens []string // the token of each bounce+ recipient
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
		se.s.rcpts.WithLabelValues("feedback").Inc()
		return nil
	}
	if token, ok := se.s.tokens(to); ok && token != "" {
		se.tokens = append(se.tokens, token)
		se.s.rcpts.WithLabelValues("bounce").Inc()
		return nil
	}
	se.s.rcpts.WithLabelValues("refused").Inc()
	return errRefused
}

func (se *session) Data(r io.Reader) error {
	s := se.s
	raw, err := io.ReadAll(r)
	if err != nil {
		if errors.Is(err, smtp.ErrDataTooLarge) {
			s.messages.WithLabelValues(ResultTooLarge).Inc()
			return smtp.ErrDataTooLarge
		}
		return err
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

func (se *session) Reset()        { se.tokens = nil }
func (se *session) Logout() error { return nil }
