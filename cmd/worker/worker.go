package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/circuit"
	"github.com/postline/postline/internal/config"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/delivery"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/returnpath"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/unsubscribe"
	"github.com/postline/postline/job"
)

// worker holds the parts built from the settings before the worker listens:
// everything that needs neither Kafka's answer nor the database schema.
// start builds the rest and runs them all.
type worker struct {
	s              settings
	logger         *slog.Logger
	reg            *prometheus.Registry
	tracerProvider trace.TracerProvider
	pool           *pgxpool.Pool

	store  *idempotency.Store
	leases *idempotency.LeaseKeeper

	relays     []delivery.Relay
	relayNames []string
	signer     *returnpath.Signer
	links      *unsubscribe.Links
	rules      *failure.RuleSet
	noConfirm  bool

	cluster       *kafkaclient.Cluster
	cons          *consumer.Consumer
	lag           *consumer.LagMonitor
	circuitPolicy circuit.Policy
	relayStates   *relayStatePublisher
	pressureGuard *adaptive.PressureGuard
	tiers         retry.Tiers
	limits        job.Limits
	pipelineCfg   delivery.Config
	topics        workerTopics

	// The pipeline needs the topics' limits and the circuit breakers, which
	// need their table: all are built once Kafka answers and migrations are
	// applied. Until then the worker is alive but not ready.
	pipeline atomic.Pointer[delivery.Pipeline]
	migrated atomic.Bool
}

// newWorker checks the settings by building the parts that need no
// network, so that a bad setting stops the worker before it listens.
func newWorker(s settings, pool *pgxpool.Pool, logger *slog.Logger, reg *prometheus.Registry, tp trace.TracerProvider) (*worker, error) {
	w := &worker{s: s, logger: logger, reg: reg, tracerProvider: tp, pool: pool}
	var err error
	w.store, err = idempotency.New(idempotency.Config{Owner: s.WorkerID, Lease: s.Lease}, pool, logger, reg)
	if err != nil {
		return nil, config.NameSetting(err, map[string]string{"Lease": "POSTLINE_LEASE", "Owner": "POSTLINE_WORKER_ID"})
	}
	// A claimed job may wait long for a relay slot: its lease is kept until
	// its fate is recorded, so the reaper never takes over a live job.
	w.leases, err = idempotency.NewLeaseKeeper(idempotency.KeeperConfig{Lease: s.Lease}, w.store, logger)
	if err != nil {
		// The keeper's interval is a third of the lease: the lease is what to change.
		return nil, config.NameSetting(err, map[string]string{"Lease": "POSTLINE_LEASE", "Interval": "POSTLINE_LEASE"})
	}
	if err := w.buildRelays(); err != nil {
		return nil, err
	}
	if err := w.buildPipelineConfig(); err != nil {
		return nil, err
	}
	return w, nil
}

// buildRelays reads the settings of what a mail carries and what becomes of
// it (return paths, unsubscribe links, reply rules, confirmation, DKIM keys)
// and builds the SMTP relays with their DSN requests and keys.
func (w *worker) buildRelays() error {
	s := &w.s
	relayConfigs, err := s.relayConfigs()
	if err != nil {
		return err
	}
	if w.signer, err = s.returnPaths(); err != nil {
		return err
	}
	if w.links, err = s.unsubscribeLinks(); err != nil {
		return err
	}
	if w.rules, err = s.rules(); err != nil {
		return err
	}
	if w.noConfirm, err = s.noConfirm(); err != nil {
		return err
	}
	keyring, err := s.dkimKeys()
	if err != nil {
		return err
	}
	for i := range relayConfigs {
		relayConfigs[i].Notify = s.dsnNotify()
		if keyring != nil {
			// Only with keys: a nil keyring in the interface would count
			// every mail as unsigned for want of a key.
			relayConfigs[i].DKIM = keyring
		}
	}
	if keyring != nil {
		for _, k := range keyring.Keys() {
			w.logger.Info("dkim key loaded", "domain", k.Domain, "selector", k.Selector, "record", k.RecordName())
		}
	}
	for _, rc := range relayConfigs {
		if err := w.addRelay(rc); err != nil {
			return err
		}
	}
	return nil
}

// addRelay builds one relay and adds it to the relays.
func (w *worker) addRelay(rc sender.Config) error {
	relay, err := sender.New(rc, w.logger, w.reg)
	if err != nil {
		if w.s.SMTPRelays != "" {
			return fmt.Errorf("setting POSTLINE_SMTP_RELAYS: relay %q: %w", rc.Name, err)
		}
		return config.NameSetting(err, map[string]string{"Name": "POSTLINE_SMTP_NAME", "Host": "POSTLINE_SMTP_HOST", "Port": "POSTLINE_SMTP_PORT",
			"TLS": "POSTLINE_SMTP_TLS", "Username": "POSTLINE_SMTP_USERNAME", "Password": "POSTLINE_SMTP_PASSWORD", "HELO": "POSTLINE_SMTP_HELO"})
	}
	w.relays = append(w.relays, delivery.Relay{
		Name:       relay.Name(),
		Priority:   rc.Priority,
		NewSession: func() delivery.Session { return relay.NewSession() },
		MaxConns:   rc.MaxConns,
		FleetRate:  rc.Rate,
	})
	w.relayNames = append(w.relayNames, relay.Name())
	return nil
}

// buildPipelineConfig checks the retry, circuit, consumer and pipeline
// settings and builds what they configure.
func (w *worker) buildPipelineConfig() error {
	s := &w.s
	var err error
	if w.tiers, err = s.tiers(); err != nil {
		return err
	}
	retryLimits, err := s.retryLimits()
	if err != nil {
		return err
	}
	w.circuitPolicy = circuit.Policy{
		FailureThreshold: s.CircuitThreshold,
		BaseCooldown:     s.CircuitCooldown,
		MaxCooldown:      s.CircuitMaxCooldown,
		RefreshInterval:  s.CircuitRefresh,
	}
	if err := w.circuitPolicy.WithDefaults().Validate(); err != nil {
		return config.NameSetting(err, map[string]string{"FailureThreshold": "POSTLINE_CIRCUIT_THRESHOLD", "BaseCooldown": "POSTLINE_CIRCUIT_COOLDOWN",
			"MaxCooldown": "POSTLINE_CIRCUIT_MAX_COOLDOWN", "RefreshInterval": "POSTLINE_CIRCUIT_REFRESH"})
	}
	if w.relayStates, err = newRelayStatePublisher(w.pool, s.WorkerID, s.RelayStateInterval, w.logger, w.reg); err != nil {
		return err
	}
	if err := w.buildConsumer(); err != nil {
		return err
	}
	policy, budgets, sendControl, err := s.retryPolicy()
	if err != nil {
		return err
	}
	if sendControl != nil {
		if w.pressureGuard, err = adaptive.NewPressureGuard(adaptive.PressureConfig{}); err != nil {
			return err
		}
	}
	w.limits = job.Limits{
		MaxMessageBytes:    s.MaxMessageBytes,
		MaxBodyBytes:       s.MaxBodyBytes,
		MaxAttachmentBytes: s.MaxAttachmentBytes,
	}
	w.pipelineCfg = delivery.Config{
		Policy:      policy,
		Budgets:     budgets,
		SendControl: sendControl,
		Senders:     s.Senders,
		BatchSize:   s.BatchSize,
		BatchLinger: s.BatchLinger,
		BatchBytes:  s.BatchBytes,
		Resends:     s.FastRetries,
		Tiers:       w.tiers,
		RetryLimits: retryLimits,
		Limits:      w.limits,
		Rules:       w.rules,

		ConfirmWindow: s.ConfirmWindow,
		NoConfirm:     w.noConfirm,
	}
	if err := w.pipelineCfg.WithDefaults().Validate(); err != nil {
		return config.NameSetting(err, map[string]string{"Senders": "POSTLINE_SENDERS", "BatchSize": "POSTLINE_BATCH_SIZE", "BatchBytes": "POSTLINE_BATCH_BYTES",
			"BatchLinger": "POSTLINE_BATCH_LINGER", "Resends": "POSTLINE_FAST_RETRIES",
			"MaxMessageBytes": "POSTLINE_MAX_MESSAGE_BYTES", "MaxBodyBytes": "POSTLINE_MAX_BODY_BYTES",
			"MaxAttachmentBytes": "POSTLINE_MAX_ATTACHMENT_BYTES", "ConfirmWindow": "POSTLINE_CONFIRM_WINDOW"})
	}
	w.topics = workerTopics{jobs: s.JobsTopic, dlq: s.DLQTopic, retries: w.tiers.Topics(s.RetryPrefix)}
	return nil
}

// buildConsumer builds the Kafka consumer of the jobs topic and the
// monitor of its group's lag.
func (w *worker) buildConsumer() error {
	s := &w.s
	var err error
	if w.cluster, err = s.Kafka.Cluster("worker"); err != nil {
		return err
	}
	w.cons, err = consumer.New(consumer.Config{
		Kafka:                   w.cluster,
		Topic:                   s.JobsTopic,
		GroupID:                 s.Group,
		SessionTimeout:          s.SessionTimeout,
		HeartbeatInterval:       s.HeartbeatInterval,
		CommitInterval:          s.CommitInterval,
		RebalanceTimeout:        s.RebalanceTimeout,
		DrainTimeout:            s.DrainTimeout,
		MaxInFlightPerPartition: s.MaxInFlight,
		MaxInFlightBytes:        s.MaxInFlightBytes,
	}, w.logger, w.reg)
	if err != nil {
		return config.NameSetting(err, map[string]string{"Brokers": "POSTLINE_KAFKA_BROKERS", "Topic": "POSTLINE_JOBS_TOPIC",
			"GroupID": "POSTLINE_CONSUMER_GROUP", "SessionTimeout": "POSTLINE_SESSION_TIMEOUT",
			"HeartbeatInterval": "POSTLINE_HEARTBEAT_INTERVAL", "RebalanceTimeout": "POSTLINE_REBALANCE_TIMEOUT",
			"CommitInterval": "POSTLINE_COMMIT_INTERVAL", "DrainTimeout": "POSTLINE_DRAIN_TIMEOUT",
			"MaxInFlightPerPartition": "POSTLINE_MAX_IN_FLIGHT_PER_PARTITION", "MaxInFlightBytes": "POSTLINE_MAX_IN_FLIGHT_BYTES"})
	}
	w.lag, err = consumer.NewLagMonitor(consumer.LagMonitorConfig{
		Kafka: w.cluster, Topic: s.JobsTopic, GroupID: s.Group, Interval: s.LagInterval,
	}, w.logger, w.reg)
	if err != nil {
		return config.NameSetting(err, map[string]string{"Interval": "POSTLINE_LAG_INTERVAL"})
	}
	return nil
}

// ready is /readyz: Kafka and the database were checked, the consumer is a
// member of its group, and the store and the pipeline's dependencies answer.
func (w *worker) ready(ctx context.Context) error {
	if !w.migrated.Load() {
		return errors.New("starting: Kafka topics or database migrations not checked yet")
	}
	if !w.cons.Joined() {
		return errors.New("not a member of the consumer group")
	}
	if err := w.store.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if p := w.pipeline.Load(); p == nil || !p.Healthy() {
		return errors.New("store or dead-letter calls are failing")
	}
	return nil
}
