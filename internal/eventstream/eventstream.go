// Package eventstream writes Postline's events (package event) to the
// events topic: one record per event, keyed by Message-ID so that a mail's
// events stay in order on one partition, with the event type in a header
// for consumers that filter without decoding. It knows Kafka records, not
// what the transitions mean: the worker and the report receiver decide
// which events to write, and write them before the state they report.
package eventstream

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/metricreg"
	"github.com/postline/postline/internal/topic"
)

// DefaultTopic is the events topic.
const DefaultTopic = "mail.events"

// HeaderType is the record header holding the event's type.
const HeaderType = "postline-event-type"

// defaultMaxMessageBytes is what Config.MaxMessageBytes assumes for a
// topic created with the broker's defaults (message.max.bytes, about 1 MB).
const defaultMaxMessageBytes = 1 << 20

// Config configures a Writer.
type Config struct {
	// Kafka is the cluster. Required.
	Kafka *kafkaclient.Cluster
	// Topic is the events topic. Defaults to DefaultTopic.
	Topic string
	// MaxMessageBytes is the topic's max.message.bytes. Defaults to 1 MiB;
	// an event is a few hundred bytes.
	MaxMessageBytes int
	// BatchTimeout bounds how long a write waits to fill a batch. Defaults
	// to 2ms: callers hand over whole batches.
	BatchTimeout time.Duration
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Topic = cmp.Or(c.Topic, DefaultTopic)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, defaultMaxMessageBytes)
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Kafka == nil:
		return errors.New("eventstream config: Kafka is required")
	case c.MaxMessageBytes < 4<<10:
		return fmt.Errorf("eventstream config: MaxMessageBytes %d is below 4 KiB", c.MaxMessageBytes)
	}
	return nil
}

// eventBatchSize caps the events of one produce request to a partition.
// kafka-go allocates room for this many records (152 bytes each) for every
// partition batch it opens, however few it then holds. A worker's largest
// batch of outcomes (256, delivery.DefaultBatchSize) spreads over the
// events topic's 8 partitions at about 32 events each, so 32 rarely takes
// a second request; at 100 the room was 10 % of the worker's allocations
// (the e2e profile: 8 of 86 MB), more when batches are small.
const eventBatchSize = 32

// Writer publishes events. Safe for concurrent use.
type Writer struct {
	w         *kafka.Writer
	closeConn func()
	published *prometheus.CounterVec
	values    sync.Pool // *[]byte: the encoding buffer of a Publish, lent between calls
}

// New returns a Writer; metrics register on reg. Close it when done.
func New(cfg Config, reg prometheus.Registerer) (*Writer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	set := metricreg.NewExclusiveSet(reg, "events")
	published := set.CounterVec("published_total", "Events written to the events topic, by type (copies written again after a crash included).", "type")
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("eventstream: register metrics: %w", err)
	}
	for _, t := range event.Types {
		published.WithLabelValues(string(t))
	}
	w, closeConn, err := cfg.Kafka.Writer(kafkaclient.WriterConfig{
		Topic:        cfg.Topic,
		Name:         "events",
		Limits:       map[string]int{cfg.Topic: cfg.MaxMessageBytes},
		BatchTimeout: cfg.BatchTimeout,
		// Not kafka-go's default 1,000: see eventBatchSize.
		BatchSize: eventBatchSize,
	})
	if err != nil {
		return nil, fmt.Errorf("eventstream: %w", err)
	}
	return &Writer{w: w, closeConn: closeConn, published: published}, nil
}

// Publish writes events in one call and returns once the broker has
// acknowledged all of them. An event that does not validate fails the
// call before anything is written.
func (w *Writer) Publish(ctx context.Context, events ...event.Event) error {
	if len(events) == 0 {
		return nil
	}
	lent, _ := w.values.Get().(*[]byte)
	if lent == nil {
		lent = new([]byte)
	}
	msgs, values, err := appendRecords((*lent)[:0], events)
	if err != nil {
		w.values.Put(lent)
		return err
	}
	if err := w.w.WriteMessages(ctx, msgs...); err != nil {
		// A write cut short (its context ended) may leave a batch under way
		// in kafka-go: its values are not ours to reuse.
		return fmt.Errorf("eventstream: write %d events: %w", len(msgs), err)
	}
	if cap(values) <= maxLentValueBytes {
		*lent = values
		w.values.Put(lent)
	}
	for _, e := range events {
		w.published.WithLabelValues(string(e.Type)).Inc()
	}
	return nil
}

// maxLentValueBytes caps the encoding buffer a Writer keeps between calls:
// a batch of a few hundred events is well under it.
const maxLentValueBytes = 1 << 20

// Records encodes events as the records Publish writes. The keys and type
// headers share the events' strings rather than copies (kafka-go only
// reads them), and the records' headers share one backing array: three
// allocations fewer per event.
func Records(events []event.Event) ([]kafka.Message, error) {
	msgs, _, err := appendRecords(nil, events)
	return msgs, err
}

// appendRecords is Records with the values encoded one after another into
// buf, grown as needed and returned, so that a caller may lend the same
// buffer to call after call once kafka-go is done with the records. Each
// value is exactly what Event.Encode gives.
func appendRecords(buf []byte, events []event.Event) ([]kafka.Message, []byte, error) {
	msgs := make([]kafka.Message, len(events))
	headers := make([]kafka.Header, len(events))
	ends := make([]int, len(events))
	b := bytes.NewBuffer(buf)
	enc := json.NewEncoder(b) // escapes HTML, as json.Marshal does
	for i := range events {
		err := events[i].Validate()
		if err == nil {
			err = enc.Encode(&events[i])
		}
		if err != nil {
			return nil, nil, fmt.Errorf("eventstream: event %d (%s): %w", i, events[i].ID, err)
		}
		b.Truncate(b.Len() - 1) // the newline Encode ends each value with
		ends[i] = b.Len()
	}
	values, start := b.Bytes(), len(buf)
	for i := range events {
		headers[i] = kafka.Header{Key: HeaderType, Value: readOnlyBytes(string(events[i].Type))}
		msgs[i] = kafka.Message{
			Key:     readOnlyBytes(events[i].MessageID),
			Value:   values[start:ends[i]:ends[i]],
			Headers: headers[i : i+1 : i+1],
		}
		start = ends[i]
	}
	return msgs, values, nil
}

// readOnlyBytes returns s's bytes without a copy, for a record field
// kafka-go reads and never writes. An empty s gives an empty, not nil,
// slice, as []byte(s) does: kafka-go writes a nil key as null.
func readOnlyBytes(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// EnsureTopic returns the events topic's max.message.bytes, creating the
// topic first when it does not exist, so that a process set up before the
// topic existed starts. A cluster that refuses to create it is an error
// that says to create it with postctl.
func EnsureTopic(ctx context.Context, cluster *kafkaclient.Cluster, name string, logger *slog.Logger) (int, error) {
	limits, err := cluster.MaxMessageBytes(ctx, name)
	if err == nil {
		return limits[name], nil
	}
	logger.Info("creating the events topic", "topic", name)
	if err := topic.Ensure(ctx, cluster, topic.EventsSpec(name)); err != nil {
		return 0, fmt.Errorf("setting POSTLINE_EVENTS_TOPIC: topic %s: %w (create it with postctl topics create)", name, err)
	}
	limits, err = cluster.MaxMessageBytes(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("setting POSTLINE_EVENTS_TOPIC: %w", err)
	}
	return limits[name], nil
}

// Close flushes and closes the underlying writer and its connections.
func (w *Writer) Close() error {
	defer w.closeConn()
	return w.w.Close()
}
