package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/admission"
	"github.com/postline/postline/internal/config"
	"github.com/postline/postline/internal/eventstream"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/inbound"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/ops"
	"github.com/postline/postline/internal/outcome"
	"github.com/postline/postline/internal/pgpool"
	"github.com/postline/postline/internal/providerhook"
	"github.com/postline/postline/internal/returnpath"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/supervisor"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/unsubscribe"
)

// run starts the receiver and returns when ctx is cancelled and it has
// shut down, or when it fails.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	var s settings
	if err := config.Load(&s, "bounce-receiver", args, getenv, stdout); err != nil {
		return err
	}
	logger, err := ops.NewLogger(stdout, s.LogLevel)
	if err != nil {
		return err
	}
	keys, err := s.keys()
	if err != nil {
		return err
	}
	rules, tlsConfig, err := s.rulesAndTLS()
	if err != nil {
		return err
	}
	if s.ShutdownTimeout <= 0 {
		return fmt.Errorf("setting POSTLINE_SHUTDOWN_TIMEOUT: %s must be positive", s.ShutdownTimeout)
	}
	reg := ops.NewRegistry()
	cluster, err := s.Kafka.Cluster("bounce-receiver")
	if err != nil {
		return err
	}
	pool, err := pgpool.New(ctx, pgpool.Config{URL: s.DatabaseURL, MaxConns: s.DatabaseMaxConns}, logger)
	if err != nil {
		return fmt.Errorf("setting POSTLINE_DATABASE_URL: %w", err)
	}
	defer pool.Close()
	store, err := idempotency.New(idempotency.Config{Owner: "bounce-receiver"}, pool, logger, reg)
	if err != nil {
		return err
	}
	lists, err := suppression.New(suppression.Config{}, pool, logger, reg)
	if err != nil {
		return err
	}

	opsListener, err := net.Listen("tcp", s.HTTPAddr)
	if err != nil {
		return fmt.Errorf("setting POSTLINE_RECEIVER_HTTP_ADDR: %w", err)
	}
	var started atomic.Bool
	ready := func(ctx context.Context) error {
		if !started.Load() {
			return errors.New("starting: Kafka topic or database migrations not checked yet")
		}
		return store.Ping(ctx)
	}

	// Phase one of shutdown: the SMTP server and the hooks server stop
	// taking connections and finish their sessions and requests within
	// the shutdown timeout (each bounds its own drain by it).
	svc := supervisor.Supervisor{
		Name: "bounce-receiver",
		Starting: []any{"smtp_addr", s.SMTPAddr, "bounce_domain", keys.signer.Domain(), "hooks_addr", s.HooksAddr,
			"kafka", cluster.String()},
		Logger: logger, Listener: opsListener, Registry: reg, Ready: ready,
		ShutdownTimeout: s.ShutdownTimeout,
		Draining:        "finishing SMTP sessions and webhook requests in flight",
	}
	return svc.Run(ctx, supervisor.Stage{Run: func(p supervisor.Phases) error {
		return receive(p, s, receiverDeps{cluster: cluster, pool: pool, store: store, lists: lists, signer: keys.signer,
			unsubscribes: keys.unsubscribes, rules: rules, tlsConfig: tlsConfig, logger: logger, reg: reg, started: &started})
	}})
}

// receiverKeys sign and verify the return path and unsubscribe tokens.
type receiverKeys struct {
	signer       *returnpath.Signer
	unsubscribes *unsubscribe.Signer
}

// keys builds the token signers of the bounce domain from the return path
// keys.
func (s settings) keys() (receiverKeys, error) {
	if s.BounceDomain == "" {
		return receiverKeys{}, errors.New("setting POSTLINE_BOUNCE_DOMAIN: required")
	}
	keys, err := returnpath.ParseKeys(s.ReturnPathKeys)
	if err != nil {
		return receiverKeys{}, fmt.Errorf("setting POSTLINE_RETURN_PATH_KEYS: %w", err)
	}
	signer, err := returnpath.New(s.BounceDomain, keys)
	if err != nil {
		return receiverKeys{}, fmt.Errorf("setting POSTLINE_BOUNCE_DOMAIN: %w", err)
	}
	unsubscribes, err := unsubscribe.NewSigner(keys)
	if err != nil {
		return receiverKeys{}, fmt.Errorf("setting POSTLINE_RETURN_PATH_KEYS: %w", err)
	}
	return receiverKeys{signer: signer, unsubscribes: unsubscribes}, nil
}

// rulesAndTLS loads the reply classification rules (the built-in ones
// unless a rules file is set) and the SMTP server's certificate, if set.
func (s settings) rulesAndTLS() (*failure.RuleSet, *tls.Config, error) {
	rules := failure.Default()
	if s.RulesFile != "" {
		var err error
		if rules, err = failure.LoadRules(s.RulesFile); err != nil {
			return nil, nil, fmt.Errorf("setting POSTLINE_RULES_FILE: %w", err)
		}
	}
	if s.TLSCertFile == "" && s.TLSKeyFile == "" {
		return rules, nil, nil
	}
	cert, err := tls.LoadX509KeyPair(s.TLSCertFile, s.TLSKeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("settings POSTLINE_BOUNCE_TLS_CERT_FILE and POSTLINE_BOUNCE_TLS_KEY_FILE: %w", err)
	}
	return rules, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// receiverDeps are what receive needs from run.
type receiverDeps struct {
	cluster *kafkaclient.Cluster
	pool    *pgxpool.Pool
	store   *idempotency.Store
	lists   *suppression.Store
	signer  *returnpath.Signer
	// unsubscribes verifies the one-click unsubscribe tokens (the return
	// path keys, under a label of their own).
	unsubscribes *unsubscribe.Signer
	rules        *failure.RuleSet
	tlsConfig    *tls.Config
	logger       *slog.Logger
	reg          *prometheus.Registry
	started      *atomic.Bool
}

// receive waits for Kafka and Postgres, then serves the bounce domain's
// SMTP server and the provider webhooks until the intake ends.
func receive(p supervisor.Phases, s settings, d receiverDeps) error {
	ctx := p.Intake
	if err := d.cluster.AwaitLogged(ctx, d.logger); err != nil {
		return err
	}
	if err := schema.MigrateWhenReady(ctx, d.pool, d.logger); err != nil {
		return err
	}
	limit, err := eventstream.EnsureTopic(ctx, d.cluster, s.EventsTopic, d.logger)
	if err != nil {
		return err
	}
	events, err := eventstream.New(eventstream.Config{Kafka: d.cluster, Topic: s.EventsTopic, MaxMessageBytes: limit}, d.reg)
	if err != nil {
		return config.NameSetting(err, map[string]string{"Topic": "POSTLINE_EVENTS_TOPIC"})
	}
	defer events.Close()
	applier, err := outcome.New(outcome.Config{Rules: d.rules}, d.logger, d.reg, d.store, events, d.lists, d.signer)
	if err != nil {
		return err
	}
	unsub, err := unsubscribe.NewApplier(unsubscribe.Config{}, d.logger, d.reg, d.unsubscribes, events, d.lists)
	if err != nil {
		return err
	}
	smtpServer, err := inbound.New(inbound.Config{
		Addr: s.SMTPAddr, Domain: d.signer.Domain(), FeedbackLocalPart: s.FeedbackLocalPart,
		ShutdownTimeout: s.ShutdownTimeout, TLSConfig: d.tlsConfig,
		MaxSessions: s.MaxSessions, MaxSessionsPerClient: s.MaxSessionsPerClient, MaxParseBytes: s.MaxParseBytes,
		Unsubscribes: mailUnsubscribes{applier: unsub, domain: d.signer.Domain()},
	}, d.logger, d.reg, d.signer.TokenOf, applier)
	if err != nil {
		return config.NameSetting(err, map[string]string{"Addr": "POSTLINE_BOUNCE_SMTP_ADDR",
			"FeedbackLocalPart": "POSTLINE_BOUNCE_FEEDBACK_LOCAL_PART", "MaxSessions": "POSTLINE_BOUNCE_MAX_SESSIONS",
			"MaxSessionsPerClient": "POSTLINE_BOUNCE_MAX_SESSIONS_PER_CLIENT", "MaxParseBytes": "POSTLINE_BOUNCE_MAX_PARSE_BYTES"})
	}
	hooks, err := hooksHandler(s, d, applier, unsubscribe.NewHandler(unsub, d.logger))
	if err != nil {
		return err
	}
	if hooks == nil {
		d.logger.Warn("POSTLINE_HOOKS_ADDR is empty: the one-click unsubscribe links the workers put in bulk mail are not answered here (only their mailto is)")
	}
	stages := []supervisor.Stage{
		{Run: func(p supervisor.Phases) error { return smtpServer.Run(p.Intake) }},
		// Publishes the transitions an applier made but did not finish
		// publishing (it stopped, or Kafka failed): see outcome.Applier.Drain.
		{Run: func(p supervisor.Phases) error { return applier.Run(p.Intake) }},
	}
	if hooks != nil {
		stage, err := hooksStage(s, d.reg, hooks)
		if err != nil {
			return err
		}
		stages = append(stages, stage)
	}
	go func() {
		select {
		case <-smtpServer.Ready():
			d.started.Store(true)
			d.logger.Info("receiving reports", "smtp_addr", smtpServer.Addr().String())
		case <-ctx.Done():
		}
	}()
	return p.Run(stages...)
}

// hooksStage listens on POSTLINE_HOOKS_ADDR and serves the public HTTP
// server until the intake ends, then lets its requests finish within the
// shutdown timeout.
func hooksStage(s settings, reg prometheus.Registerer, hooks http.Handler) (supervisor.Stage, error) {
	listener, err := net.Listen("tcp", s.HooksAddr)
	if err != nil {
		return supervisor.Stage{}, fmt.Errorf("setting POSTLINE_HOOKS_ADDR: %w", err)
	}
	server, listener, err := publicServer(s, reg, hooks, listener)
	if err != nil {
		_ = listener.Close()
		return supervisor.Stage{}, err
	}
	return supervisor.Stage{Run: func(p supervisor.Phases) error {
		stopped := make(chan error, 1)
		go func() {
			<-p.Intake.Done()
			shutdownCtx, cancel := context.WithTimeout(context.Background(), s.ShutdownTimeout)
			defer cancel()
			stopped <- server.Shutdown(shutdownCtx)
		}()
		if err := server.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("hooks server: %w", err)
		}
		return <-stopped
	}}, nil
}

// The limit labels of the public HTTP server's limiters
// (postline_admission_open and postline_admission_refused_total).
const (
	connectionsLimit = "http_connections"
	requestsLimit    = "http_requests"
)

// Bounds of the public HTTP server on POSTLINE_HOOKS_ADDR that are not
// settings: a slow client is cut off, and a request's header is small.
const (
	publicReadHeaderTimeout = 5 * time.Second
	publicReadTimeout       = 30 * time.Second
	publicIdleTimeout       = 60 * time.Second
	// publicMaxHeaderBytes replaces net/http's 1 MiB, which would let the
	// open connections hold POSTLINE_HOOKS_MAX_CONNECTIONS MiB of headers.
	publicMaxHeaderBytes = 64 << 10
)

// publicServer puts the handler of the public HTTP server (the routes of
// hooksHandler's mux) and its listener behind the limits that keep the
// receiver standing when the internet floods it: at most
// POSTLINE_HOOKS_MAX_CONNECTIONS connections (one more is answered 503 and
// closed before its request is read), at most POSTLINE_HOOKS_MAX_REQUESTS
// requests in handlers (admission's middleware answers the rest 503 with
// Retry-After; SNS and Mailgun post them again), headers of at most
// publicMaxHeaderBytes and timeouts on slow clients. Each handler caps its
// request body (providerhook's MaxBodyBytes, 256 KiB), so the bodies held
// at once are bounded too. A route added to the mux is under the same
// limits.
func publicServer(s settings, reg prometheus.Registerer, handler http.Handler, ln net.Listener) (*http.Server, net.Listener, error) {
	conns, err := admission.New(admission.Config{Name: connectionsLimit, Max: s.HooksMaxConns}, reg)
	if err != nil {
		return nil, ln, fmt.Errorf("setting POSTLINE_HOOKS_MAX_CONNECTIONS: %w", err)
	}
	requests, err := admission.New(admission.Config{Name: requestsLimit, Max: s.HooksMaxRequests}, reg)
	if err != nil {
		return nil, ln, fmt.Errorf("setting POSTLINE_HOOKS_MAX_REQUESTS: %w", err)
	}
	server := &http.Server{
		Handler:           requests.Middleware(handler),
		ReadHeaderTimeout: publicReadHeaderTimeout,
		ReadTimeout:       publicReadTimeout,
		IdleTimeout:       publicIdleTimeout,
		MaxHeaderBytes:    publicMaxHeaderBytes,
	}
	return server, conns.Listener(ln, refuseHTTP), nil
}

// refuseHTTP answers a connection over the limit before reading its
// request. A new connection's send buffer is empty, so the write does not
// wait on the client; the deadline is there all the same.
func refuseHTTP(c net.Conn, _ error) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
}

// hooksHandler routes the public HTTP server: the one-click unsubscribe
// links (unsubscribe.Path, always: the workers put them in bulk mail once
// the bounce domain is set) and the provider webhooks that are
// configured. It is nil when POSTLINE_HOOKS_ADDR is empty.
func hooksHandler(s settings, d receiverDeps, applier *outcome.Applier, unsub http.Handler) (http.Handler, error) {
	if s.HooksAddr == "" {
		if s.SESTopicARNs != "" || s.MailgunSigningKey != "" {
			return nil, errors.New("setting POSTLINE_HOOKS_ADDR: required to take SES or Mailgun webhooks")
		}
		return nil, nil
	}
	mux := http.NewServeMux()
	mux.Handle(unsubscribe.Path+"/", unsub)
	if arns := splitList(s.SESTopicARNs); len(arns) > 0 {
		// The topic list is required: SNS signs every account's messages,
		// so without it any topic could subscribe and be believed.
		ses, err := providerhook.NewSES(providerhook.SESConfig{TopicARNs: arns, Token: d.signer.TokenOf}, applier, d.logger, d.reg)
		if err != nil {
			return nil, fmt.Errorf("setting POSTLINE_SES_TOPIC_ARNS: %w", err)
		}
		mux.Handle("/hooks/ses", ses)
	}
	if s.MailgunSigningKey != "" {
		mg, err := providerhook.NewMailgun(providerhook.MailgunConfig{SigningKey: s.MailgunSigningKey, Token: d.signer.TokenOf},
			applier, d.logger, d.reg)
		if err != nil {
			return nil, fmt.Errorf("setting POSTLINE_MAILGUN_SIGNING_KEY: %w", err)
		}
		mux.Handle("/hooks/mailgun", mg)
	}
	return mux, nil
}

// mailUnsubscribes takes the mail sent to the unsubscribe addresses of the
// bounce domain (inbound.Unsubscribes).
type mailUnsubscribes struct {
	applier *unsubscribe.Applier
	domain  string
}

var _ inbound.Unsubscribes = mailUnsubscribes{}

// TokenOf implements inbound.Unsubscribes.
func (m mailUnsubscribes) TokenOf(address string) (string, bool) {
	return unsubscribe.TokenOfAddress(address, m.domain)
}

// Unsubscribe implements inbound.Unsubscribes.
func (m mailUnsubscribes) Unsubscribe(ctx context.Context, token string) error {
	_, err := m.applier.Apply(ctx, unsubscribe.ChannelMailto, token)
	return err
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
