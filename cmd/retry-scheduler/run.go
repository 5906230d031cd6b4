package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/postline/postline/internal/config"
	"github.com/postline/postline/internal/retry"
)

// run starts the scheduler and returns when ctx is cancelled and it has shut
// down, or when it fails.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	var s settings
	if err := config.Load(&s, "retry-scheduler", args, getenv, stdout); err != nil {
		return err
	}
	logger, err := newLogger(stdout, s.LogLevel)
	if err != nil {
		return err
	}
	tiers, err := retry.ParseTiers(s.Tiers)
	if err != nil {
		return fmt.Errorf("setting POSTLINE_RETRY_TIERS: %w", err)
	}
	if s.ShutdownTimeout <= 0 {
		return fmt.Errorf("setting POSTLINE_SHUTDOWN_TIMEOUT: %s must be positive", s.ShutdownTimeout)
	}
	if s.MaxJitter < 0 {
		return fmt.Errorf("setting POSTLINE_SCHEDULER_MAX_JITTER: %s must not be negative", s.MaxJitter)
	}
	// The drain leaves a third of the shutdown timeout for the final commit
	// and leaving the group; the rebalance timeout must exceed the drain.
	drain := s.ShutdownTimeout * 2 / 3
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	sched, err := retry.NewScheduler(retry.SchedulerConfig{
		Brokers:           s.Brokers,
		Prefix:            s.Prefix,
		Tiers:             tiers,
		JobsTopic:         s.JobsTopic,
		GroupID:           s.Group,
		MaxJitter:         cmpJitter(s.MaxJitter),
		SessionTimeout:    s.SessionTimeout,
		HeartbeatInterval: s.HeartbeatInterval,
		DrainTimeout:      drain,
		RebalanceTimeout:  max(drain+5*time.Second, 15*time.Second),
	}, logger, reg)
	if err != nil {
		return nameSetting(err, map[string]string{"Brokers": "POSTLINE_KAFKA_BROKERS", "JobsTopic": "POSTLINE_JOBS_TOPIC",
			"Prefix": "POSTLINE_RETRY_TOPIC_PREFIX", "Tiers": "POSTLINE_RETRY_TIERS", "GroupID": "POSTLINE_SCHEDULER_GROUP",
			"MaxJitter": "POSTLINE_SCHEDULER_MAX_JITTER", "SessionTimeout": "POSTLINE_SESSION_TIMEOUT",
			"HeartbeatInterval": "POSTLINE_HEARTBEAT_INTERVAL", "DrainTimeout": "POSTLINE_SHUTDOWN_TIMEOUT"})
	}

	listener, err := net.Listen("tcp", s.HTTPAddr)
	if err != nil {
		return fmt.Errorf("setting POSTLINE_SCHEDULER_HTTP_ADDR: %w", err)
	}
	ready := func() error {
		if !sched.Ready() {
			return errors.New("not a member of the consumer group, or writes to the jobs topic are failing")
		}
		return nil
	}
	server := &http.Server{Handler: httpHandler(reg, ready), ReadHeaderTimeout: 5 * time.Second}
	logger.Info("retry-scheduler starting", "http_addr", listener.Addr().String(), "jobs_topic", s.JobsTopic,
		"delay_topics", tiers.Topics(s.Prefix), "group", s.Group)

	// Phase one of shutdown: the signal stops fetching; records falling due
	// within the drain are re-injected and committed. Phase two: past the
	// shutdown timeout the process gives up and exits; whatever was not
	// committed is re-read by the next owner (duplicates, never losses).
	var g errgroup.Group
	g.Go(func() error {
		if err := server.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- sched.Run(ctx) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		logger.Info("shutting down: re-injecting what falls due, then committing", "timeout", s.ShutdownTimeout)
		t := time.NewTimer(s.ShutdownTimeout)
		select {
		case err = <-done:
		case <-t.C:
			err = fmt.Errorf("shutdown took longer than POSTLINE_SHUTDOWN_TIMEOUT (%s); uncommitted records will be re-injected by the next owner", s.ShutdownTimeout)
		}
		t.Stop()
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = server.Shutdown(shutdownCtx)
	if herr := g.Wait(); err == nil {
		err = herr
	}
	logger.Info("retry-scheduler stopped", "error", err)
	return err
}

// cmpJitter maps the setting to the config: 0 means no jitter, which the
// config spells as a negative value (its zero means the default).
func cmpJitter(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func httpHandler(reg *prometheus.Registry, ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("setting POSTLINE_LOG_LEVEL: invalid value %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// nameSetting prefixes a package's configuration error with the setting it
// is about (the first field the error names; longer names are tried first).
func nameSetting(err error, fields map[string]string) error {
	names := slices.SortedFunc(maps.Keys(fields), func(a, b string) int { return len(b) - len(a) })
	msg := err.Error()
	for _, name := range names {
		if i := strings.Index(msg, name); i >= 0 && !isIdentByte(msg, i-1) && !isIdentByte(msg, i+len(name)) {
			return fmt.Errorf("setting %s: %w", fields[name], err)
		}
	}
	return fmt.Errorf("settings: %w", err)
}

func isIdentByte(s string, i int) bool {
	if i < 0 || i >= len(s) {
		return false
	}
	c := s[i]
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
