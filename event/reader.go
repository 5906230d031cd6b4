package event

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/kafkaconn"
)

// ReaderConfig configures a Reader. The connection to Kafka (brokers, TLS,
// SASL) is the kafkaconn.Config given to NewReader beside it.
type ReaderConfig struct {
	// GroupID is the application's consumer group: its members share the
	// partitions, and Commit records how far the group has read. A group
	// with no committed offset starts at the oldest event. Required.
	GroupID string
	// Topic is the events topic. Defaults to "mail.events".
	Topic string
	// DedupeWindow is how many of the most recent event IDs are remembered
	// to drop copies; a copy that arrives after more distinct events than
	// this is handed out again. Copies of one event are written close
	// together (a producer repeating a write), so a window of minutes of
	// traffic is enough. Defaults to 100,000.
	DedupeWindow int
	// MaxWait bounds how long one fetch waits at the end of the topic
	// before it asks again, and so how long Close may wait for a fetch in
	// flight. Defaults to 1 s.
	MaxWait time.Duration
}

// defaultDedupeWindow is ReaderConfig.DedupeWindow's default.
const defaultDedupeWindow = 100_000

// WithDefaults returns c with zero fields set to their defaults.
func (c ReaderConfig) WithDefaults() ReaderConfig {
	c.Topic = cmp.Or(c.Topic, "mail.events")
	c.DedupeWindow = cmp.Or(c.DedupeWindow, defaultDedupeWindow)
	c.MaxWait = cmp.Or(c.MaxWait, time.Second)
	return c
}

// Validate reports an invalid field by name and value.
func (c ReaderConfig) Validate() error {
	if c.DedupeWindow < 1 {
		return fmt.Errorf("event reader config: DedupeWindow = %d: must be at least 1", c.DedupeWindow)
	}
	if c.MaxWait < 0 {
		return fmt.Errorf("event reader config: MaxWait = %s: must not be negative", c.MaxWait)
	}
	return nil
}

// Position locates a record of the events topic. Commit takes it.
type Position struct {
	Topic     string
	Partition int
	Offset    int64
}

// Message is one event with the position of the record it was decoded
// from; pass the position to Reader.Commit once the event is handled.
type Message struct {
	Event Event
	Position
}

// DecodeError is returned by Reader.Next for a record that is not a valid
// event document. The reader has moved past it: log it, commit its Position
// if the application skips such records, and call Next again.
type DecodeError struct {
	Position
	// Value is the undecodable record's value.
	Value []byte
	// Err is what Decode reported.
	Err error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("event: record %s/%d@%d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// fetcher is the part of *kafka.Reader a Reader uses.
type fetcher interface {
	FetchMessage(ctx context.Context) (kafka.Message, error)
	CommitMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Reader reads events from mail.events for an application: it decodes each
// record with Decode and drops copies of events it has handed out recently
// (events are delivered at least once; copies share an ID). It reads as a
// member of the configured consumer group, so Commit commits for the group.
// A Reader is meant for one goroutine calling Next; Close it when done.
//
// An event's ID is remembered when Next returns it, by this Reader only: a
// new Reader (a restart, another member of the group) starts with an empty
// window, so applications whose handling is not idempotent still dedupe
// by ID where they record what they did. A dropped copy is not
// committed on its own: committing it could commit past an earlier record
// still being handled. It is committed with the next record of its
// partition that the caller commits (Kafka commits offsets, not records).
type Reader struct {
	r     fetcher
	close func() error
	seen  *lru.Cache[string, struct{}]
}

// NewReader returns a Reader of cfg.Topic for the consumer group
// cfg.GroupID, connected with conn. It does not contact the brokers: Next
// does.
func NewReader(conn kafkaconn.Config, cfg ReaderConfig) (*Reader, error) {
	cfg = cfg.WithDefaults()
	if cfg.GroupID == "" {
		return nil, errors.New("event reader config: GroupID is empty")
	}
	cluster, err := kafkaclient.New(conn)
	if err != nil {
		return nil, fmt.Errorf("event reader: Kafka connection: %w", err)
	}
	// Checked before kafka.NewReader, which panics on a bad config.
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kr := kafka.NewReader(kafka.ReaderConfig{
		Brokers: cluster.Brokers(),
		Dialer:  cluster.Dialer("events"),
		GroupID: cfg.GroupID,
		Topic:   cfg.Topic,
		MaxWait: cfg.MaxWait,
	})
	r, err := newReader(kr, cfg)
	if err != nil {
		_ = kr.Close()
		return nil, err
	}
	r.close = kr.Close
	return r, nil
}

func newReader(r fetcher, cfg ReaderConfig) (*Reader, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	seen, err := lru.New[string, struct{}](cfg.DedupeWindow)
	if err != nil {
		return nil, fmt.Errorf("event reader: %w", err)
	}
	return &Reader{r: r, close: func() error { return nil }, seen: seen}, nil
}

// Next returns the next event that is not a copy of one handed out within
// the dedupe window. A record that is not a valid event yields a
// *DecodeError (and the next call goes on past it); errors of the Kafka
// reader, such as ctx ending or the reader being closed, are returned
// wrapped.
func (r *Reader) Next(ctx context.Context) (Message, error) {
	for {
		rec, err := r.r.FetchMessage(ctx)
		if err != nil {
			return Message{}, fmt.Errorf("event reader: fetch: %w", err)
		}
		pos := Position{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
		ev, err := Decode(rec.Value)
		if err != nil {
			return Message{}, &DecodeError{Position: pos, Value: rec.Value, Err: err}
		}
		if found, _ := r.seen.ContainsOrAdd(ev.ID, struct{}{}); found {
			continue
		}
		return Message{Event: ev, Position: pos}, nil
	}
}

// Commit commits the positions for the reader's consumer group: call it
// once the events are handled, so that a crash before then hands them out
// again.
func (r *Reader) Commit(ctx context.Context, positions ...Position) error {
	records := make([]kafka.Message, len(positions))
	for i, p := range positions {
		records[i] = kafka.Message{Topic: p.Topic, Partition: p.Partition, Offset: p.Offset}
	}
	if err := r.r.CommitMessages(ctx, records...); err != nil {
		return fmt.Errorf("event reader: commit: %w", err)
	}
	return nil
}

// Close leaves the consumer group and closes the connections, once a fetch
// in flight has ended (at most ReaderConfig.MaxWait).
func (r *Reader) Close() error {
	if err := r.close(); err != nil {
		return fmt.Errorf("event reader: close: %w", err)
	}
	return nil
}
