package event

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/segmentio/kafka-go"
)

// DefaultDedupeWindow is ReaderConfig.DedupeWindow's default: how many
// recent event IDs a Reader remembers.
const DefaultDedupeWindow = 100_000

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	// DedupeWindow is how many of the most recent event IDs are remembered
	// to drop copies; a copy that arrives after more distinct events than
	// this is handed out again. Copies of one event are written close
	// together (a producer retrying a write), so a window of minutes of
	// traffic is enough. Defaults to DefaultDedupeWindow.
	DedupeWindow int
}

// WithDefaults returns c with zero fields set to their defaults.
func (c ReaderConfig) WithDefaults() ReaderConfig {
	c.DedupeWindow = cmp.Or(c.DedupeWindow, DefaultDedupeWindow)
	return c
}

// Validate reports an invalid field by name and value.
func (c ReaderConfig) Validate() error {
	if c.DedupeWindow < 1 {
		return fmt.Errorf("event reader config: DedupeWindow = %d: must be at least 1", c.DedupeWindow)
	}
	return nil
}

// Message is one event with the Kafka record it was decoded from; pass the
// record to Reader.Commit once the event is handled.
type Message struct {
	Event  Event
	Record kafka.Message
}

// DecodeError is returned by Reader.Next for a record that is not a valid
// event document. The reader has moved past it: log it, commit its Record if
// the application skips such records, and call Next again.
type DecodeError struct {
	Topic     string
	Partition int
	Offset    int64
	// Record is the undecodable record.
	Record kafka.Message
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
// (events are delivered at least once; copies share an ID). It wraps a
// *kafka.Reader that the caller builds, with a GroupID so that Commit can
// commit, and closes. A Reader is meant for one goroutine calling Next.
//
// An event's ID is remembered when Next returns it, by this Reader only: a
// new Reader (a restart, another member of the group) starts with an empty
// window, so applications whose handling is not idempotent still dedupe
// by ID where they record the outcome. A dropped copy is not
// committed on its own: committing it could commit past an earlier record
// still being handled. It is committed with the next record of its
// partition that the caller commits (Kafka commits offsets, not records).
type Reader struct {
	r    fetcher
	seen *lru.Cache[string, struct{}]
}

// NewReader returns a Reader of r.
func NewReader(r *kafka.Reader, cfg ReaderConfig) (*Reader, error) {
	if r == nil {
		return nil, errors.New("event reader: kafka reader is nil")
	}
	return newReader(r, cfg)
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
	return &Reader{r: r, seen: seen}, nil
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
		ev, err := Decode(rec.Value)
		if err != nil {
			return Message{}, &DecodeError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Record: rec, Err: err}
		}
		if found, _ := r.seen.ContainsOrAdd(ev.ID, struct{}{}); found {
			continue
		}
		return Message{Event: ev, Record: rec}, nil
	}
}

// Commit commits the records' offsets for the reader's consumer group:
// call it once the events are handled, so that a crash before then hands
// them out again.
func (r *Reader) Commit(ctx context.Context, records ...kafka.Message) error {
	if err := r.r.CommitMessages(ctx, records...); err != nil {
		return fmt.Errorf("event reader: commit: %w", err)
	}
	return nil
}
