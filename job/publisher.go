package job

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/propagation"

	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/kafkaconn"
)

// Publisher defaults, as PublisherConfig documents them.
const (
	defaultTopic = "mail.jobs"
	// defaultTopicMaxMessageBytes is the jobs topic's max.message.bytes
	// as Postline creates it: twice defaultMaxMessageBytes.
	defaultTopicMaxMessageBytes = 4 << 20
	// defaultBatchTimeout: how long kafka-go holds a partial batch. The
	// Publisher gathers concurrent calls itself (coalescer), so the writer
	// need not wait for them: a lone publish is not held (issue 32), and
	// under load the calls that arrive during one write share the next.
	defaultBatchTimeout = 100 * time.Microsecond
)

// PublisherConfig configures a Publisher. The connection to Kafka (brokers,
// TLS, SASL) is the kafkaconn.Config given to NewPublisher beside it.
type PublisherConfig struct {
	// Topic is the jobs topic. Defaults to "mail.jobs".
	Topic string
	// TopicMaxMessageBytes is the jobs topic's max.message.bytes: batches
	// are cut to fit it. Defaults to 4 MiB, what `postctl topics create`
	// gives the jobs topic.
	TopicMaxMessageBytes int
	// MessageIDDomain is the id-right of generated message IDs.
	// Defaults to DefaultMessageIDDomain.
	MessageIDDomain string
	// Limits bounds each job; zero fields take their defaults.
	// Defaults to the zero Limits.
	Limits Limits
	// BatchTimeout is how long the Kafka writer holds a partial batch
	// before it sends it. Publish calls made while a write is in flight are
	// gathered into the next write whatever it is. Defaults to 100µs.
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
	c.Topic = cmp.Or(c.Topic, defaultTopic)
	c.MessageIDDomain = cmp.Or(c.MessageIDDomain, DefaultMessageIDDomain)
	c.BatchTimeout = cmp.Or(c.BatchTimeout, defaultBatchTimeout)
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
	cfg    PublisherConfig
	limits Limits
	writer *kafkaclient.TopicWriter
	writes *coalescer
}

// NewPublisher returns a Publisher for cfg, connected with conn. It does
// not contact the brokers.
func NewPublisher(conn kafkaconn.Config, cfg PublisherConfig) (*Publisher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cluster, err := kafkaclient.New(conn)
	if err != nil {
		return nil, fmt.Errorf("job: publisher: Kafka connection: %w", err)
	}
	w, err := cluster.TopicWriter(kafkaclient.WriterConfig{
		Topic:        cfg.Topic,
		Name:         "publisher",
		Limits:       map[string]int{cfg.Topic: cmp.Or(cfg.TopicMaxMessageBytes, defaultTopicMaxMessageBytes)},
		BatchTimeout: cfg.BatchTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("job: publisher: %w", err)
	}
	return &Publisher{cfg: cfg, limits: cfg.Limits.WithDefaults(), writer: w, writes: newCoalescer(w.PublishRaw)}, nil
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
	if err := p.writes.write(ctx, msgs); err != nil {
		return ids, fmt.Errorf("job: publish %d jobs: %w", len(msgs), err)
	}
	return ids, nil
}

// Close waits for in-flight writes and closes the connections. Writes are
// synchronous: there is nothing to flush.
func (p *Publisher) Close() error {
	p.writes.wait()
	if err := p.writer.Close(); err != nil {
		return fmt.Errorf("job: close publisher: %w", err)
	}
	return nil
}
