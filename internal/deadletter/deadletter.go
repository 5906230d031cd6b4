// Package deadletter owns writing to the dead-letter topic (mail.dlq): a
// dead letter is the original record, byte for byte, with headers saying why
// it died and where it came from, so an operator can inspect it and replay
// it unchanged once the cause is repaired.
//
// The package knows Kafka records and the dead-letter headers of package
// job; it does not know why delivery failed beyond the reason it is given.
package deadletter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/job"
)

// Delivery outcomes that dead-letter a record, next to the validation
// reasons of package job.
const (
	// ReasonSMTPPermanent: the relay rejected the mail permanently (5xx).
	ReasonSMTPPermanent = "smtp_permanent"
	// ReasonMessageIDConflict: the Message-ID was already used for a
	// different payload.
	ReasonMessageIDConflict = "message_id_conflict"
	// ReasonMaxAttempts: the job failed on its last allowed attempt.
	ReasonMaxAttempts = "max_attempts"
	// ReasonMaxAge: the job outlived the age allowed for its priority.
	ReasonMaxAge = "max_age"
)

// maxErrorBytes bounds the error header: it is for humans, and a relay's
// reply can be long.
const maxErrorBytes = 1024

// DefaultTopic is the dead-letter topic.
const DefaultTopic = "mail.dlq"

// Config configures the Writer.
type Config struct {
	// Brokers are the Kafka bootstrap addresses. Required.
	Brokers []string
	// Topic is the dead-letter topic. Defaults to DefaultTopic.
	Topic string
	// BatchTimeout bounds how long a write waits to fill a batch. Defaults
	// to 2ms: callers already write letters in batches.
	BatchTimeout time.Duration
}

// Default values of Config.
const DefaultBatchTimeout = 2 * time.Millisecond

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Topic = cmp.Or(c.Topic, DefaultTopic)
	c.BatchTimeout = cmp.Or(c.BatchTimeout, DefaultBatchTimeout)
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("deadletter: Brokers is empty")
	}
	if c.BatchTimeout < 0 {
		return fmt.Errorf("deadletter: BatchTimeout %s is negative", c.BatchTimeout)
	}
	return nil
}

// Letter is one record to dead-letter.
type Letter struct {
	// Key, Value and Headers are the original record's.
	Key     []byte
	Value   []byte
	Headers []kafka.Header
	// Topic, Partition and Offset locate the original record.
	Topic     string
	Partition int
	Offset    int64
	// Reason is machine-readable: a job.Reason or one of the Reason
	// constants of this package.
	Reason string
	// Class is the failure class ("invalid", "permanent", ...).
	Class string
	// Error is the last error, for humans.
	Error string
	// Attempt is the attempt that failed.
	Attempt int
}

// Writer publishes dead letters. It is safe for concurrent use.
type Writer struct {
	w       *kafka.Writer
	nowFunc func() time.Time
	letters *prometheus.CounterVec
}

// New returns a Writer. Close it when done.
func New(cfg Config, reg prometheus.Registerer) (*Writer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	letters := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "postline",
		Subsystem: "deadletter",
		Name:      "records_total",
		Help:      "Records written to the dead-letter topic, by reason.",
	}, []string{"reason"})
	if err := reg.Register(letters); err != nil {
		return nil, fmt.Errorf("deadletter: register metrics: %w", err)
	}
	// Export the delivery reasons from the start, so rates and alerts see
	// zeros; the many validation reasons of package job appear when used.
	for _, reason := range []string{ReasonSMTPPermanent, ReasonMessageIDConflict, ReasonMaxAttempts, ReasonMaxAge} {
		letters.WithLabelValues(reason)
	}
	return &Writer{
		w: &kafka.Writer{
			Addr:                   kafka.TCP(cfg.Brokers...),
			Topic:                  cfg.Topic,
			Balancer:               kafka.Murmur2Balancer{},
			RequiredAcks:           kafka.RequireAll,
			BatchTimeout:           cfg.BatchTimeout,
			BatchBytes:             16 << 20,
			AllowAutoTopicCreation: false,
		},
		nowFunc: time.Now,
		letters: letters,
	}, nil
}

// Publish writes letters in one call and returns once the broker has
// acknowledged all of them.
func (w *Writer) Publish(ctx context.Context, letters ...Letter) error {
	if len(letters) == 0 {
		return nil
	}
	now := w.nowFunc().UTC().Format(time.RFC3339Nano)
	msgs := make([]kafka.Message, len(letters))
	for i, l := range letters {
		msgs[i] = kafka.Message{Key: l.Key, Value: l.Value, Headers: Headers(l, now)}
	}
	if err := w.w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("deadletter: write %d records: %w", len(msgs), err)
	}
	for _, l := range letters {
		w.letters.WithLabelValues(l.Reason).Inc()
	}
	return nil
}

// Close flushes and closes the underlying writer.
func (w *Writer) Close() error { return w.w.Close() }

// Headers returns the original headers with the dead-letter headers of l set
// (replacing any left by an earlier dead-lettering of the same record).
func Headers(l Letter, now string) []kafka.Header {
	c := job.HeaderCarrier(append([]kafka.Header(nil), l.Headers...))
	c.Set(job.HeaderDLQReason, l.Reason)
	c.Set(job.HeaderDLQClass, l.Class)
	c.Set(job.HeaderDLQError, truncate(l.Error, maxErrorBytes))
	c.Set(job.HeaderDLQOriginalTopic, l.Topic)
	c.Set(job.HeaderDLQOriginalPartition, strconv.Itoa(l.Partition))
	c.Set(job.HeaderDLQOriginalOffset, strconv.FormatInt(l.Offset, 10))
	c.Set(job.HeaderDLQTime, now)
	c.Set(job.HeaderAttempt, strconv.Itoa(max(l.Attempt, 1)))
	return []kafka.Header(c)
}

func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
