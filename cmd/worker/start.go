package main

import (
	"context"
	"fmt"
	"time"

	"github.com/postline/postline/internal/circuit"
	"github.com/postline/postline/internal/compose"
	"github.com/postline/postline/internal/config"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/delivery"
	"github.com/postline/postline/internal/eventstream"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/outcome"
	"github.com/postline/postline/internal/pressure"
	"github.com/postline/postline/internal/reaper"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/supervisor"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/templatestore"
)

// started are the parts built once Kafka answers and the migrations are
// applied, with what closes them when the worker stops.
type started struct {
	dlq         *deadletter.Writer
	retries     *retry.Writer
	republisher *kafkaclient.TopicWriter
	events      *eventstream.Writer
	lists       *suppression.Store
	sweeper     *reaper.Reaper
	unconfirmed *outcome.Sweeper
	breakers    *circuit.Breakers
	labels      *templatestore.Watcher
	pipeline    *delivery.Pipeline
	closers     []func()
}

// close closes what was opened, last first.
func (st *started) close() {
	for i := len(st.closers) - 1; i >= 0; i-- {
		st.closers[i]()
	}
}

// start waits for Kafka and the database, builds the parts that need them,
// and runs every stage until the worker stops. Stopped before Kafka or the
// database answered, it returns the intake's cancellation: nothing was
// consumed.
func (w *worker) start(p supervisor.Phases) error {
	st := &started{}
	defer st.close()
	if err := w.openWriters(p.Intake, st); err != nil {
		return err
	}
	if err := w.buildStages(p.Intake, st); err != nil {
		return err
	}
	w.pipeline.Store(st.pipeline)
	w.migrated.Store(true)
	return p.Run(w.stages(p, st)...)
}

// openWriters waits for Kafka, checks its topics' limits and opens the
// writers of the dead-letter, delay and jobs topics, and builds the reaper.
func (w *worker) openWriters(ctx context.Context, st *started) error {
	s := &w.s
	kafkaLimits, err := checkKafka(ctx, w.cluster, w.topics, w.limits, w.logger)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err() // stopped before Kafka answered: nothing consumed
		}
		return err
	}
	if st.dlq, err = deadletter.New(deadletter.Config{Kafka: w.cluster, Topic: s.DLQTopic, MaxMessageBytes: kafkaLimits[s.DLQTopic]}, w.reg); err != nil {
		return config.NameSetting(err, map[string]string{"Topic": "POSTLINE_DLQ_TOPIC"})
	}
	st.closers = append(st.closers, func() { _ = st.dlq.Close() })
	st.retries, err = retry.NewWriter(retry.WriterConfig{Kafka: w.cluster, Prefix: s.RetryPrefix, Tiers: w.tiers, Limits: kafkaLimits}, w.reg)
	if err != nil {
		return config.NameSetting(err, map[string]string{"Prefix": "POSTLINE_RETRY_TOPIC_PREFIX", "Tiers": "POSTLINE_RETRY_TIERS"})
	}
	st.closers = append(st.closers, func() { _ = st.retries.Close() })
	st.republisher, err = w.cluster.TopicWriter(kafkaclient.WriterConfig{Topic: s.JobsTopic, Name: "publisher", Limits: map[string]int{s.JobsTopic: kafkaLimits[s.JobsTopic]}})
	if err != nil {
		return config.NameSetting(err, map[string]string{"Topic": "POSTLINE_JOBS_TOPIC"})
	}
	st.closers = append(st.closers, func() { _ = st.republisher.Close() })
	if st.lists, err = suppression.New(suppression.Config{}, w.pool, w.logger, w.reg); err != nil {
		return err
	}
	st.sweeper, err = reaper.New(reaper.Config{Interval: s.ReaperInterval, Grace: s.ReaperGrace,
		JobsTopic: s.JobsTopic, Retention: s.Retention}, w.store, st.republisher, w.logger, w.reg, reaper.WithSuppressions(st.lists))
	if err != nil {
		return config.NameSetting(err, map[string]string{"Interval": "POSTLINE_REAPER_INTERVAL", "Grace": "POSTLINE_REAPER_GRACE",
			"Retention": "POSTLINE_RETENTION"})
	}
	return nil
}

// buildStages applies the migrations once the database answers, then
// builds the circuit breakers, the events writer, the unconfirmed sweep,
// the template labels' watcher and the pipeline.
func (w *worker) buildStages(ctx context.Context, st *started) error {
	s := &w.s
	if err := schema.MigrateWhenReady(ctx, w.pool, w.logger); err != nil {
		return err // stopped before the database came up: nothing consumed
	}
	var err error
	if st.breakers, err = circuit.New(w.pool, s.WorkerID, w.relayNames, w.circuitPolicy, w.logger, w.reg); err != nil {
		return fmt.Errorf("circuit breakers: %w", err)
	}
	eventsLimit, err := eventstream.EnsureTopic(ctx, w.cluster, s.EventsTopic, w.logger)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	if st.events, err = eventstream.New(eventstream.Config{Kafka: w.cluster, Topic: s.EventsTopic, MaxMessageBytes: eventsLimit}, w.reg); err != nil {
		return config.NameSetting(err, map[string]string{"Topic": "POSTLINE_EVENTS_TOPIC"})
	}
	st.closers = append(st.closers, func() { _ = st.events.Close() })
	if st.unconfirmed, err = outcome.NewSweeper(outcome.SweepConfig{Interval: s.UnconfirmedSweep}, w.logger, w.reg, w.store, st.events); err != nil {
		return config.NameSetting(err, map[string]string{"Interval": "POSTLINE_UNCONFIRMED_SWEEP"})
	}
	templates, err := templatestore.New(templatestore.Config{}, w.pool, w.logger, w.reg)
	if err != nil {
		return err
	}
	if st.labels, err = templatestore.NewWatcher(templatestore.WatcherConfig{Interval: s.TemplateRefresh}, templates, w.logger, w.reg); err != nil {
		return config.NameSetting(err, map[string]string{"Interval": "POSTLINE_TEMPLATE_REFRESH"})
	}
	comp, err := compose.New(compose.Config{}, w.logger, w.reg, templates, st.labels)
	if err != nil {
		return err
	}
	st.pipeline, err = delivery.New(w.pipelineCfg, w.logger, w.reg, w.pipelineDeps(st, comp))
	return err
}

// pipelineDeps are the pipeline's dependencies.
func (w *worker) pipelineDeps(st *started, comp *compose.Composer) delivery.Deps {
	var returnPaths delivery.ReturnPaths // nil: the job's From
	if w.signer != nil {
		returnPaths = w.signer
	}
	var unsubscribes delivery.Unsubscribes // nil: no unsubscribe headers
	if w.links != nil {
		unsubscribes = w.links
	}
	return delivery.Deps{
		Store:          w.store,
		Leases:         w.leases,
		Relays:         w.relays,
		Breakers:       st.breakers,
		DeadLetters:    st.dlq,
		Retries:        st.retries,
		Events:         st.events,
		Recipients:     w.store,
		Suppressions:   suppressionLists{st.lists},
		ReturnPaths:    returnPaths,
		Unsubscribes:   unsubscribes,
		Composer:       composer{comp},
		Group:          w.lag,
		Pressure:       w.pressureGuard,
		TracerProvider: w.tracerProvider,
	}
}

// stages are what the worker runs. A stage that fails for good takes the
// worker down with it: the consumer leaves the group (its partitions go to
// a healthy member), /healthz turns 503 and run returns the error, so the
// process exits non-zero instead of holding partitions it no longer serves.
func (w *worker) stages(p supervisor.Phases, st *started) []supervisor.Stage {
	// The breakers outlive consumption: in-flight mail still consults
	// them while the consumer drains. They stop with the pipeline.
	breakersCtx, stopBreakers := context.WithCancel(p.Work)
	intake := p.Intake
	stage := func(name string, fn func() error) supervisor.Stage {
		return supervisor.Stage{Name: name, Run: func(supervisor.Phases) error { return fn() }}
	}
	stages := []supervisor.Stage{
		stage("consumer", func() error { return w.cons.Run(intake) }),
		stage("reaper", func() error { return st.sweeper.Run(intake) }),
		stage("unconfirmed sweep", func() error { return st.unconfirmed.Run(intake) }),
		// Template labels are followed for as long as jobs may be rendered.
		stage("template labels", func() error { return st.labels.Run(breakersCtx) }),
		stage("lag monitor", func() error { return w.lag.Run(intake) }),
	}
	if w.pressureGuard != nil {
		stages = append(stages, stage("pressure guard", func() error { return pressure.Run(intake, w.pressureGuard, time.Second) }))
	}
	return append(stages,
		stage("circuit breakers", func() error { return st.breakers.Run(breakersCtx) }),
		// Leases are kept for as long as the pipeline holds jobs.
		stage("lease keeper", func() error { return w.leases.Run(breakersCtx) }),
		// The fleet's view of this worker's relays, while it sends.
		stage("relay state", func() error { return w.relayStates.Run(breakersCtx, st.pipeline) }),
		stage("pipeline", func() error {
			defer stopBreakers()
			return st.pipeline.Run(p.Work, w.cons)
		}),
	)
}
