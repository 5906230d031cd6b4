package redrive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/topic"
)

// Source yields the records of the dead-letter topic.
type Source interface {
	// Scan calls fn for every record, in a stable order (partition by
	// partition, by offset). fn returning ErrStop ends the scan without
	// error.
	Scan(ctx context.Context, fn func(kafka.Message) error) error
}

// ErrStop ends a Scan early without error.
var ErrStop = errors.New("redrive: stop scan")

// TopicSource is a dead-letter topic read from Kafka. Each Scan reads every
// partition from its first retained offset (or From) to the end offsets
// when the scan starts: it does not wait for newer records. postctl's
// webhooks replay reads the events topic with it too.
type TopicSource struct {
	Kafka *kafkaclient.Cluster
	Topic string
	// From, if set, starts each partition at its first record at or after
	// From by the broker's time index, skipping the older ones unread.
	From time.Time
}

var _ Source = TopicSource{}

// partitionRange is the part of a partition a scan reads: [start, end).
type partitionRange struct {
	id         int
	start, end int64
}

// Scan implements Source.
func (s TopicSource) Scan(ctx context.Context, fn func(kafka.Message) error) error {
	ranges, err := s.ranges(ctx)
	if err != nil {
		return err
	}
	for _, pr := range ranges {
		if err := s.scanPartition(ctx, pr, fn); err != nil {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
	}
	return nil
}

func (s TopicSource) ranges(ctx context.Context) ([]partitionRange, error) {
	infos, err := topic.Describe(ctx, s.Kafka, s.Topic)
	if err != nil {
		return nil, err
	}
	var out []partitionRange
	for _, p := range infos[0].Partitions {
		if p.EndOffset > p.StartOffset {
			out = append(out, partitionRange{id: p.ID, start: p.StartOffset, end: p.EndOffset})
		}
	}
	if s.From.IsZero() || len(out) == 0 {
		return out, nil
	}
	return s.startFrom(ctx, out)
}

// startFrom moves the start of each of ranges to its first record at or
// after s.From, dropping partitions with none.
func (s TopicSource) startFrom(ctx context.Context, ranges []partitionRange) ([]partitionRange, error) {
	client, closeConn := s.Kafka.Client("scan", 10*time.Second)
	defer closeConn()
	reqs := make([]kafka.OffsetRequest, len(ranges))
	for i, pr := range ranges {
		reqs[i] = kafka.TimeOffsetOf(pr.id, s.From)
	}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{s.Topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("offsets of %s at %s: %w", s.Topic, s.From.Format(time.RFC3339), err)
	}
	starts := map[int]int64{}
	for _, po := range res.Topics[s.Topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("offsets of %s/%d: %w", s.Topic, po.Partition, po.Error)
		}
		for off := range po.Offsets {
			if off >= 0 && (starts[po.Partition] == 0 || off < starts[po.Partition]) {
				starts[po.Partition] = off
			}
		}
	}
	var out []partitionRange
	for _, pr := range ranges {
		if start, ok := starts[pr.id]; ok && start < pr.end {
			out = append(out, partitionRange{id: pr.id, start: max(start, pr.start), end: pr.end})
		}
	}
	return out, nil
}

func (s TopicSource) scanPartition(ctx context.Context, pr partitionRange, fn func(kafka.Message) error) (err error) {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   s.Kafka.Brokers(),
		Dialer:    s.Kafka.Dialer("dlq"),
		Topic:     s.Topic,
		Partition: pr.id,
		MaxBytes:  16 << 20, // dead letters may be as large as jobs (4 MiB)
		// The records up to end exist, so fetches answer at once; a short
		// wait only bounds the read-ahead fetch that Close waits for.
		MaxWait: 10 * time.Millisecond,
	})
	defer func() {
		if cerr := r.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close reader of %s/%d: %w", s.Topic, pr.id, cerr)
		}
	}()
	if err := r.SetOffset(pr.start); err != nil {
		return fmt.Errorf("seek %s/%d to %d: %w", s.Topic, pr.id, pr.start, err)
	}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return fmt.Errorf("read %s/%d: %w", s.Topic, pr.id, err)
		}
		if err := fn(m); err != nil {
			return err
		}
		if m.Offset >= pr.end-1 {
			return nil
		}
	}
}
