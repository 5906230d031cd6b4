package retry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"

	"github.com/postline/postline/internal/backoff"
	"github.com/postline/postline/internal/configerr"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/delay"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/metricreg"
	"github.com/postline/postline/internal/topic"
)

// Defaults of SchedulerConfig.
const (
	DefaultJobsTopic      = "mail.jobs"
	DefaultSchedulerGroup = "postline-retry-scheduler"
	DefaultMaxJitter      = time.Second
	DefaultBatchSize      = 256
	DefaultBatchLinger    = 5 * time.Millisecond
)

// maxJitterShare caps a record's jitter at this share of its tier, so a 5s
// tier is not delayed by a whole second more.
const maxJitterShare = 10

// Backoff of a failed produce to the jobs topic: it starts at
// produceBackoffMin and doubles up to produceBackoffMax.
const (
	produceBackoffMin = 200 * time.Millisecond
	produceBackoffMax = 5 * time.Second
)

// SchedulerConfig configures a Scheduler.
type SchedulerConfig struct {
	// Kafka is the cluster of the delay and jobs topics. Required.
	Kafka *kafkaclient.Cluster
	// Prefix is the delay topics' name prefix. Defaults to DefaultPrefix.
	Prefix string
	// Tiers are the delay tiers whose topics are consumed. Defaults to
	// DefaultTiers.
	Tiers Tiers
	// JobsTopic is where due records are re-injected. Defaults to
	// "mail.jobs".
	JobsTopic string
	// JobsMaxMessageBytes is the jobs topic's max.message.bytes as the
	// broker reports it: batches are cut to fit, and a record too large
	// for it goes to RejectFunc. Defaults to topic.MaxMessageBytes.
	JobsMaxMessageBytes int
	// RejectFunc takes a due record that can never be re-injected (larger
	// than the jobs topic accepts) with a machine-readable reason; once it
	// returns nil the record is done. Required: without it such a record
	// would stop its partition.
	RejectFunc func(ctx context.Context, m consumer.Message, reason, detail string) error
	// GroupID is the consumer group of all scheduler replicas. Defaults to
	// "postline-retry-scheduler".
	GroupID string
	// MaxJitter spreads the re-injections of records due together over
	// [0, MaxJitter), and at most a tenth of the record's tier, so retries
	// do not arrive as one wave. Negative disables jitter. Defaults to 1s.
	MaxJitter time.Duration
	// BatchSize is the most records produced in one write. Defaults to 256.
	BatchSize int
	// BatchLinger is how long a partial batch waits to fill. Defaults to
	// 5ms.
	BatchLinger time.Duration
	// SessionTimeout, HeartbeatInterval, DrainTimeout and RebalanceTimeout
	// are passed to the consumer (see consumer.Config). They default to the
	// consumer's defaults. On shutdown, records parked until later than
	// DrainTimeout are left uncommitted for the next member.
	SessionTimeout, HeartbeatInterval, DrainTimeout, RebalanceTimeout time.Duration
	// MaxInFlightBytes bounds the bytes of the records parked until due,
	// passed to the consumer (consumer.Config.MaxInFlightBytes): each delay
	// topic partition holds its share, and reads on only as it re-injects.
	// Defaults to the consumer's default.
	MaxInFlightBytes int64
	// NowFunc is the clock. Defaults to time.Now.
	NowFunc func() time.Time
	// TracerProvider makes a "reinject" span per re-injected record (see
	// tracing.go). Defaults to a no-op provider: no spans, and records
	// keep the trace context they came with.
	TracerProvider trace.TracerProvider
}

// WithDefaults returns c with zero fields set to their defaults.
func (c SchedulerConfig) WithDefaults() SchedulerConfig {
	c.Prefix = cmp.Or(c.Prefix, DefaultPrefix)
	if len(c.Tiers) == 0 {
		c.Tiers = DefaultTiers
	}
	c.JobsTopic = cmp.Or(c.JobsTopic, DefaultJobsTopic)
	c.JobsMaxMessageBytes = cmp.Or(c.JobsMaxMessageBytes, topic.MaxMessageBytes)
	c.GroupID = cmp.Or(c.GroupID, DefaultSchedulerGroup)
	c.MaxJitter = cmp.Or(c.MaxJitter, DefaultMaxJitter)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.BatchLinger = cmp.Or(c.BatchLinger, DefaultBatchLinger)
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	return c
}

// consumerConfig is the configuration of the scheduler's consumer.
func (c SchedulerConfig) consumerConfig() consumer.Config {
	return consumer.Config{
		Kafka:             c.Kafka,
		Topics:            c.Tiers.Topics(c.Prefix),
		GroupID:           c.GroupID,
		SessionTimeout:    c.SessionTimeout,
		HeartbeatInterval: c.HeartbeatInterval,
		DrainTimeout:      c.DrainTimeout,
		RebalanceTimeout:  c.RebalanceTimeout,
		MaxInFlightBytes:  c.MaxInFlightBytes,
	}
}

// Validate reports every invalid field by name and value, the consumer's
// settings included.
func (c SchedulerConfig) Validate() error {
	var errs []error
	bad := func(field string, value any, why string) {
		errs = append(errs, configerr.Errorf(field, "retry scheduler config: %s = %v: %s", field, value, why))
	}
	if c.Kafka == nil {
		bad("Kafka", "nil", "required")
	}
	if c.RejectFunc == nil {
		bad("RejectFunc", "nil", "required")
	}
	if err := c.Tiers.Validate(); err != nil {
		bad("Tiers", c.Tiers, err.Error())
	}
	if c.JobsTopic == "" {
		bad("JobsTopic", `""`, "required")
	}
	if slices.Contains(c.Tiers.Topics(c.Prefix), c.JobsTopic) {
		bad("JobsTopic", c.JobsTopic, "is one of the delay topics")
	}
	if c.BatchSize < 1 {
		bad("BatchSize", c.BatchSize, "must be at least 1")
	}
	if c.BatchLinger < 0 {
		bad("BatchLinger", c.BatchLinger, "must not be negative")
	}
	if c.Kafka != nil && c.Tiers.Validate() == nil && c.GroupID != "" {
		if err := c.consumerConfig().WithDefaults().Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Scheduler re-injects due retry copies from the delay topics into the jobs
// topic. Create it with NewScheduler, start it with Run.
type Scheduler struct {
	cfg       SchedulerConfig
	logger    *slog.Logger
	cons      *consumer.Consumer
	w         *kafka.Writer
	closeConn func()
	maxRecord int // largest record the jobs topic takes, as kafka-go counts it
	queue     *delay.Queue[parked]
	tiers     map[string]time.Duration // topic -> tier
	metrics   *schedulerMetrics
	tracer    trace.Tracer
	healthy   atomic.Bool // the last produce succeeded

	// jitterFunc returns a random duration in [0, n); tests replace it.
	jitterFunc func(n time.Duration) time.Duration
}

// parked is one record waiting for its time.
type parked struct {
	msg     consumer.Message
	tier    string    // tier label
	planned time.Time // not-before plus jitter

	// Set once the record is due (startReinject).
	span    trace.Span     // the reinject span
	headers []kafka.Header // msg's headers with the reinject span's context
}

// NewScheduler returns a Scheduler for cfg (after cfg.WithDefaults()). Its
// metrics, and its consumer's, register on reg (nil: unregistered).
func NewScheduler(cfg SchedulerConfig, logger *slog.Logger, reg prometheus.Registerer) (*Scheduler, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		return nil, errors.New("retry scheduler: logger is nil")
	}
	cfg.Tiers = slices.Clone(cfg.Tiers)
	topics := cfg.Tiers.Topics(cfg.Prefix)
	cons, err := consumer.New(cfg.consumerConfig(), logger, reg)
	if err != nil {
		return nil, err
	}
	m, err := newSchedulerMetrics(reg, cfg.Tiers)
	if err != nil {
		return nil, err
	}
	tiers := make(map[string]time.Duration, len(cfg.Tiers))
	for i, d := range cfg.Tiers {
		tiers[topics[i]] = d
	}
	w, closeConn, err := cfg.Kafka.Writer(kafkaclient.WriterConfig{
		Topic:        cfg.JobsTopic,
		Name:         "reinject",
		Limits:       map[string]int{cfg.JobsTopic: cfg.JobsMaxMessageBytes},
		BatchSize:    cfg.BatchSize,
		BatchTimeout: time.Millisecond, // batches are cut here
	})
	if err != nil {
		return nil, fmt.Errorf("retry scheduler: %w", err)
	}
	s := &Scheduler{
		cfg:        cfg,
		logger:     logger.With("component", "retry-scheduler"),
		cons:       cons,
		w:          w,
		closeConn:  closeConn,
		maxRecord:  kafkaclient.MaxRecordBytes(cfg.JobsMaxMessageBytes),
		queue:      delay.New[parked](cfg.NowFunc),
		tiers:      tiers,
		metrics:    m,
		tracer:     cfg.TracerProvider.Tracer(tracerName),
		jitterFunc: randomJitter,
	}
	s.healthy.Store(true)
	return s, nil
}

// Ready reports whether the scheduler holds a consumer-group generation and
// its last write to the jobs topic succeeded (for /readyz).
func (s *Scheduler) Ready() bool {
	return s.cons.Joined() && s.healthy.Load()
}

// Run schedules until ctx is cancelled, then stops fetching, re-injects the
// records that fall due within the consumer's DrainTimeout, commits, leaves
// the group and returns. Records parked for later are left uncommitted:
// whichever member owns their partition next reads them again. Run may be
// called once.
func (s *Scheduler) Run(ctx context.Context) error {
	defer func() {
		if err := s.w.Close(); err != nil {
			s.logger.Warn("close jobs writer", "err", err)
		}
		s.closeConn()
		for _, d := range s.cfg.Tiers {
			s.metrics.waiting.WithLabelValues(TierName(d)).Set(0)
		}
	}()
	// The pipeline outlives ctx until the consumer has drained and made its
	// final commit; then it stops.
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	due := make(chan parked)
	// A failure that cannot heal stops consumption too: the scheduler
	// leaves the group and Run returns the error, rather than holding
	// partitions it can no longer serve.
	consumeCtx, stopConsuming := context.WithCancel(ctx)
	defer stopConsuming()
	var g errgroup.Group
	g.Go(func() error {
		defer stopWork()
		return s.cons.Run(consumeCtx)
	})
	g.Go(func() error {
		for m := range s.cons.Messages() {
			s.park(m)
		}
		return nil
	})
	g.Go(func() error {
		if n := s.queue.Run(workCtx, nil, due); n > 0 {
			s.logger.Info("records left parked at shutdown; the next owner of their partitions re-reads them", "records", n)
		}
		return nil
	})
	g.Go(func() error {
		err := s.produceLoop(workCtx, due)
		if err != nil {
			stopConsuming()
		}
		return err
	})
	return g.Wait()
}

// park computes when m is due and queues it.
func (s *Scheduler) park(m consumer.Message) {
	tier := s.tiers[m.Topic]
	label := TierName(tier)
	now := s.cfg.NowFunc()
	notBefore, ok := jobheader.NotBefore(m.Headers)
	if !ok {
		s.logger.Warn("record without a valid not-before header; re-injecting it now",
			"topic", m.Topic, "partition", m.Partition, "offset", m.Offset)
		s.metrics.invalid.Inc()
		notBefore = now
	}
	planned := notBefore.Add(s.jitterFunc(maxJitter(tier, s.cfg.MaxJitter)))
	s.metrics.waiting.WithLabelValues(label).Inc()
	s.queue.Add(planned, parked{msg: m, tier: label, planned: planned})
}

// maxJitter is the jitter bound of a record of tier: limit, but at most a
// tenth of the tier; 0 when jitter is disabled.
func maxJitter(tier, limit time.Duration) time.Duration {
	if limit <= 0 {
		return 0
	}
	return min(limit, tier/maxJitterShare)
}

// randomJitter returns a uniformly random duration in [0, n), or 0 when n
// is not positive.
func randomJitter(n time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	return rand.N(n)
}

// produceLoop cuts batches of due records and re-injects them until ctx
// ends, or until a write fails in a way trying again cannot mend: then it
// returns that error.
func (s *Scheduler) produceLoop(ctx context.Context, due <-chan parked) error {
	batch := make([]parked, 0, s.cfg.BatchSize)
	linger := time.NewTimer(time.Hour)
	defer linger.Stop()
	for {
		batch = batch[:0]
		select {
		case p := <-due:
			batch = append(batch, s.startReinject(p))
			s.metrics.waiting.WithLabelValues(p.tier).Dec()
		case <-ctx.Done():
			return nil
		}
		linger.Reset(s.cfg.BatchLinger)
	fill:
		for len(batch) < s.cfg.BatchSize {
			select {
			case p := <-due:
				batch = append(batch, s.startReinject(p))
				s.metrics.waiting.WithLabelValues(p.tier).Dec()
			case <-linger.C:
				break fill
			case <-ctx.Done():
				abandon(batch)
				return nil
			}
		}
		if err := s.produce(ctx, batch); err != nil {
			return err
		}
	}
}

// produce writes batch to the jobs topic, retrying failed records with
// backoff, and marks each record done once the broker acknowledged it.
// Records too large for the jobs topic go to RejectFunc instead. It returns
// nil when the batch is done or ctx ended first (the unwritten records stay
// uncommitted), and the error when a write fails in a way trying again cannot
// mend (kafkaclient.MayHeal).
func (s *Scheduler) produce(ctx context.Context, batch []parked) error {
	pending := make([]parked, 0, len(batch))
	for _, p := range batch {
		if n := kafkaclient.RecordBytes(p.msg.Key, p.msg.Value, p.headers); n > s.maxRecord {
			if err := s.reject(ctx, p, fmt.Sprintf("%d bytes, the jobs topic %s takes at most %d", n, s.cfg.JobsTopic, s.maxRecord)); err != nil {
				return err
			}
			continue
		}
		pending = append(pending, p)
	}
	if len(pending) == 0 {
		return nil
	}
	err := backoff.Policy{First: produceBackoffMin, Max: produceBackoffMax, Permanent: cannotHeal,
		OnWait: func(err error, _ int, wait time.Duration) {
			s.healthy.Store(false)
			s.metrics.produceErrors.Inc()
			s.logger.Warn("re-inject into the jobs topic failed; trying again", "topic", s.cfg.JobsTopic,
				"records", len(pending), "err", err, "wait", wait)
		}}.Do(ctx, func() error {
		var err error
		pending, err = s.write(ctx, pending)
		return err
	})
	switch {
	case err == nil:
		s.healthy.Store(true)
		return nil
	case ctx.Err() != nil:
		abandon(pending)
		return nil
	default:
		s.healthy.Store(false)
		s.metrics.produceErrors.Inc()
		abandon(pending)
		return fmt.Errorf("re-inject %d records into %s: %w", len(pending), s.cfg.JobsTopic, err)
	}
}

// write writes pending to the jobs topic and marks done what the broker
// acknowledged; it returns the records still to write and the write's
// error.
func (s *Scheduler) write(ctx context.Context, pending []parked) ([]parked, error) {
	msgs := make([]kafka.Message, len(pending))
	for i, p := range pending {
		msgs[i] = kafka.Message{Key: p.msg.Key, Value: p.msg.Value, Headers: p.headers}
	}
	err := s.w.WriteMessages(ctx, msgs...)
	if err == nil {
		s.acked(pending)
		return nil, nil
	}
	var werrs kafka.WriteErrors
	if errors.As(err, &werrs) && len(werrs) == len(pending) {
		var failed, written []parked
		for i, e := range werrs {
			if e == nil {
				written = append(written, pending[i])
			} else {
				failed = append(failed, pending[i])
			}
		}
		s.acked(written)
		pending = failed
	}
	return pending, err
}

// ReasonReinjectOversize is the reason a due record is rejected when it is
// larger than the jobs topic accepts.
const ReasonReinjectOversize = "reinject_oversize"

// reject hands p to RejectFunc, retrying what may heal, and marks it done.
func (s *Scheduler) reject(ctx context.Context, p parked, detail string) error {
	err := backoff.Policy{First: produceBackoffMin, Max: produceBackoffMax, Permanent: cannotHeal,
		OnWait: func(err error, _ int, wait time.Duration) {
			s.logger.Warn("dead-lettering an oversize record failed; trying again", "topic", p.msg.Topic,
				"partition", p.msg.Partition, "offset", p.msg.Offset, "err", err, "wait", wait)
		}}.Do(ctx, func() error { return s.cfg.RejectFunc(ctx, p.msg, ReasonReinjectOversize, detail) })
	switch {
	case err == nil:
		s.metrics.rejected.Inc()
		s.cons.MarkDone(p.msg)
		endReinject(p.span, 0)
		return nil
	case ctx.Err() != nil:
		return nil
	default:
		return fmt.Errorf("reject an oversize record of %s: %w", p.msg.Topic, err)
	}
}

// cannotHeal is a Kafka failure trying again cannot mend.
func cannotHeal(err error) bool { return !kafkaclient.MayHeal(err) }

// acked records the re-injection of written records and marks them done.
func (s *Scheduler) acked(written []parked) {
	now := s.cfg.NowFunc()
	for _, p := range written {
		late := lateness(now, p.planned)
		s.metrics.lateness.WithLabelValues(p.tier).Observe(late.Seconds())
		s.metrics.reinjected.WithLabelValues(p.tier).Inc()
		s.cons.MarkDone(p.msg)
		endReinject(p.span, late)
	}
}

// lateness is how much later than planned a record was re-injected; never
// negative.
func lateness(produced, planned time.Time) time.Duration {
	return max(0, produced.Sub(planned))
}

type schedulerMetrics struct {
	lateness      *prometheus.HistogramVec
	reinjected    *prometheus.CounterVec
	waiting       *prometheus.GaugeVec
	invalid       prometheus.Counter
	produceErrors prometheus.Counter
	rejected      prometheus.Counter
}

func newSchedulerMetrics(reg prometheus.Registerer, tiers Tiers) (*schedulerMetrics, error) {
	set := metricreg.NewExclusiveSet(reg, "scheduler")
	m := &schedulerMetrics{
		lateness: set.HistogramVec("lateness_seconds", "How much later than planned (not-before plus jitter) a record was re-injected, by tier.", []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
			300, 900, 3600}, "tier"),
		reinjected:    set.CounterVec("reinjected_total", "Records re-injected into the jobs topic, by tier.", "tier"),
		waiting:       set.GaugeVec("waiting", "Records read from a delay topic and waiting for their time, by tier.", "tier"),
		invalid:       set.Counter("invalid_not_before_total", "Records without a valid not-before header, re-injected at once."),
		produceErrors: set.Counter("produce_errors_total", "Failed writes to the jobs topic (retried)."),
		rejected:      set.Counter("rejected_total", "Due records dead-lettered instead of re-injected: larger than the jobs topic accepts."),
	}
	for _, d := range tiers {
		l := TierName(d)
		m.lateness.WithLabelValues(l)
		m.reinjected.WithLabelValues(l)
		m.waiting.WithLabelValues(l)
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("retry scheduler: register metrics: %w", err)
	}
	return m, nil
}
