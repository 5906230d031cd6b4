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

	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/metricreg"
	"github.com/postline/postline/internal/topic"
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
	// ReasonInternalError: handling the record panicked (a bug of
	// Postline's, not of the job); the stack is in the worker's log. The
	// record is dead-lettered so that its partition goes on.
	ReasonInternalError = "internal_error"
	// ReasonRenderFailed: the job names a template that no version of it
	// could render (a broken template, data its schema refuses). Replay it
	// once the template is fixed.
	ReasonRenderFailed = "render_failed"
)

// maxErrorBytes bounds the error header: it is for humans, and a relay's
// reply can be long.
const maxErrorBytes = 1024

// DefaultTopic is the dead-letter topic.
const DefaultTopic = "mail.dlq"

// Config configures the Writer.
type Config struct {
	// Kafka is the cluster of the dead-letter topic. Required.
	Kafka *kafkaclient.Cluster
	// Topic is the dead-letter topic. Defaults to DefaultTopic.
	Topic string
	// MaxMessageBytes is the topic's max.message.bytes, as the broker
	// reports it (kafkaclient.Cluster.MaxMessageBytes): batches are cut to
	// fit, and a letter that would not fit is shortened (see Publish).
	// Defaults to topic.CopyMaxMessageBytes, what the standard dead-letter
	// topic is created with.
	MaxMessageBytes int
	// BatchTimeout bounds how long a write waits to fill a batch. Defaults
	// to 2ms: callers already write letters in batches.
	BatchTimeout time.Duration
}

// Default values of Config.
const DefaultBatchTimeout = 2 * time.Millisecond

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Topic = cmp.Or(c.Topic, DefaultTopic)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, topic.CopyMaxMessageBytes)
	c.BatchTimeout = cmp.Or(c.BatchTimeout, DefaultBatchTimeout)
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.Kafka == nil {
		return errors.New("deadletter: Kafka is nil")
	}
	if c.MaxMessageBytes < minMessageBytes {
		return fmt.Errorf("deadletter: MaxMessageBytes %d is below %d: no letter would fit", c.MaxMessageBytes, minMessageBytes)
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
	w         *kafka.Writer
	closeConn func()
	maxRecord int // largest record, as kafka-go counts it, the topic takes
	nowFunc   func() time.Time
	letters   *prometheus.CounterVec
	shortened prometheus.Counter
}

// New returns a Writer. Close it when done.
func New(cfg Config, reg prometheus.Registerer) (*Writer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	set := metricreg.NewExclusiveSet(reg, "deadletter")
	letters := set.CounterVec("records_total", "Records written to the dead-letter topic, by reason.", "reason")
	shortened := set.Counter("shortened_total", "Dead letters whose original value or headers were left out because the dead-letter topic could not take them whole.")
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("deadletter: register metrics: %w", err)
	}
	// Export the delivery reasons from the start, so rates and alerts see
	// zeros; the many validation reasons of package job appear when used.
	for _, reason := range []string{ReasonSMTPPermanent, ReasonMessageIDConflict, ReasonMaxAttempts, ReasonMaxAge, ReasonInternalError} {
		letters.WithLabelValues(reason)
	}
	w, closeConn, err := cfg.Kafka.Writer(kafkaclient.WriterConfig{
		Topic:        cfg.Topic,
		Name:         "dlq",
		Limits:       map[string]int{cfg.Topic: cfg.MaxMessageBytes},
		BatchTimeout: cfg.BatchTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("deadletter: %w", err)
	}
	return &Writer{
		w:         w,
		closeConn: closeConn,
		maxRecord: kafkaclient.MaxRecordBytes(cfg.MaxMessageBytes),
		nowFunc:   time.Now,
		letters:   letters,
		shortened: shortened,
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
		msg, short := fit(kafka.Message{Key: l.Key, Value: l.Value, Headers: Headers(l, now)}, w.maxRecord)
		if short {
			w.shortened.Inc()
		}
		msgs[i] = msg
	}
	if err := w.w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("deadletter: write %d records: %w", len(msgs), err)
	}
	for _, l := range letters {
		w.letters.WithLabelValues(l.Reason).Inc()
	}
	return nil
}

// Close flushes and closes the underlying writer and its connections.
func (w *Writer) Close() error {
	defer w.closeConn()
	return w.w.Close()
}

// minMessageBytes is the least max.message.bytes a dead-letter topic needs:
// room for the dead-letter headers of a letter whose value and original
// headers were left out.
const minMessageBytes = 8 << 10

// fit returns msg, shortened if it is larger than maxRecord bytes (as
// kafka-go counts them): first the value is left out, then the headers the
// record came with (trace context and the producer's own), keeping the
// dead-letter headers. What was left out is named in jobheader.KeyDLQOmitted with
// the original sizes, so the letter still says why the job died and where
// the original record is (its topic, partition and offset). A letter must be
// written whatever its size: one that the topic refuses would stop the
// partition it came from.
func fit(msg kafka.Message, maxRecord int) (kafka.Message, bool) {
	if recordBytes(msg) <= maxRecord {
		return msg, false
	}
	omitted := fmt.Sprintf("value=%d", len(msg.Value))
	msg.Value = nil
	if recordBytes(msg) > maxRecord {
		kept := msg.Headers[:0:0]
		dropped := 0
		for _, h := range msg.Headers {
			if strings.HasPrefix(h.Key, jobheader.Prefix) {
				kept = append(kept, h)
			} else {
				dropped++
			}
		}
		msg.Headers = kept
		omitted += fmt.Sprintf(" headers=%d", dropped)
	}
	if recordBytes(msg) > maxRecord {
		// The key or the dead-letter headers themselves: keep only the
		// reason and the origin.
		msg.Key = nil
		kept := msg.Headers[:0:0]
		for _, h := range msg.Headers {
			switch h.Key {
			case jobheader.KeyDLQReason, jobheader.KeyDLQClass, jobheader.KeyDLQOriginalTopic, jobheader.KeyDLQOriginalPartition,
				jobheader.KeyDLQOriginalOffset, jobheader.KeyDLQTime:
				kept = append(kept, h)
			}
		}
		msg.Headers = kept
		omitted += " key"
	}
	msg.Headers = jobheader.Set(msg.Headers, jobheader.KeyDLQOmitted, omitted)
	return msg, true
}

// recordBytes is m's size as the writer counts it.
func recordBytes(m kafka.Message) int { return kafkaclient.RecordBytes(m.Key, m.Value, m.Headers) }

// Headers returns the original headers with the dead-letter headers of l set
// (replacing any left by an earlier dead-lettering of the same record).
func Headers(l Letter, now string) []kafka.Header {
	c := jobheader.Carrier(append([]kafka.Header(nil), l.Headers...))
	c.Set(jobheader.KeyDLQReason, l.Reason)
	c.Set(jobheader.KeyDLQClass, l.Class)
	c.Set(jobheader.KeyDLQError, truncate(l.Error, maxErrorBytes))
	c.Set(jobheader.KeyDLQOriginalTopic, l.Topic)
	c.Set(jobheader.KeyDLQOriginalPartition, strconv.Itoa(l.Partition))
	c.Set(jobheader.KeyDLQOriginalOffset, strconv.FormatInt(l.Offset, 10))
	c.Set(jobheader.KeyDLQTime, now)
	c.Set(jobheader.KeyAttempt, strconv.Itoa(max(l.Attempt, 1)))
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
