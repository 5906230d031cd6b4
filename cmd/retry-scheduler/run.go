package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/postline/postline/internal/config"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/ops"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/supervisor"
	"github.com/postline/postline/internal/telemetry"
)

// run starts the scheduler and returns when ctx is cancelled and it has shut
// down, or when it fails.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	s, logger, tiers, err := loadSettings(args, getenv, stdout)
	if err != nil {
		return err
	}
	// Traces are configured by the standard OTEL_* variables, off unless
	// an exporter or an OTLP endpoint is set.
	tracerProvider, shutdownTracing, err := telemetry.Setup(ctx, "postline-retry-scheduler", getenv)
	if err != nil {
		return err
	}
	defer shutdownTracing.Flush(logger)
	reg := ops.NewRegistry()
	cluster, err := s.Kafka.Cluster("retry-scheduler")
	if err != nil {
		return err
	}
	schedCfg, err := s.schedulerConfig(cluster, tiers, tracerProvider)
	if err != nil {
		return err
	}

	listener, err := net.Listen("tcp", s.HTTPAddr)
	if err != nil {
		return fmt.Errorf("setting POSTLINE_SCHEDULER_HTTP_ADDR: %w", err)
	}
	var scheduler atomic.Pointer[retry.Scheduler]
	ready := supervisor.ReadyWhenStarted(&scheduler, "not a member of the consumer group, or writes to the jobs topic are failing")

	// Phase one of shutdown: the signal stops fetching; records falling due
	// within the drain are re-injected and committed. Phase two: past the
	// shutdown timeout the process gives up and exits; whatever was not
	// committed is re-read by the next owner (duplicates, never losses).
	svc := supervisor.Supervisor{
		Name: "retry-scheduler",
		Starting: []any{"jobs_topic", s.JobsTopic, "delay_topics", tiers.Topics(s.Prefix), "group", s.Group,
			"kafka", cluster.String()},
		Logger: logger, Listener: listener, Registry: reg, Ready: ready,
		ShutdownTimeout: s.ShutdownTimeout,
		Draining:        "re-injecting what falls due, then committing",
		Abandoned:       "uncommitted records will be re-injected by the next owner",
	}
	return svc.Run(ctx, supervisor.Stage{Run: func(p supervisor.Phases) error {
		return startScheduler(p.Intake, schedCfg, s.DLQTopic, logger, reg, &scheduler)
	}})
}

// loadSettings reads and checks the settings and returns the scheduler's
// logger and delay tiers.
func loadSettings(args []string, getenv func(string) string, stdout io.Writer) (settings, *slog.Logger, retry.Tiers, error) {
	var s settings
	if err := config.Load(&s, "retry-scheduler", args, getenv, stdout); err != nil {
		return s, nil, nil, err
	}
	logger, err := ops.NewLogger(stdout, s.LogLevel)
	if err != nil {
		return s, nil, nil, err
	}
	tiers, err := retry.ParseTiers(s.Tiers)
	if err != nil {
		return s, nil, nil, fmt.Errorf("setting POSTLINE_RETRY_TIERS: %w", err)
	}
	if s.ShutdownTimeout <= 0 {
		return s, nil, nil, fmt.Errorf("setting POSTLINE_SHUTDOWN_TIMEOUT: %s must be positive", s.ShutdownTimeout)
	}
	if s.MaxJitter < 0 {
		return s, nil, nil, fmt.Errorf("setting POSTLINE_SCHEDULER_MAX_JITTER: %s must not be negative", s.MaxJitter)
	}
	return s, logger, tiers, nil
}

// schedulerConfig is the scheduler's configuration from the settings,
// checked; its dead-letter function is a stand-in until the writer exists.
func (s settings) schedulerConfig(cluster *kafkaclient.Cluster, tiers retry.Tiers, tp trace.TracerProvider) (retry.SchedulerConfig, error) {
	// The drain leaves a third of the shutdown timeout for the final commit
	// and leaving the group; the rebalance timeout must exceed the drain.
	drain := s.ShutdownTimeout * 2 / 3
	cfg := retry.SchedulerConfig{
		Kafka:             cluster,
		Prefix:            s.Prefix,
		Tiers:             tiers,
		JobsTopic:         s.JobsTopic,
		GroupID:           s.Group,
		MaxJitter:         cmpJitter(s.MaxJitter),
		SessionTimeout:    s.SessionTimeout,
		HeartbeatInterval: s.HeartbeatInterval,
		MaxInFlightBytes:  s.MaxInFlightBytes,
		DrainTimeout:      drain,
		RebalanceTimeout:  max(drain+5*time.Second, 15*time.Second),
		TracerProvider:    tp,
		// Replaced once the dead-letter writer exists; checked by Validate.
		RejectFunc: func(context.Context, consumer.Message, string, string) error { return nil },
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return cfg, config.NameSetting(err, map[string]string{"JobsTopic": "POSTLINE_JOBS_TOPIC",
			"Prefix": "POSTLINE_RETRY_TOPIC_PREFIX", "Tiers": "POSTLINE_RETRY_TIERS", "GroupID": "POSTLINE_SCHEDULER_GROUP",
			"MaxJitter": "POSTLINE_SCHEDULER_MAX_JITTER", "SessionTimeout": "POSTLINE_SESSION_TIMEOUT",
			"HeartbeatInterval": "POSTLINE_HEARTBEAT_INTERVAL", "DrainTimeout": "POSTLINE_SHUTDOWN_TIMEOUT"})
	}
	return cfg, nil
}

// startScheduler waits for Kafka, reads the limits of the jobs, dead-letter
// and delay topics, builds the scheduler with a dead-letter writer for what
// cannot be re-injected, publishes it for readiness and runs it.
func startScheduler(ctx context.Context, cfg retry.SchedulerConfig, dlqTopic string, logger *slog.Logger,
	reg *prometheus.Registry, published *atomic.Pointer[retry.Scheduler],
) error {
	if err := cfg.Kafka.AwaitLogged(ctx, logger); err != nil {
		return err
	}
	cfg = cfg.WithDefaults()
	topics := append([]string{cfg.JobsTopic, dlqTopic}, cfg.Tiers.Topics(cfg.Prefix)...)
	limits, err := cfg.Kafka.MaxMessageBytes(ctx, topics...)
	if err != nil {
		return fmt.Errorf("kafka topics (create them with postctl topics create): %w", err)
	}
	// No size check against the dead-letter topic: only records the jobs
	// topic cannot take go there, and the dead-letter writer shortens a
	// letter its topic cannot take whole.
	dlq, err := deadletter.New(deadletter.Config{Kafka: cfg.Kafka, Topic: dlqTopic, MaxMessageBytes: limits[dlqTopic]}, reg)
	if err != nil {
		return err
	}
	defer dlq.Close()
	cfg.JobsMaxMessageBytes = limits[cfg.JobsTopic]
	cfg.RejectFunc = func(ctx context.Context, m consumer.Message, reason, detail string) error {
		return dlq.Publish(ctx, deadletter.Letter{
			Key: m.Key, Value: m.Value, Headers: m.Headers,
			Topic: m.Topic, Partition: m.Partition, Offset: m.Offset,
			Reason: reason, Class: "invalid", Error: detail, Attempt: jobheader.Attempt(m.Headers),
		})
	}
	sched, err := retry.NewScheduler(cfg, logger, reg)
	if err != nil {
		return err
	}
	published.Store(sched)
	return sched.Run(ctx)
}

// cmpJitter maps the setting to the config: 0 means no jitter, which the
// config spells as a negative value (its zero means the default).
func cmpJitter(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
