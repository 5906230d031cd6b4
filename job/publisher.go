package job

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/propagation"
)

// Publisher defaults.
const (
	// DefaultTopic is the topic jobs are published to.
	DefaultTopic = "mail.jobs"
	// DefaultTopicMaxMessageBytes is the jobs topic's max.message.bytes
	// as Postline creates it: 4 MiB, twice DefaultMaxMessageBytes.
	DefaultTopicMaxMessageBytes = 4 << 20
	// DefaultBatchTimeout is how long the writer waits to fill a batch. The
	// kafka-go default of one second would delay every small synchronous
	// publish by that much.
	DefaultBatchTimeout = 5 * time.Millisecond
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Kafka is the cluster to publish to: brokers, TLS and SASL
	// (kafkaclient.New). Required.
	Kafka *kafkaclient.Cluster
	// TopicMaxMessageBytes is the jobs topic's max.message.bytes: batches
	// are cut to fit it. Defaults to DefaultTopicMaxMessageBytes, what
	// `postctl topics create` gives the jobs topic.
	TopicMaxMessageBytes int
	// Topic is the jobs topic. Defaults to DefaultTopic.
	Topic string
	// MessageIDDomain is the id-right of generated message IDs.
	// Defaults to DefaultMessageIDDomain.
	MessageIDDomain string
	// Limits bounds each job; zero fields take their defaults.
	// Defaults to the zero Limits.
	Limits Limits
	// BatchTimeout is how long the writer waits for more messages before it
	// sends a partial batch. Defaults to DefaultBatchTimeout.
	BatchTimeout time.Duration
	// NowFunc is the clock for the first-seen header. Defaults to time.Now.
	NowFunc func() time.Time
	// Propagator writes the caller's trace context into each record's
	// headers. Defaults to W3C trace context (traceparent, tracestate),
	// which the worker reads, so a producer's span is the parent of the
	// delivery without any global set-up.
	Propagator propagation.TextMapPropagator
}

// WithDefaults returns c with every zero field set to its default.
func (c PublisherConfig) WithDefaults() PublisherConfig {
	c.Topic = cmp.Or(c.Topic, DefaultTopic)
	c.MessageIDDomain = cmp.Or(c.MessageIDDomain, DefaultMessageIDDomain)
	c.BatchTimeout = cmp.Or(c.BatchTimeout, DefaultBatchTimeout)
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
	return c
}

// Validate reports the first invalid field.
func (c PublisherConfig) Validate() error {
	if c.Kafka == nil {
		return errors.New("job: publisher config: Kafka is nil")
	}
	if c.TopicMaxMessageBytes < 0 {
		return fmt.Errorf("job: publisher config: TopicMaxMessageBytes must not be negative, got %d", c.TopicMaxMessageBytes)
	}
	if c.BatchTimeout < 0 {
		return fmt.Errorf("job: publisher config: BatchTimeout must not be negative, got %s", c.BatchTimeout)
	}
	if err := validateMessageID("x@" + c.MessageIDDomain); err != nil {
		return fmt.Errorf("job: publisher config: MessageIDDomain %q: %w", c.MessageIDDomain, err)
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("job: publisher config: %w", err)
	}
	return nil
}

// PublishError is a Publish rejection of one job of the batch. Nothing was
// written. Its Err is a *ValidationError, found through errors.As.
type PublishError struct {
	// Index is the position of the rejected job in the Publish call.
	Index int
	// MessageID is the job's message ID, generated if the job had none.
	MessageID string
	// Err is why the job was rejected.
	Err error
}

// Error formats the error with the index and message ID of the job.
func (e *PublishError) Error() string {
	return fmt.Sprintf("job: publish jobs[%d] (message_id %s): %v", e.Index, e.MessageID, e.Err)
}

// Unwrap returns the *ValidationError.
func (e *PublishError) Unwrap() error { return e.Err }

// Publisher writes jobs to the jobs topic. It is safe for concurrent use.
// Create one per process and Close it when done.
type Publisher struct {
	cfg       PublisherConfig
	limits    Limits
	writer    *kafka.Writer
	closeConn func()
}

// NewPublisher returns a Publisher for cfg. It does not contact the brokers.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	limits := cfg.Limits.WithDefaults()
	w, closeConn, err := cfg.Kafka.Writer(kafkaclient.WriterConfig{
		Topic:        cfg.Topic,
		Name:         "publisher",
		Limits:       map[string]int{cfg.Topic: cmp.Or(cfg.TopicMaxMessageBytes, DefaultTopicMaxMessageBytes)},
		BatchTimeout: cfg.BatchTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("job: publisher: %w", err)
	}
	return &Publisher{cfg: cfg, limits: limits, writer: w, closeConn: closeConn}, nil
}

// Publish normalises every job, gives the ones without a message ID a new
// one, validates them all and then writes them in one call, keyed by message
// ID, with headers attempt=1, first-seen=now and the W3C trace context of
// ctx. It returns the message IDs in the order of jobs.
//
// If any job is invalid, nothing is written and the error is a
// *PublishError for the first one. If the write fails, some jobs may have
// been written: the IDs are returned with the error, so publish the same
// jobs again with those IDs set and the worker will deliver each once.
func (p *Publisher) Publish(ctx context.Context, jobs ...Job) ([]string, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	now := jobheader.FormatTime(p.cfg.NowFunc())
	ids := make([]string, len(jobs))
	msgs := make([]kafka.Message, len(jobs))
	prop := p.cfg.Propagator
	for i, j := range jobs {
		j.Normalize()
		if j.MessageID == "" {
			j.MessageID = NewMessageID(p.cfg.MessageIDDomain)
		}
		ids[i] = j.MessageID
		if err := j.Validate(p.limits); err != nil {
			return nil, &PublishError{Index: i, MessageID: j.MessageID, Err: err}
		}
		value, err := json.Marshal(j)
		if err != nil {
			return nil, &PublishError{Index: i, MessageID: j.MessageID, Err: invalid(ReasonMalformedJSON, "", "%v", err)}
		}
		if len(value) > p.limits.MaxMessageBytes {
			return nil, &PublishError{Index: i, MessageID: j.MessageID,
				Err: invalid(ReasonOversizeMessage, "", "%d bytes encoded, limit %d", len(value), p.limits.MaxMessageBytes)}
		}
		headers := jobheader.Carrier{
			{Key: jobheader.KeyAttempt, Value: []byte(strconv.Itoa(1))},
			{Key: jobheader.KeyFirstSeen, Value: []byte(now)},
		}
		prop.Inject(ctx, &headers)
		msgs[i] = kafka.Message{Key: []byte(j.MessageID), Value: value, Headers: headers}
	}
	if err := p.writer.WriteMessages(ctx, msgs...); err != nil {
		return ids, fmt.Errorf("job: publish %d jobs to %s: %w", len(msgs), p.cfg.Topic, err)
	}
	return ids, nil
}

// PublishRaw writes msgs to the jobs topic as they are, without validation,
// for tests and tools that need to publish bad input or replay records.
// The messages must not set Topic.
func (p *Publisher) PublishRaw(ctx context.Context, msgs []kafka.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := p.writer.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("job: publish %d raw records to %s: %w", len(msgs), p.cfg.Topic, err)
	}
	return nil
}

// Topic returns the topic the Publisher writes to.
func (p *Publisher) Topic() string { return p.cfg.Topic }

// Close flushes nothing (writes are synchronous), waits for in-flight writes
// and closes the connections.
func (p *Publisher) Close() error {
	err := p.writer.Close()
	p.closeConn()
	if err != nil {
		return fmt.Errorf("job: close publisher: %w", err)
	}
	return nil
}
