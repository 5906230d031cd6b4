package mailquery

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/backoff"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/kafkaconn"
)

// Defaults of IndexerConfig.
const (
	DefaultIndexerGroup = "postline-mailquery"
	DefaultBatchSize    = 500
	DefaultBatchWait    = 500 * time.Millisecond
)

// maxIndexedIDBytes bounds the IDs of an indexed event: a longer one could
// not be a btree key (PostgreSQL refuses entries over about 2.7 kB), and no
// writer of Postline makes one.
const maxIndexedIDBytes = 1024

// IndexerConfig configures an Indexer.
type IndexerConfig struct {
	// Kafka is the connection to the cluster. Required.
	Kafka kafkaconn.Config
	// Topic is the events topic. Defaults to mail.events.
	Topic string
	// GroupID is the Indexer's consumer group: its own, so that it reads
	// every event whatever other consumers do. Defaults to
	// DefaultIndexerGroup.
	GroupID string
	// BatchSize is how many events one insert writes at most. Defaults to
	// DefaultBatchSize.
	BatchSize int
	// BatchWait is how long a batch that has an event waits for more
	// before it is written. Defaults to DefaultBatchWait.
	BatchWait time.Duration
	// Logger receives skipped records and failed writes; nil discards.
	Logger *slog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c IndexerConfig) WithDefaults() IndexerConfig {
	c.Topic = cmp.Or(c.Topic, "mail.events")
	c.GroupID = cmp.Or(c.GroupID, DefaultIndexerGroup)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.BatchWait = cmp.Or(c.BatchWait, DefaultBatchWait)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports an invalid field by name.
func (c IndexerConfig) Validate() error {
	switch {
	case c.BatchSize < 1:
		return fmt.Errorf("mailquery indexer config: BatchSize %d: must be at least 1", c.BatchSize)
	case c.BatchWait < 0:
		return fmt.Errorf("mailquery indexer config: BatchWait %s: must not be negative", c.BatchWait)
	}
	return nil
}

// IndexerStats counts what an Indexer did since it was made.
type IndexerStats struct {
	// Indexed counts events written to the table.
	Indexed int64
	// Duplicates counts events already in it (copies of an event).
	Duplicates int64
	// Skipped counts records that are not events Postline can index: not
	// a valid event document, or a value the table refuses.
	Skipped int64
}

// Indexer copies the events of mail.events into postline_mail_events, the
// events of a mail's Life. It reads in a consumer group of its own, writes
// each batch with one statement that keeps the first copy of an event ID
// (so events delivered again, or read again after a crash, are written
// once), and commits the batch's offsets only after the write. A record
// that is not a valid event is skipped and counted (IndexerStats.Skipped),
// never stops its partition. It is safe for concurrent use by Stats and
// Purge while Run runs; run one Run per Indexer (several Indexers in the
// group share the partitions).
type Indexer struct {
	cfg  IndexerConfig
	pool *pgxpool.Pool
	// open makes the Kafka reader Run reads; tests replace it.
	open func() (eventSource, error)

	indexed, duplicates, skipped atomic.Int64
}

// eventSource is the part of *event.Reader an Indexer uses.
type eventSource interface {
	Next(ctx context.Context) (event.Message, error)
	Commit(ctx context.Context, positions ...event.Position) error
	Close() error
}

// NewIndexer returns an Indexer writing to pool, whose schema has the
// migrations applied. It does not contact Kafka: Run does.
func NewIndexer(pool *pgxpool.Pool, cfg IndexerConfig) (*Indexer, error) {
	if pool == nil {
		return nil, errors.New("mailquery indexer: nil pool")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ix := &Indexer{cfg: cfg, pool: pool}
	ix.open = func() (eventSource, error) {
		return event.NewReader(cfg.Kafka, event.ReaderConfig{GroupID: cfg.GroupID, Topic: cfg.Topic})
	}
	// Checked now, so that a bad connection config fails at start
	// (without joining the group, which a reader does once made).
	if _, err := kafkaclient.New(cfg.Kafka); err != nil {
		return nil, fmt.Errorf("mailquery indexer: Kafka connection: %w", err)
	}
	return ix, nil
}

// Stats returns the counts so far.
func (ix *Indexer) Stats() IndexerStats {
	return IndexerStats{Indexed: ix.indexed.Load(), Duplicates: ix.duplicates.Load(), Skipped: ix.skipped.Load()}
}

// Run indexes events until ctx ends, then leaves the consumer group and
// returns nil: events read and not yet written are not committed, and are
// read again by the next owner of their partition. A write that fails is
// tried again, with a growing wait, until it succeeds or ctx ends. It
// returns an error only when the Kafka reader fails for good.
func (ix *Indexer) Run(ctx context.Context) error {
	src, err := ix.open()
	if err != nil {
		return fmt.Errorf("mailquery indexer: %w", err)
	}
	defer src.Close()
	retry := backoff.Policy{First: 200 * time.Millisecond, Max: 10 * time.Second,
		OnWait: func(err error, call int, wait time.Duration) {
			ix.cfg.Logger.Warn("mailquery indexer: writing events failed; trying again", "error", err,
				"call", call, "wait", wait)
		}}
	for {
		b, err := ix.collect(ctx, src)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("mailquery indexer: %w", err)
		}
		if len(b.events) > 0 {
			if err := retry.Do(ctx, func() error { return ix.write(ctx, b.events) }); err != nil {
				return nil // ctx ended: the batch is read again by whoever owns it next
			}
		}
		if err := src.Commit(ctx, b.positions...); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// A rebalance took the partitions: their new owner reads the
			// batch again, and writing it again changes nothing.
			ix.cfg.Logger.Warn("mailquery indexer: commit failed; the events will be read again", "error", err)
		}
	}
}

// batch is what collect read: the events to write, and the positions to
// commit once they are written (the skipped records' too).
type batch struct {
	events    []event.Event
	positions []event.Position
}

// collect waits for one record, then reads more until BatchSize events or
// BatchWait. Its error is the reader's; a skipped record is not one.
func (ix *Indexer) collect(ctx context.Context, src eventSource) (batch, error) {
	var b batch
	wait := ctx
	for len(b.events) < ix.cfg.BatchSize {
		m, err := src.Next(wait)
		var bad *event.DecodeError
		switch {
		case errors.As(err, &bad):
			ix.skip(bad.Position, bad.Err)
			b.positions = append(b.positions, bad.Position)
		case err != nil && wait != ctx && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			return b, nil // the batch waited long enough
		case err != nil:
			return b, err
		case !indexable(m.Event):
			ix.skip(m.Position, errors.New("an ID is too long or holds a NUL byte"))
			b.positions = append(b.positions, m.Position)
		default:
			b.events = append(b.events, m.Event)
			b.positions = append(b.positions, m.Position)
		}
		if wait == ctx && len(b.positions) > 0 {
			var cancel context.CancelFunc
			wait, cancel = context.WithTimeout(ctx, ix.cfg.BatchWait)
			defer cancel()
		}
	}
	return b, nil
}

// skip counts and logs a record that is not indexed. The record's value is
// not logged: it is not known to be an event, and may hold anything.
func (ix *Indexer) skip(p event.Position, why error) {
	ix.skipped.Add(1)
	ix.cfg.Logger.Warn("mailquery indexer: skipped a record that is not an indexable event",
		"topic", p.Topic, "partition", p.Partition, "offset", p.Offset, "reason", why)
}

// indexable reports whether the table can take e's IDs.
func indexable(e event.Event) bool {
	for _, id := range []string{e.ID, e.MessageID} {
		if len(id) > maxIndexedIDBytes || containsNUL(id) {
			return false
		}
	}
	return true
}

func containsNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

// insertEventsSQL writes a batch, keeping the first copy of each event ID
// (in the batch and in the table), in ID order so that concurrent Indexers
// lock rows in one order.
const insertEventsSQL = `INSERT INTO postline_mail_events (event_id, message_id, at, type, recipient_index, doc)
SELECT u.event_id, u.message_id, u.at, u.type, u.recipient_index, u.doc::jsonb
FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::int4[], $6::text[])
	AS u(event_id, message_id, at, type, recipient_index, doc)
ORDER BY u.event_id
ON CONFLICT (event_id) DO NOTHING`

// write inserts events. When PostgreSQL refuses a value of the batch (a
// data error: text it cannot store), the events are written one by one and
// those it refuses are skipped, so that one bad event cannot hold its
// partition forever.
func (ix *Indexer) write(ctx context.Context, events []event.Event) error {
	n, err := ix.insert(ctx, events)
	if err == nil {
		ix.indexed.Add(n)
		ix.duplicates.Add(int64(len(events)) - n)
		return nil
	}
	if !refusedValue(err) {
		return err
	}
	for _, e := range events {
		n, err := ix.insert(ctx, []event.Event{e})
		switch {
		case err == nil:
			ix.indexed.Add(n)
			ix.duplicates.Add(1 - n)
		case refusedValue(err):
			ix.skipped.Add(1)
			ix.cfg.Logger.Warn("mailquery indexer: skipped an event the table refuses", "event_id", e.ID, "error", err)
		default:
			return err // the batch is written again: what was written stays once
		}
	}
	return nil
}

func (ix *Indexer) insert(ctx context.Context, events []event.Event) (int64, error) {
	n := len(events)
	ids, mids, types, docs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	ats, idxs := make([]time.Time, n), make([]int32, n)
	for i, e := range events {
		doc, err := indexedDoc(e)
		if err != nil {
			return 0, err
		}
		ids[i], mids[i], types[i], docs[i] = e.ID, e.MessageID, string(e.Type), string(doc)
		ats[i], idxs[i] = e.At, int32(min(e.RecipientIndex, 1<<30))
	}
	tag, err := ix.pool.Exec(ctx, insertEventsSQL, ids, mids, ats, types, idxs, docs)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// indexedDoc is the document stored for e: the event without its metadata
// (the job's, the customer's data, which no page shows).
func indexedDoc(e event.Event) ([]byte, error) {
	e.Metadata = nil
	return json.Marshal(e)
}

// refusedValue reports a PostgreSQL error about a value rather than the
// database: a data exception (class 22, such as a NUL in text or JSON) or a
// program limit (class 54, such as an index entry too large).
func refusedValue(err error) bool {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || len(pg.Code) < 2 {
		return false
	}
	return pg.Code[:2] == "22" || pg.Code[:2] == "54"
}

// purgeBatch bounds the events one statement of Purge deletes, so that
// the purge holds no long lock and writes no large transaction.
const purgeBatch = 5000

// Purge deletes the events older than retention (by their time), oldest
// first, in batches, and returns how many it deleted. The console calls it
// periodically; a mail's life then shows what its row still says.
func (ix *Indexer) Purge(ctx context.Context, retention time.Duration) (int64, error) {
	if retention <= 0 {
		return 0, fmt.Errorf("mailquery: purge: retention %s must be positive", retention)
	}
	cutoff := time.Now().Add(-retention)
	var total int64
	for {
		tag, err := ix.pool.Exec(ctx, `DELETE FROM postline_mail_events WHERE event_id IN (
			SELECT event_id FROM postline_mail_events WHERE at < $1 ORDER BY at LIMIT $2)`, cutoff, purgeBatch)
		if err != nil {
			return total, fmt.Errorf("mailquery: purge events before %s: %w", cutoff.UTC().Format(time.RFC3339), err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < purgeBatch {
			return total, nil
		}
	}
}
