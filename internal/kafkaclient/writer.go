package kafkaclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
)

// Writer sizing.
const (
	// BatchOverheadBytes is the framing of one record batch on the wire
	// beyond what kafka-go counts for its records (the batch header).
	BatchOverheadBytes = 61
	// RecordOverheadBytes bounds what one record's framing adds beyond
	// kafka-go's estimate of it (varint lengths and deltas).
	RecordOverheadBytes = 16
	// DefaultBatchSize is WriterConfig.BatchSize's default.
	DefaultBatchSize = 1000
	// HeaderHeadroomBytes is the room Postline keeps for the headers it
	// adds to a record it copies (a dead letter's reason, error and origin;
	// a retry copy's attempt and times): a topic Postline copies records
	// into must accept the source topic's largest record plus this.
	HeaderHeadroomBytes = 16 << 10
)

// WriterConfig configures one writer.
type WriterConfig struct {
	// Topic is the topic written to; empty lets each message name its own
	// (Limits must then cover every topic it names).
	Topic string
	// Name suffixes the client ID ("dlq", "retry").
	Name string
	// Limits are the max.message.bytes of the topics written to, as
	// MaxMessageBytes returns them. Required: a batch is never larger than
	// the smallest.
	Limits map[string]int
	// BatchSize caps the records of one batch. Defaults to
	// DefaultBatchSize.
	BatchSize int
	// BatchTimeout bounds how long a write waits to fill a batch. Defaults
	// to 2ms: callers hand over whole batches.
	BatchTimeout time.Duration
}

// Writer returns a writer that waits for every in-sync replica, partitions
// keys as Java producers do (murmur2), never creates topics, and cuts
// batches small enough for the topics' max.message.bytes, so that a batch of
// large records can never be refused as a whole. A single record larger than
// that fails with kafka.MessageTooLargeError before anything is sent. Close
// the writer, then call the returned func to close its connections.
func (c *Cluster) Writer(cfg WriterConfig) (*kafka.Writer, func(), error) {
	if len(cfg.Limits) == 0 {
		return nil, nil, errors.New("kafka writer: Limits is empty")
	}
	if cfg.Topic != "" {
		if _, ok := cfg.Limits[cfg.Topic]; !ok {
			return nil, nil, fmt.Errorf("kafka writer: no limit for topic %s", cfg.Topic)
		}
	}
	size := cfg.BatchSize
	if size <= 0 {
		size = DefaultBatchSize
	}
	timeout := cfg.BatchTimeout
	if timeout <= 0 {
		timeout = 2 * time.Millisecond
	}
	smallest := slices.Min(mapValues(cfg.Limits))
	t := c.Transport(cfg.Name)
	// kafka-go refreshes a writer's partition leaders only when its cached
	// metadata expires, not on a NOT_LEADER error: with its 6 s default every
	// write to a partition whose broker died fails for up to 6 s after the
	// new leader is elected. A second bounds that stall for one metadata
	// request per second.
	t.MetadataTTL = WriterMetadataTTL
	w := &kafka.Writer{
		Addr:                   c.Addr(),
		Topic:                  cfg.Topic,
		Transport:              t,
		Balancer:               &kafka.Murmur2Balancer{},
		RequiredAcks:           kafka.RequireAll, // zero in a literal would mean no acks
		BatchTimeout:           timeout,
		BatchSize:              size,
		BatchBytes:             int64(BatchBytes(smallest, size)),
		AllowAutoTopicCreation: false,
	}
	return w, t.CloseIdleConnections, nil
}

// WriterMetadataTTL is how long a writer trusts its cached partition
// leaders.
const WriterMetadataTTL = time.Second

// BatchBytes is the batch size in bytes, as kafka-go counts it, that fits
// a topic whose max.message.bytes is limit with up to records records.
func BatchBytes(limit, records int) int {
	return max(limit-BatchOverheadBytes-records*RecordOverheadBytes, 1)
}

// MaxRecordBytes is the largest record, as kafka-go counts key, value and
// headers, that a writer of this package can send to a topic whose
// max.message.bytes is limit.
func MaxRecordBytes(limit int) int { return BatchBytes(limit, 1) }

// RecordBytes is a record's size as kafka-go's writer counts it against
// its batch limit (key, value, headers and fixed fields), rounded up: what
// MaxRecordBytes bounds.
func RecordBytes(key, value []byte, headers []kafka.Header) int {
	n := 27 + len(key) + len(value)
	for _, h := range headers {
		n += 10 + len(h.Key) + len(h.Value)
	}
	return n
}

// CheckCopyFits verifies that every sink topic accepts the largest record
// the source topic accepts plus HeaderHeadroomBytes: Postline copies records
// from one to the other (dead letters, retry copies) and a copy that cannot
// be written would stop its partition. The error names the topic.
func CheckCopyFits(limits map[string]int, source string, sinks ...string) error {
	src, ok := limits[source]
	if !ok {
		return fmt.Errorf("no max.message.bytes known for topic %s", source)
	}
	need := src + HeaderHeadroomBytes
	var errs []error
	for _, s := range sinks {
		got, ok := limits[s]
		if !ok {
			errs = append(errs, fmt.Errorf("no max.message.bytes known for topic %s", s))
			continue
		}
		if MaxRecordBytes(got) < need {
			errs = append(errs, fmt.Errorf("topic %s accepts records up to %d bytes (max.message.bytes=%d), but records copied from %s "+
				"can reach %d bytes: raise its max.message.bytes to at least %d (kafka-configs --alter --entity-type topics --entity-name %s "+
				"--add-config max.message.bytes=%d)", s, MaxRecordBytes(got), got, source, need, RequiredLimit(src), s, RequiredLimit(src)))
		}
	}
	return errors.Join(errs...)
}

// RequiredLimit is the max.message.bytes a topic needs to take copies of
// records from a topic whose max.message.bytes is source.
func RequiredLimit(source int) int {
	return source + HeaderHeadroomBytes + BatchOverheadBytes + RecordOverheadBytes
}

func mapValues(m map[string]int) []int {
	out := make([]int, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// MayHeal reports whether a Kafka call that failed with err may succeed
// if made again unchanged: a broker restarting, a leader moving, a network
// blip. It is false for what only an operator can mend: a record too large
// for the topic, refused credentials or ACLs, an untrusted certificate, a
// topic that does not exist (Postline checks its topics at start, so one
// that vanishes later is a configuration change), or an invalid request.
// A cancelled context may not heal: the caller is stopping. Errors it
// does not know (network failures, timeouts) may heal.
func MayHeal(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return false
	}
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafka.UnknownTopicOrPartition, kafka.MessageSizeTooLarge, kafka.InvalidMessage, kafka.RecordListTooLarge:
			return false
		}
		return ke.Temporary()
	}
	var (
		uae  x509.UnknownAuthorityError
		herr x509.HostnameError
		cie  x509.CertificateInvalidError
		rec  tls.RecordHeaderError
	)
	if errors.As(err, &uae) || errors.As(err, &herr) || errors.As(err, &cie) || errors.As(err, &rec) {
		return false
	}
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if e != nil && !MayHeal(e) {
				return false
			}
		}
		return true
	}
	// Network errors, timeouts and anything unforeseen: the broker may
	// come back. Only what is known to be permanent stops a caller.
	return true
}

// TopicWriter writes records, as they are, to one topic through a Writer:
// the writer under job.Publisher, and the raw republisher of the reaper and
// of postctl's dead-letter replay, which copy records the worker validates.
// It is safe for concurrent use.
type TopicWriter struct {
	topic     string
	w         *kafka.Writer
	closeConn func()
}

// TopicWriter returns a writer of cfg.Topic, which must be set.
func (c *Cluster) TopicWriter(cfg WriterConfig) (*TopicWriter, error) {
	if cfg.Topic == "" {
		return nil, errors.New("kafka writer: Topic is empty")
	}
	w, closeConn, err := c.Writer(cfg)
	if err != nil {
		return nil, err
	}
	return &TopicWriter{topic: cfg.Topic, w: w, closeConn: closeConn}, nil
}

// Topic returns the topic written to.
func (w *TopicWriter) Topic() string { return w.topic }

// PublishRaw writes msgs in one call. The messages must not set Topic.
func (w *TopicWriter) PublishRaw(ctx context.Context, msgs []kafka.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := w.w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("write %d records to %s: %w", len(msgs), w.topic, err)
	}
	return nil
}

// Close waits for in-flight writes and closes the connections.
func (w *TopicWriter) Close() error {
	err := w.w.Close()
	w.closeConn()
	if err != nil {
		return fmt.Errorf("close writer of %s: %w", w.topic, err)
	}
	return nil
}
