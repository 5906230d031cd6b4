package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/postline/postline/internal/config"
	"github.com/postline/postline/internal/ops"
	"github.com/postline/postline/internal/pgpool"
	"github.com/postline/postline/internal/supervisor"
	"github.com/postline/postline/internal/telemetry"
)

// run starts the worker and returns when ctx is cancelled and the worker has
// shut down, or when it fails.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	s, logger, err := loadSettings(args, getenv, stdout)
	if err != nil {
		return err
	}
	// Traces are configured by the standard OTEL_* variables, off unless
	// an exporter or an OTLP endpoint is set.
	tracerProvider, shutdownTracing, err := telemetry.Setup(ctx, "postline-worker", getenv)
	if err != nil {
		return err
	}
	defer shutdownTracing.Flush(logger)

	if s.DatabaseMaxConns < 1 {
		return fmt.Errorf("setting POSTLINE_DATABASE_MAX_CONNS: %d must be at least 1", s.DatabaseMaxConns)
	}
	// Warns at start when the database is remote and reachable without TLS.
	pool, err := pgpool.New(ctx, pgpool.Config{URL: s.DatabaseURL, MaxConns: s.DatabaseMaxConns}, logger)
	if err != nil {
		return fmt.Errorf("setting POSTLINE_DATABASE_URL: %w", err)
	}
	defer pool.Close()

	w, err := newWorker(s, pool, logger, ops.NewRegistry(), tracerProvider)
	if err != nil {
		return err
	}
	listener, err := net.Listen("tcp", s.HTTPAddr)
	if err != nil {
		return fmt.Errorf("setting POSTLINE_HTTP_ADDR: %w", err)
	}

	// Phase one of shutdown: the signal stops consumption; the consumer
	// drains and commits. Phase two: past ShutdownTimeout, in-flight sends
	// are aborted and left uncommitted for redelivery.
	svc := supervisor.Supervisor{
		Name: "worker",
		Starting: []any{"topic", s.JobsTopic, "group", s.Group, "kafka", w.cluster.String(), "retry_policy", s.RetryPolicy,
			"relays", w.relayNames, "senders", s.Senders, "bounce_domain", s.BounceDomain, "unsubscribe_url", unsubscribeURL(w.links)},
		Logger: logger, Listener: listener, Registry: w.reg, Ready: w.ready,
		ShutdownTimeout: s.ShutdownTimeout,
		Draining:        "no new records; finishing in-flight mail",
		Aborting:        "aborting in-flight mail (it will be redelivered)",
	}
	return svc.Run(ctx, supervisor.Stage{Run: w.start})
}

// loadSettings reads the settings, fills in the derived defaults, checks the
// shutdown timeouts and returns the worker's logger.
func loadSettings(args []string, getenv func(string) string, stdout io.Writer) (settings, *slog.Logger, error) {
	var s settings
	if err := config.Load(&s, "worker", args, getenv, stdout); err != nil {
		return s, nil, err
	}
	logger, err := ops.NewLogger(stdout, s.LogLevel)
	if err != nil {
		return s, nil, err
	}
	if s.WorkerID == "" {
		s.WorkerID = defaultWorkerID()
	}
	if s.ShutdownTimeout <= 0 {
		return s, nil, fmt.Errorf("setting POSTLINE_SHUTDOWN_TIMEOUT: %s must be positive", s.ShutdownTimeout)
	}
	if s.DrainTimeout == 0 {
		s.DrainTimeout = s.ShutdownTimeout * 2 / 3
	}
	if s.DrainTimeout >= s.ShutdownTimeout {
		return s, nil, fmt.Errorf("setting POSTLINE_DRAIN_TIMEOUT: %s must be less than POSTLINE_SHUTDOWN_TIMEOUT (%s), "+
			"which also covers the final commit", s.DrainTimeout, s.ShutdownTimeout)
	}
	return s, logger.With("worker_id", s.WorkerID), nil
}

func defaultWorkerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", strings.ReplaceAll(host, " ", "_"), os.Getpid(), hex.EncodeToString(b[:]))
}
