package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/config"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/ops"
	"github.com/postline/postline/internal/pgpool"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/supervisor"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/internal/webhook"
)

// settingNames maps webhook.Config fields to the settings, so that its
// errors name what the operator sets.
var settingNames = map[string]string{
	"Endpoints": "POSTLINE_WEBHOOKS_FILE", "Topic": "POSTLINE_EVENTS_TOPIC", "GroupID": "POSTLINE_WEBHOOKS_GROUP",
	"Schedule.Delays": "POSTLINE_WEBHOOKS_RETRY_DELAYS", "Schedule.Horizon": "POSTLINE_WEBHOOKS_RETRY_HORIZON",
	"DisableAfter": "POSTLINE_WEBHOOKS_DISABLE_AFTER", "Concurrency": "POSTLINE_WEBHOOKS_CONCURRENCY",
	"SessionTimeout": "POSTLINE_SESSION_TIMEOUT", "HeartbeatInterval": "POSTLINE_HEARTBEAT_INTERVAL",
	"DrainTimeout": "POSTLINE_SHUTDOWN_TIMEOUT",
}

// run starts the dispatcher and returns when ctx is cancelled and it has
// shut down, or when it fails.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	s, logger, err := loadSettings(args, getenv, stdout)
	if err != nil {
		return err
	}
	cfg, err := s.dispatcherConfig(getenv)
	if err != nil {
		return err
	}

	pool, err := pgpool.New(ctx, pgpool.Config{URL: s.DatabaseURL, MaxConns: s.DatabaseMaxConns}, logger)
	if err != nil {
		return fmt.Errorf("setting POSTLINE_DATABASE_URL: %w", err)
	}
	defer pool.Close()
	cfg.Queue = webhook.NewQueue(pool)

	listener, err := net.Listen("tcp", s.HTTPAddr)
	if err != nil {
		return fmt.Errorf("setting POSTLINE_WEBHOOKS_HTTP_ADDR: %w", err)
	}
	reg := ops.NewRegistry()
	var dispatcher atomic.Pointer[webhook.Dispatcher]
	ready := supervisor.ReadyWhenStarted(&dispatcher, "not a member of the consumer group, or writes to the dead-letter topic are failing")
	ids := make([]string, len(cfg.Endpoints))
	for i, ep := range cfg.Endpoints {
		ids[i] = ep.ID
	}

	svc := supervisor.Supervisor{
		Name: "webhook-dispatcher",
		Starting: []any{"events_topic", s.EventsTopic, "dlq_topic", s.DLQTopic, "group", s.Group, "endpoints", ids,
			"kafka", cfg.Kafka.String()},
		Logger: logger, Listener: listener, Registry: reg, Ready: ready,
		ShutdownTimeout: s.ShutdownTimeout,
		Draining:        "finishing requests in flight, then committing",
		Abandoned:       "unfinished events will be sent again by the next owner",
	}
	return svc.Run(ctx, supervisor.Stage{Run: func(p supervisor.Phases) error {
		if err := schema.MigrateWhenReady(p.Intake, pool, logger); err != nil {
			return err
		}
		return startDispatcher(p.Intake, cfg, s.DLQTopic, logger, reg, &dispatcher)
	}})
}

// loadSettings reads the settings, checks the ones the dispatcher's config
// does not, and returns the dispatcher's logger.
func loadSettings(args []string, getenv func(string) string, stdout io.Writer) (settings, *slog.Logger, error) {
	var s settings
	if err := config.Load(&s, "webhook-dispatcher", args, getenv, stdout); err != nil {
		return s, nil, err
	}
	logger, err := ops.NewLogger(stdout, s.LogLevel)
	if err != nil {
		return s, nil, err
	}
	if s.ShutdownTimeout <= 0 {
		return s, nil, fmt.Errorf("setting POSTLINE_SHUTDOWN_TIMEOUT: %s must be positive", s.ShutdownTimeout)
	}
	if s.DLQTopic == "" || s.DLQTopic == s.EventsTopic {
		return s, nil, fmt.Errorf("setting POSTLINE_WEBHOOKS_DLQ_TOPIC: %q must be set and differ from POSTLINE_EVENTS_TOPIC", s.DLQTopic)
	}
	if s.EndpointsFile == "" {
		return s, nil, errors.New("setting POSTLINE_WEBHOOKS_FILE: required: the file listing the webhook endpoints")
	}
	return s, logger, nil
}

// dispatcherConfig is the dispatcher's configuration from the settings and
// the endpoints file, with each endpoint's secret from its variable,
// checked. Its dead-letter writer and queue are stand-ins until Kafka and
// the database answer.
func (s settings) dispatcherConfig(getenv func(string) string) (webhook.Config, error) {
	endpoints, err := webhook.LoadEndpoints(s.EndpointsFile)
	if err != nil {
		return webhook.Config{}, fmt.Errorf("setting POSTLINE_WEBHOOKS_FILE: %w", err)
	}
	// The secrets come from the environment, one variable per endpoint.
	for i := range endpoints {
		endpoints[i].Secret = webhook.Secret(getenv(endpoints[i].SecretEnv))
	}
	cluster, err := s.Kafka.Cluster("webhook-dispatcher")
	if err != nil {
		return webhook.Config{}, err
	}
	// The drain leaves a third of the shutdown timeout for the final commit
	// and leaving the group; the rebalance timeout must exceed the drain.
	drain := s.ShutdownTimeout * 2 / 3
	delays, err := parseDelays(s.RetryDelays)
	if err != nil {
		return webhook.Config{}, fmt.Errorf("setting POSTLINE_WEBHOOKS_RETRY_DELAYS: %w", err)
	}
	cfg := webhook.Config{
		Kafka:             cluster,
		Topic:             s.EventsTopic,
		GroupID:           s.Group,
		Endpoints:         endpoints,
		Schedule:          webhook.Schedule{Delays: delays, Horizon: s.RetryHorizon},
		DisableAfter:      s.DisableAfter,
		Concurrency:       s.Concurrency,
		SessionTimeout:    s.SessionTimeout,
		HeartbeatInterval: s.HeartbeatInterval,
		DrainTimeout:      drain,
		RebalanceTimeout:  max(drain+5*time.Second, 15*time.Second),
		// Replaced once the dead-letter writer and the database exist;
		// checked by Validate.
		DeadLetters: pendingWriter{},
		Queue:       &webhook.Queue{},
	}
	if err := checkNonZero(s); err != nil {
		return cfg, err
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return cfg, config.NameSetting(err, settingNames)
	}
	return cfg, nil
}

// checkNonZero rejects settings whose zero value the config would replace
// by its default: an operator who sets 0 means something else.
func checkNonZero(s settings) error {
	for _, c := range []struct {
		name string
		zero bool
	}{
		{"POSTLINE_WEBHOOKS_RETRY_HORIZON", s.RetryHorizon == 0},
		{"POSTLINE_WEBHOOKS_DISABLE_AFTER", s.DisableAfter == 0},
		{"POSTLINE_WEBHOOKS_CONCURRENCY", s.Concurrency == 0},
	} {
		if c.zero {
			return fmt.Errorf("setting %s: must not be zero", c.name)
		}
	}
	return nil
}

// parseDelays reads a comma-separated list of durations.
func parseDelays(v string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(v, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", v, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// pendingWriter stands in for the dead-letter writer while the settings
// are checked; it is never called.
type pendingWriter struct{}

func (pendingWriter) Publish(context.Context, ...deadletter.Letter) error {
	return errors.New("dead-letter writer not started")
}

// startDispatcher waits for Kafka, checks the events topic, creates the
// dead-letter topic when missing (sized to take any record of the events
// topic with the dead-letter headers), builds the dispatcher, publishes it
// for readiness and runs it.
func startDispatcher(ctx context.Context, cfg webhook.Config, dlqTopic string, logger *slog.Logger,
	reg *prometheus.Registry, published *atomic.Pointer[webhook.Dispatcher],
) error {
	if err := cfg.Kafka.AwaitLogged(ctx, logger); err != nil {
		return err
	}
	cfg = cfg.WithDefaults()
	limits, err := cfg.Kafka.MaxMessageBytes(ctx, cfg.Topic)
	if err != nil {
		return fmt.Errorf("events topic %s: %w", cfg.Topic, err)
	}
	err = topic.Ensure(ctx, cfg.Kafka, topic.Spec{
		Name:       dlqTopic,
		Partitions: topic.DefaultDLQPartitions,
		Configs: map[string]string{
			"max.message.bytes": strconv.Itoa(kafkaclient.RequiredLimit(limits[cfg.Topic])),
			"retention.ms":      strconv.FormatInt(topic.DLQRetention.Milliseconds(), 10),
		},
	})
	if err != nil {
		return fmt.Errorf("dead-letter topic %s: %w", dlqTopic, err)
	}
	dlqLimits, err := cfg.Kafka.MaxMessageBytes(ctx, dlqTopic)
	if err != nil {
		return fmt.Errorf("dead-letter topic %s: %w", dlqTopic, err)
	}
	dlq, err := deadletter.New(deadletter.Config{Kafka: cfg.Kafka, Topic: dlqTopic, MaxMessageBytes: dlqLimits[dlqTopic]}, reg)
	if err != nil {
		return err
	}
	defer dlq.Close()
	cfg.DeadLetters = dlq
	d, err := webhook.New(cfg, logger, reg)
	if err != nil {
		return err
	}
	published.Store(d)
	return d.Run(ctx)
}
