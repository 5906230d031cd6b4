package retry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/configerr"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/metricreg"
	"github.com/postline/postline/internal/topic"
)

// DefaultBatchTimeout is WriterConfig.BatchTimeout's default.
const DefaultBatchTimeout = 2 * time.Millisecond

// Copy is one retry copy of a job record, to publish to its tier's topic.
type Copy struct {
	// Key and Value are the original record's, byte for byte.
	Key, Value []byte
	// Headers are the original record's (trace context and so on); the
	// Writer sets the postline-* retry headers on a copy of them.
	Headers []kafka.Header
	// Attempt is the attempt the copy is for: the failed attempt plus one.
	Attempt int
	// NotBefore is when the copy is due again.
	NotBefore time.Time
	// FirstSeen is when the job was first published. Zero leaves the
	// header of Headers as it is.
	FirstSeen time.Time
	// LastClass is the failure class of the failed attempt. Empty leaves
	// the header of Headers as it is.
	LastClass string
	// Throttles is how many attempts so far failed as throttled (the
	// failed attempt included). 0 leaves the header of Headers as it is.
	Throttles int
	// Tier is the delay topic to write to: one of the Writer's tiers,
	// normally Tiers.Pick(NotBefore - now).
	Tier time.Duration
}

// WriterConfig configures a Writer.
type WriterConfig struct {
	// Kafka is the cluster of the delay topics. Required.
	Kafka *kafkaclient.Cluster
	// Limits are the delay topics' max.message.bytes as the broker reports
	// them (kafkaclient.Cluster.MaxMessageBytes); batches are cut to fit the
	// smallest. Defaults to topic.CopyMaxMessageBytes for every tier, what
	// TopicSpecs creates them with.
	Limits map[string]int
	// Prefix is the delay topics' name prefix. Defaults to DefaultPrefix.
	Prefix string
	// Tiers are the delay tiers; a Copy must name one. Defaults to
	// DefaultTiers.
	Tiers Tiers
	// BatchTimeout bounds how long a write waits to fill a batch; callers
	// publish batches in one call. Defaults to 2ms.
	BatchTimeout time.Duration
}

// WithDefaults returns c with zero fields set to their defaults.
func (c WriterConfig) WithDefaults() WriterConfig {
	c.Prefix = cmp.Or(c.Prefix, DefaultPrefix)
	if len(c.Tiers) == 0 {
		c.Tiers = DefaultTiers
	}
	c.BatchTimeout = cmp.Or(c.BatchTimeout, DefaultBatchTimeout)
	if len(c.Limits) == 0 {
		c.Limits = make(map[string]int, len(c.Tiers))
		for _, name := range c.Tiers.Topics(c.Prefix) {
			c.Limits[name] = topic.CopyMaxMessageBytes
		}
	}
	return c
}

// Validate reports every invalid field by name and value.
func (c WriterConfig) Validate() error {
	var errs []error
	if c.Kafka == nil {
		errs = append(errs, configerr.Errorf("Kafka", "retry writer config: Kafka is nil"))
	}
	for _, name := range c.Tiers.Topics(c.Prefix) {
		if _, ok := c.Limits[name]; !ok {
			errs = append(errs, configerr.Errorf("Limits", "retry writer config: Limits has no max.message.bytes for %s", name))
		}
	}
	if err := c.Tiers.Validate(); err != nil {
		errs = append(errs, configerr.Errorf("Tiers", "retry writer config: Tiers = %v: %w", c.Tiers, err))
	}
	if c.BatchTimeout < 0 {
		errs = append(errs, configerr.Errorf("BatchTimeout", "retry writer config: BatchTimeout = %v: must not be negative", c.BatchTimeout))
	}
	return errors.Join(errs...)
}

// Writer publishes retry copies to the delay topics. It is safe for
// concurrent use. The caller marks the failed record done only after
// Publish returned nil.
type Writer struct {
	cfg       WriterConfig
	w         *kafka.Writer
	closeConn func()
	records   *prometheus.CounterVec
}

// NewWriter returns a Writer for cfg (after cfg.WithDefaults()); its metric
// postline_retry_records_total{tier} registers on reg (nil: unregistered).
// Close it when done.
func NewWriter(cfg WriterConfig, reg prometheus.Registerer) (*Writer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Tiers = slices.Clone(cfg.Tiers)
	set := metricreg.NewExclusiveSet(reg, "retry")
	records := set.CounterVec("records_total", "Retry copies written to the delay topics, by tier.", "tier")
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("retry: register metrics: %w", err)
	}
	for _, d := range cfg.Tiers {
		records.WithLabelValues(TierName(d))
	}
	w, closeConn, err := cfg.Kafka.Writer(kafkaclient.WriterConfig{
		Name:         "retry",
		Limits:       cfg.Limits,
		BatchTimeout: cfg.BatchTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("retry writer: %w", err)
	}
	return &Writer{cfg: cfg, w: w, closeConn: closeConn, records: records}, nil
}

// Publish writes copies in one call and returns once the broker has
// acknowledged every one of them (all in-sync replicas). On error some
// copies may have been written: publishing them again makes exact
// duplicates, which the worker's claim absorbs.
func (w *Writer) Publish(ctx context.Context, copies ...Copy) error {
	if len(copies) == 0 {
		return nil
	}
	msgs := make([]kafka.Message, len(copies))
	for i, c := range copies {
		if !slices.Contains(w.cfg.Tiers, c.Tier) {
			return fmt.Errorf("retry: copy %d: tier %v is not one of %v", i, c.Tier, w.cfg.Tiers)
		}
		if c.Attempt < 1 {
			return fmt.Errorf("retry: copy %d: attempt %d is below 1", i, c.Attempt)
		}
		if c.NotBefore.IsZero() {
			return fmt.Errorf("retry: copy %d: NotBefore is not set", i)
		}
		msgs[i] = kafka.Message{
			Topic:   TopicName(w.cfg.Prefix, c.Tier),
			Key:     c.Key,
			Value:   c.Value,
			Headers: copyHeaders(c),
		}
	}
	if err := w.w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("retry: write %d copies: %w", len(msgs), err)
	}
	for _, c := range copies {
		w.records.WithLabelValues(TierName(c.Tier)).Inc()
	}
	return nil
}

// Close flushes and closes the underlying writer and its connections.
func (w *Writer) Close() error {
	defer w.closeConn()
	return w.w.Close()
}

// copyHeaders returns c.Headers (never modified) with the retry headers set,
// replacing those of an earlier retry.
func copyHeaders(c Copy) []kafka.Header {
	h := jobheader.Set(c.Headers, jobheader.KeyAttempt, strconv.Itoa(c.Attempt))
	h = jobheader.Set(h, jobheader.KeyNotBefore, jobheader.FormatTime(c.NotBefore))
	if !c.FirstSeen.IsZero() {
		h = jobheader.Set(h, jobheader.KeyFirstSeen, jobheader.FormatTime(c.FirstSeen))
	}
	if c.LastClass != "" {
		h = jobheader.Set(h, jobheader.KeyLastClass, c.LastClass)
	}
	if c.Throttles > 0 {
		h = jobheader.Set(h, jobheader.KeyThrottles, strconv.Itoa(c.Throttles))
	}
	return h
}
