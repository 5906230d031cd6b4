package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/circuit"
	"github.com/postline/postline/internal/compose"
	"github.com/postline/postline/internal/config"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/delivery"
	"github.com/postline/postline/internal/eventstream"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/ops"
	"github.com/postline/postline/internal/outcome"
	"github.com/postline/postline/internal/pgpool"
	"github.com/postline/postline/internal/pressure"
	"github.com/postline/postline/internal/reaper"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/telemetry"
	"github.com/postline/postline/internal/templatestore"
	"github.com/postline/postline/job"
)

// run starts the worker and returns when ctx is cancelled and the worker has
// shut down, or when it fails.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	var s settings
	if err := config.Load(&s, "worker", args, getenv, stdout); err != nil {
		return err
	}
	logger, err := ops.NewLogger(stdout, s.LogLevel)
	if err != nil {
		return err
	}
	if s.WorkerID == "" {
		s.WorkerID = defaultWorkerID()
	}
	if s.ShutdownTimeout <= 0 {
		return fmt.Errorf("setting POSTLINE_SHUTDOWN_TIMEOUT: %s must be positive", s.ShutdownTimeout)
	}
	if s.DrainTimeout == 0 {
		s.DrainTimeout = s.ShutdownTimeout * 2 / 3
	}
	if s.DrainTimeout >= s.ShutdownTimeout {
		return fmt.Errorf("setting POSTLINE_DRAIN_TIMEOUT: %s must be less than POSTLINE_SHUTDOWN_TIMEOUT (%s), "+
			"which also covers the final commit", s.DrainTimeout, s.ShutdownTimeout)
	}
	logger = logger.With("worker_id", s.WorkerID)

	// Traces are configured by the standard OTEL_* variables, off unless
	// an exporter or an OTLP endpoint is set.
	tracerProvider, shutdownTracing, err := telemetry.Setup(ctx, "postline-worker", getenv)
	if err != nil {
		return err
	}
	defer shutdownTracing.Flush(logger)

	reg := ops.NewRegistry()

	if s.DatabaseMaxConns < 1 {
		return fmt.Errorf("setting POSTLINE_DATABASE_MAX_CONNS: %d must be at least 1", s.DatabaseMaxConns)
	}
	// Warns at start when the database is remote and reachable without TLS.
	pool, err := pgpool.New(ctx, pgpool.Config{URL: s.DatabaseURL, MaxConns: s.DatabaseMaxConns}, logger)
	if err != nil {
		return fmt.Errorf("setting POSTLINE_DATABASE_URL: %w", err)
	}
	defer pool.Close()

	store, err := idempotency.New(idempotency.Config{Owner: s.WorkerID, Lease: s.Lease}, pool, logger, reg)
	if err != nil {
		return config.NameSetting(err, map[string]string{"Lease": "POSTLINE_LEASE", "Owner": "POSTLINE_WORKER_ID"})
	}
	// A claimed job may wait long for a relay slot: its lease is kept until
	// its outcome is recorded, so the reaper never takes over a live job.
	leases, err := idempotency.NewLeaseKeeper(idempotency.KeeperConfig{Lease: s.Lease}, store, logger)
	if err != nil {
		return config.NameSetting(err, map[string]string{"Lease": "POSTLINE_LEASE"})
	}
	relayConfigs, err := s.relayConfigs()
	if err != nil {
		return err
	}
	signer, err := s.returnPaths()
	if err != nil {
		return err
	}
	links, err := s.unsubscribeLinks()
	if err != nil {
		return err
	}
	rules, err := s.rules()
	if err != nil {
		return err
	}
	noConfirm, err := s.noConfirm()
	if err != nil {
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
			logger.Info("dkim key loaded", "domain", k.Domain, "selector", k.Selector, "record", k.RecordName())
		}
	}
	var (
		providers     []delivery.Provider
		providerNames []string
	)
	for _, rc := range relayConfigs {
		relay, err := sender.New(rc, logger, reg)
		if err != nil {
			if s.SMTPRelays != "" {
				return fmt.Errorf("setting POSTLINE_SMTP_RELAYS: relay %q: %w", rc.Name, err)
			}
			return config.NameSetting(err, map[string]string{"Name": "POSTLINE_SMTP_NAME", "Host": "POSTLINE_SMTP_HOST", "Port": "POSTLINE_SMTP_PORT",
				"TLS": "POSTLINE_SMTP_TLS", "Username": "POSTLINE_SMTP_USERNAME", "Password": "POSTLINE_SMTP_PASSWORD", "HELO": "POSTLINE_SMTP_HELO"})
		}
		providers = append(providers, delivery.Provider{
			Name:       relay.Name(),
			Priority:   rc.Priority,
			NewSession: func() delivery.Session { return relay.NewSession() },
			MaxConns:   rc.MaxConns,
			FleetRate:  rc.Rate,
		})
		providerNames = append(providerNames, relay.Name())
	}
	tiers, err := s.tiers()
	if err != nil {
		return err
	}
	retryLimits, err := s.retryLimits()
	if err != nil {
		return err
	}
	circuitPolicy := circuit.Policy{
		FailureThreshold: s.CircuitThreshold,
		BaseCooldown:     s.CircuitCooldown,
		MaxCooldown:      s.CircuitMaxCooldown,
		RefreshInterval:  s.CircuitRefresh,
	}
	if err := circuitPolicy.WithDefaults().Validate(); err != nil {
		return config.NameSetting(err, map[string]string{"FailureThreshold": "POSTLINE_CIRCUIT_THRESHOLD", "BaseCooldown": "POSTLINE_CIRCUIT_COOLDOWN",
			"MaxCooldown": "POSTLINE_CIRCUIT_MAX_COOLDOWN", "RefreshInterval": "POSTLINE_CIRCUIT_REFRESH"})
	}
	relayStates, err := newRelayStatePublisher(pool, s.WorkerID, s.RelayStateInterval, logger, reg)
	if err != nil {
		return err
	}
	kafkaCluster, err := s.Kafka.Cluster("worker")
	if err != nil {
		return err
	}
	cons, err := consumer.New(consumer.Config{
		Kafka:                   kafkaCluster,
		Topic:                   s.JobsTopic,
		GroupID:                 s.Group,
		SessionTimeout:          s.SessionTimeout,
		HeartbeatInterval:       s.HeartbeatInterval,
		CommitInterval:          s.CommitInterval,
		RebalanceTimeout:        s.RebalanceTimeout,
		DrainTimeout:            s.DrainTimeout,
		MaxInFlightPerPartition: s.MaxInFlight,
		MaxInFlightBytes:        s.MaxInFlightBytes,
	}, logger, reg)
	if err != nil {
		return config.NameSetting(err, map[string]string{"Brokers": "POSTLINE_KAFKA_BROKERS", "Topic": "POSTLINE_JOBS_TOPIC",
			"GroupID": "POSTLINE_CONSUMER_GROUP", "SessionTimeout": "POSTLINE_SESSION_TIMEOUT",
			"HeartbeatInterval": "POSTLINE_HEARTBEAT_INTERVAL", "RebalanceTimeout": "POSTLINE_REBALANCE_TIMEOUT",
			"CommitInterval": "POSTLINE_COMMIT_INTERVAL", "DrainTimeout": "POSTLINE_DRAIN_TIMEOUT",
			"MaxInFlightPerPartition": "POSTLINE_MAX_IN_FLIGHT_PER_PARTITION", "MaxInFlightBytes": "POSTLINE_MAX_IN_FLIGHT_BYTES"})
	}
	lag, err := consumer.NewLagMonitor(consumer.LagMonitorConfig{
		Kafka: kafkaCluster, Topic: s.JobsTopic, GroupID: s.Group, Interval: s.LagInterval,
	}, logger, reg)
	if err != nil {
		return config.NameSetting(err, map[string]string{"Interval": "POSTLINE_LAG_INTERVAL"})
	}
	policy, budgets, sendControl, err := s.retryPolicy()
	if err != nil {
		return err
	}
	var pressureGuard *adaptive.PressureGuard
	if sendControl != nil {
		if pressureGuard, err = adaptive.NewPressureGuard(adaptive.PressureConfig{}); err != nil {
			return err
		}
	}
	limits := job.Limits{
		MaxMessageBytes:    s.MaxMessageBytes,
		MaxBodyBytes:       s.MaxBodyBytes,
		MaxAttachmentBytes: s.MaxAttachmentBytes,
	}
	pipelineCfg := delivery.Config{
		Policy:      policy,
		Budgets:     budgets,
		SendControl: sendControl,
		Senders:     s.Senders,
		BatchSize:   s.BatchSize,
		BatchLinger: s.BatchLinger,
		BatchBytes:  s.BatchBytes,
		FastRetries: s.FastRetries,
		Tiers:       tiers,
		RetryLimits: retryLimits,
		Limits:      limits,
		Rules:       rules,

		ConfirmWindow: s.ConfirmWindow,
		NoConfirm:     noConfirm,
	}
	if err := pipelineCfg.WithDefaults().Validate(); err != nil {
		return config.NameSetting(err, map[string]string{"Senders": "POSTLINE_SENDERS", "BatchSize": "POSTLINE_BATCH_SIZE", "BatchBytes": "POSTLINE_BATCH_BYTES",
			"BatchLinger": "POSTLINE_BATCH_LINGER", "FastRetries": "POSTLINE_FAST_RETRIES",
			"MaxMessageBytes": "POSTLINE_MAX_MESSAGE_BYTES", "MaxBodyBytes": "POSTLINE_MAX_BODY_BYTES",
			"MaxAttachmentBytes": "POSTLINE_MAX_ATTACHMENT_BYTES", "ConfirmWindow": "POSTLINE_CONFIRM_WINDOW"})
	}
	topics := workerTopics{jobs: s.JobsTopic, dlq: s.DLQTopic, retries: tiers.Topics(s.RetryPrefix)}

	// The pipeline needs the topics' limits and the circuit breakers, which
	// need their table: all are built once Kafka answers and migrations are
	// applied. Until then the worker is alive but not ready.
	var pipeline atomic.Pointer[delivery.Pipeline]
	var migrated atomic.Bool
	var failed atomic.Pointer[error] // a stage failed for good: unhealthy
	ready := func(ctx context.Context) error {
		if !migrated.Load() {
			return errors.New("starting: Kafka topics or database migrations not checked yet")
		}
		if !cons.Joined() {
			return errors.New("not a member of the consumer group")
		}
		if err := store.Ping(ctx); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		if p := pipeline.Load(); p == nil || !p.Healthy() {
			return errors.New("store or dead-letter calls are failing")
		}
		return nil
	}
	healthy := func() error {
		if err := failed.Load(); err != nil {
			return *err
		}
		return nil
	}
	listener, err := net.Listen("tcp", s.HTTPAddr)
	if err != nil {
		return fmt.Errorf("setting POSTLINE_HTTP_ADDR: %w", err)
	}
	server := &http.Server{Handler: ops.Handler(reg, ready, healthy), ReadHeaderTimeout: 5 * time.Second}

	logger.Info("worker starting", "http_addr", listener.Addr().String(), "topic", s.JobsTopic,
		"group", s.Group, "kafka", kafkaCluster.String(), "retry_policy", s.RetryPolicy, "relays", providerNames, "senders", s.Senders, "bounce_domain", s.BounceDomain,
		"unsubscribe_url", unsubscribeURL(links))

	g, gctx := errgroup.WithContext(context.Background())
	served := make(chan struct{})
	g.Go(func() error {
		defer close(served)
		if err := server.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})

	// Phase one of shutdown: the signal stops consumption; the consumer
	// drains and commits. Phase two: past ShutdownTimeout, in-flight sends
	// are aborted and left uncommitted for redelivery.
	consumeCtx, stopConsuming := context.WithCancel(gctx)
	deliverCtx, hardStop := context.WithCancel(gctx)
	defer stopConsuming()
	defer hardStop()
	finished := make(chan struct{})
	g.Go(func() error {
		select {
		case <-ctx.Done():
			logger.Info("shutting down: no new records; finishing in-flight mail", "timeout", s.ShutdownTimeout)
		case <-finished:
			return nil
		}
		stopConsuming()
		t := time.NewTimer(s.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			logger.Warn("shutdown timeout passed: aborting in-flight mail (it will be redelivered)")
			hardStop()
		case <-finished:
		}
		return nil
	})

	g.Go(func() error {
		defer func() {
			close(finished)
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = server.Shutdown(shutdownCtx)
		}()
		kafkaLimits, err := checkKafka(consumeCtx, kafkaCluster, topics, limits, logger)
		if err != nil {
			if consumeCtx.Err() != nil {
				return nil // stopped before Kafka answered: nothing consumed
			}
			failed.Store(&err)
			return err
		}
		dlq, err := deadletter.New(deadletter.Config{Kafka: kafkaCluster, Topic: s.DLQTopic, MaxMessageBytes: kafkaLimits[s.DLQTopic]}, reg)
		if err != nil {
			return config.NameSetting(err, map[string]string{"Topic": "POSTLINE_DLQ_TOPIC"})
		}
		defer dlq.Close()
		retries, err := retry.NewWriter(retry.WriterConfig{Kafka: kafkaCluster, Prefix: s.RetryPrefix, Tiers: tiers, Limits: kafkaLimits}, reg)
		if err != nil {
			return config.NameSetting(err, map[string]string{"Prefix": "POSTLINE_RETRY_TOPIC_PREFIX", "Tiers": "POSTLINE_RETRY_TIERS"})
		}
		defer retries.Close()
		republisher, err := kafkaCluster.TopicWriter(kafkaclient.WriterConfig{Topic: s.JobsTopic, Name: "publisher", Limits: map[string]int{s.JobsTopic: kafkaLimits[s.JobsTopic]}})
		if err != nil {
			return config.NameSetting(err, map[string]string{"Topic": "POSTLINE_JOBS_TOPIC"})
		}
		defer republisher.Close()
		lists, err := suppression.New(suppression.Config{}, pool, logger, reg)
		if err != nil {
			return err
		}
		sweeper, err := reaper.New(reaper.Config{Interval: s.ReaperInterval, Grace: s.ReaperGrace,
			JobsTopic: s.JobsTopic, Retention: s.Retention}, store, republisher, logger, reg, reaper.WithSuppressions(lists))
		if err != nil {
			return config.NameSetting(err, map[string]string{"Interval": "POSTLINE_REAPER_INTERVAL", "Grace": "POSTLINE_REAPER_GRACE",
				"Retention": "POSTLINE_RETENTION"})
		}
		if err := schema.MigrateWhenReady(consumeCtx, pool, logger); err != nil {
			return nil // stopped before the database came up: nothing consumed
		}
		breakers, err := circuit.New(pool, s.WorkerID, providerNames, circuitPolicy, logger, reg)
		if err != nil {
			return fmt.Errorf("circuit breakers: %w", err)
		}
		eventsLimit, err := eventstream.EnsureTopic(consumeCtx, kafkaCluster, s.EventsTopic, logger)
		if err != nil {
			if consumeCtx.Err() != nil {
				return nil
			}
			failed.Store(&err)
			return err
		}
		events, err := eventstream.New(eventstream.Config{Kafka: kafkaCluster, Topic: s.EventsTopic, MaxMessageBytes: eventsLimit}, reg)
		if err != nil {
			return config.NameSetting(err, map[string]string{"Topic": "POSTLINE_EVENTS_TOPIC"})
		}
		defer events.Close()
		unconfirmed, err := outcome.NewSweeper(outcome.SweepConfig{Interval: s.UnconfirmedSweep}, logger, reg, store, events)
		if err != nil {
			return config.NameSetting(err, map[string]string{"Interval": "POSTLINE_UNCONFIRMED_SWEEP"})
		}
		templates, err := templatestore.New(templatestore.Config{}, pool, logger, reg)
		if err != nil {
			return err
		}
		labels, err := templatestore.NewWatcher(templatestore.WatcherConfig{Interval: s.TemplateRefresh}, templates, logger, reg)
		if err != nil {
			return config.NameSetting(err, map[string]string{"Interval": "POSTLINE_TEMPLATE_REFRESH"})
		}
		comp, err := compose.New(compose.Config{}, logger, reg, templates, labels)
		if err != nil {
			return err
		}
		var returnPaths delivery.ReturnPaths // nil: the job's From
		if signer != nil {
			returnPaths = signer
		}
		var unsubscribes delivery.Unsubscribes // nil: no unsubscribe headers
		if links != nil {
			unsubscribes = links
		}
		p, err := delivery.New(pipelineCfg, logger, reg, delivery.Deps{
			Store:          store,
			Leases:         leases,
			Providers:      providers,
			Breakers:       breakers,
			DeadLetters:    dlq,
			Retries:        retries,
			Events:         events,
			Recipients:     store,
			Suppressions:   suppressionLists{lists},
			ReturnPaths:    returnPaths,
			Unsubscribes:   unsubscribes,
			Composer:       composer{comp},
			Group:          lag,
			Pressure:       pressureGuard,
			TracerProvider: tracerProvider,
		})
		if err != nil {
			return err
		}
		pipeline.Store(p)
		migrated.Store(true)

		// The breakers outlive consumption: in-flight mail still consults
		// them while the consumer drains. They stop with the pipeline.
		breakersCtx, stopBreakers := context.WithCancel(deliverCtx)
		defer stopBreakers()
		// A stage that fails for good takes the worker down with it: the
		// consumer leaves the group (its partitions go to a healthy
		// member), /healthz turns 503 and run returns the error, so the
		// process exits non-zero instead of holding partitions it no
		// longer serves.
		var work errgroup.Group
		stage := func(name string, fn func() error) {
			work.Go(func() error {
				err := fn()
				if err == nil || errors.Is(err, context.Canceled) && (ctx.Err() != nil || failed.Load() != nil) {
					return nil // done, shutting down, or stopped by another stage's failure
				}
				err = fmt.Errorf("%s: %w", name, err)
				if failed.CompareAndSwap(nil, &err) {
					logger.Error("stage failed for good; leaving the group and stopping", "stage", name, "error", err)
				}
				stopConsuming()
				hardStop()
				return err
			})
		}
		stage("consumer", func() error { return cons.Run(consumeCtx) })
		stage("reaper", func() error { return sweeper.Run(consumeCtx) })
		stage("unconfirmed sweep", func() error { return unconfirmed.Run(consumeCtx) })
		// Template labels are followed for as long as jobs may be rendered.
		stage("template labels", func() error { return labels.Run(breakersCtx) })
		stage("lag monitor", func() error { return lag.Run(consumeCtx) })
		if pressureGuard != nil {
			stage("pressure guard", func() error { return pressure.Run(consumeCtx, pressureGuard, time.Second) })
		}
		stage("circuit breakers", func() error { return breakers.Run(breakersCtx) })
		// Leases are kept for as long as the pipeline holds jobs.
		stage("lease keeper", func() error { return leases.Run(breakersCtx) })
		// The fleet's view of this worker's relays, while it sends.
		stage("relay state", func() error { return relayStates.Run(breakersCtx, p) })
		stage("pipeline", func() error {
			defer stopBreakers()
			return p.Run(deliverCtx, cons)
		})
		return work.Wait()
	})

	err = g.Wait()
	logger.Info("worker stopped", "error", err)
	return err
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
