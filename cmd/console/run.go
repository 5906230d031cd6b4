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
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/config"
	"github.com/postline/postline/internal/console"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/operator"
	"github.com/postline/postline/internal/ops"
	"github.com/postline/postline/internal/pgpool"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/supervisor"
	"github.com/postline/postline/internal/suppression"
)

// Bounds of the console's HTTP server that are not settings.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = 60 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
)

// run starts the console and returns when ctx is cancelled and it has
// shut down, or when it fails.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	s, logger, tlsConfig, err := loadSettings(args, getenv, stdout)
	if err != nil {
		return err
	}
	cluster, err := s.Kafka.Cluster("console")
	if err != nil {
		return err
	}
	pool, err := pgpool.New(ctx, pgpool.Config{URL: s.DatabaseURL, MaxConns: s.DatabaseMaxConns}, logger)
	if err != nil {
		return fmt.Errorf("setting POSTLINE_DATABASE_URL: %w", err)
	}
	defer pool.Close()
	server, closeServer, err := newServer(s, cluster, pool, logger, tlsConfig)
	if err != nil {
		return err
	}
	defer closeServer()
	indexer, err := mailquery.NewIndexer(pool, mailquery.IndexerConfig{Kafka: cluster.Config(), Topic: s.EventsTopic,
		GroupID: s.IndexerGroup, Logger: logger})
	if err != nil {
		return config.NameSetting(err, map[string]string{"Topic": "POSTLINE_EVENTS_TOPIC", "GroupID": "POSTLINE_CONSOLE_INDEXER_GROUP"})
	}
	listener, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("setting POSTLINE_CONSOLE_ADDR: %w", err)
	}
	opsListener, err := net.Listen("tcp", s.HTTPAddr)
	if err != nil {
		_ = listener.Close()
		return fmt.Errorf("setting POSTLINE_CONSOLE_HTTP_ADDR: %w", err)
	}
	var started atomic.Bool
	ready := func(ctx context.Context) error {
		if !started.Load() {
			return errors.New("starting: database migrations not applied yet")
		}
		return pool.Ping(ctx)
	}
	svc := supervisor.Supervisor{
		Name:     "console",
		Starting: []any{"addr", s.Addr, "tls", tlsConfig != nil, "events_topic", s.EventsTopic, "kafka", cluster.String()},
		Logger:   logger, Listener: opsListener, Registry: ops.NewRegistry(), Ready: ready,
		ShutdownTimeout: s.ShutdownTimeout,
		Draining:        "finishing requests in flight",
	}
	return svc.Run(ctx, supervisor.Stage{Run: func(p supervisor.Phases) error {
		if err := schema.MigrateWhenReady(p.Intake, pool, logger); err != nil {
			_ = listener.Close()
			return err
		}
		started.Store(true)
		return p.Run(
			supervisor.Stage{Name: "http", Run: func(p supervisor.Phases) error { return serve(p, server, listener, s.ShutdownTimeout) }},
			supervisor.Stage{Name: "indexer", Run: func(p supervisor.Phases) error { return index(p.Intake, cluster, indexer, logger) }},
			supervisor.Stage{Name: "purge", Run: func(p supervisor.Phases) error {
				return purgeEvents(p.Intake, indexer, s.EventsRetention, logger)
			}},
		)
	}})
}

// loadSettings reads and checks the settings: the TLS files load, and
// without them the console listens on loopback only.
func loadSettings(args []string, getenv func(string) string, stdout io.Writer) (settings, *slog.Logger, *tls.Config, error) {
	var s settings
	if err := config.Load(&s, "console", args, getenv, stdout); err != nil {
		return s, nil, nil, err
	}
	logger, err := ops.NewLogger(stdout, s.LogLevel)
	if err != nil {
		return s, nil, nil, err
	}
	if s.ShutdownTimeout <= 0 {
		return s, nil, nil, fmt.Errorf("setting POSTLINE_SHUTDOWN_TIMEOUT: %s must be positive", s.ShutdownTimeout)
	}
	if s.EventsRetention <= 0 {
		return s, nil, nil, fmt.Errorf("setting POSTLINE_CONSOLE_EVENTS_RETENTION: %s must be positive", s.EventsRetention)
	}
	if s.SessionLifetime < time.Minute {
		return s, nil, nil, fmt.Errorf("setting POSTLINE_CONSOLE_SESSION_LIFETIME: %s is shorter than a minute", s.SessionLifetime)
	}
	if err := checkFleetSettings(s); err != nil {
		return s, nil, nil, err
	}
	tlsConfig, err := console.TLSConfig(s.TLSCertFile, s.TLSKeyFile)
	if err != nil {
		return s, nil, nil, fmt.Errorf("settings POSTLINE_CONSOLE_TLS_CERT_FILE and POSTLINE_CONSOLE_TLS_KEY_FILE: %w", err)
	}
	if tlsConfig == nil {
		if err := console.CheckPlainListen(s.Addr); err != nil {
			return s, nil, nil, fmt.Errorf("setting POSTLINE_CONSOLE_ADDR: %w", err)
		}
	}
	return s, logger, tlsConfig, nil
}

// newServer builds the console's HTTP server on the pool and cluster, and
// the func that stops a re-drive under way and closes its writers.
func newServer(s settings, cluster *kafkaclient.Cluster, pool *pgxpool.Pool, logger *slog.Logger, tlsConfig *tls.Config) (*http.Server, func(), error) {
	accounts, err := operator.New(operator.Config{SessionLifetime: s.SessionLifetime}, pool)
	if err != nil {
		return nil, nil, fmt.Errorf("setting POSTLINE_CONSOLE_SESSION_LIFETIME: %w", err)
	}
	lists, err := suppression.New(suppression.Config{}, pool, logger, nil)
	if err != nil {
		return nil, nil, err
	}
	reader, err := mailquery.New(pool)
	if err != nil {
		return nil, nil, err
	}
	fleetReader, err := newFleetReader(s, cluster, pool)
	if err != nil {
		return nil, nil, err
	}
	ops, err := newOperations(s, cluster, pool, lists)
	if err != nil {
		return nil, nil, err
	}
	handler, err := console.New(ops.consoleConfig(console.Config{Accounts: accounts, Audit: operator.NewAuditLog(pool, nil),
		Suppressions: lists, Mail: reader, NotFound: mailquery.ErrNotFound, Fleet: fleetReader, Secure: tlsConfig != nil, Logger: logger}))
	if err != nil {
		ops.close()
		return nil, nil, err
	}
	closeAll := func() {
		handler.Close()
		ops.close()
	}
	return &http.Server{Handler: handler, TLSConfig: tlsConfig, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}, closeAll, nil
}

// serve answers on listener until the intake ends, then lets requests in
// flight finish within the shutdown timeout.
func serve(p supervisor.Phases, server *http.Server, listener net.Listener, timeout time.Duration) error {
	stopped := make(chan error, 1)
	go func() {
		<-p.Intake.Done()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		stopped <- server.Shutdown(ctx)
	}()
	var err error
	if server.TLSConfig != nil {
		err = server.ServeTLS(listener, "", "")
	} else {
		err = server.Serve(listener)
	}
	if !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("console server: %w", err)
	}
	return <-stopped
}
