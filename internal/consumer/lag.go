package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/segmentio/kafka-go"
)

// Lag returns, per partition of topic, how many messages group has not yet
// committed past: the partition's end offset minus the group's committed
// offset, or minus the partition's first offset when the group has never
// committed it. client.Addr must point at a broker.
//
// It is group lag as an autoscaler means it; kafka.Reader.Stats().Lag is not
// (it is the fetch lag of whichever partition was fetched last).
func Lag(ctx context.Context, client *kafka.Client, topic, group string) (map[int]int64, error) {
	committed, end, err := groupOffsets(ctx, client, topic, group)
	if err != nil {
		return nil, err
	}
	lag := make(map[int]int64, len(end))
	for p := range end {
		lag[p] = max(0, end[p]-committed[p])
	}
	return lag, nil
}

// groupOffsets returns, per partition of topic, the group's committed
// offset (the partition's first offset when the group never committed it)
// and the partition's end offset.
func groupOffsets(ctx context.Context, client *kafka.Client, topic, group string) (committed, end map[int]int64, err error) {
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, nil, fmt.Errorf("lag of %s: metadata: %w", topic, err)
	}
	var partitions []int
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return nil, nil, fmt.Errorf("lag of %s: metadata: %w", topic, t.Error)
		}
		for _, p := range t.Partitions {
			partitions = append(partitions, p.ID)
		}
	}
	if len(partitions) == 0 {
		return nil, nil, fmt.Errorf("lag of %s: topic has no partitions", topic)
	}

	end, err = listOffsets(ctx, client, topic, partitions, kafka.LastOffsetOf)
	if err != nil {
		return nil, nil, fmt.Errorf("lag of %s: end offsets: %w", topic, err)
	}

	committed = make(map[int]int64, len(partitions))
	res, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{
		GroupID: group,
		Topics:  map[string][]int{topic: partitions},
	})
	if err == nil {
		err = res.Error
	}
	switch {
	case errors.Is(err, kafka.GroupIdNotFound):
		// A group that never committed: everything from the start is lag.
	case err != nil:
		return nil, nil, fmt.Errorf("lag of %s for group %s: committed offsets: %w", topic, group, err)
	default:
		for _, p := range res.Topics[topic] {
			if p.Error != nil {
				return nil, nil, fmt.Errorf("lag of %s for group %s: committed offset of partition %d: %w", topic, group, p.Partition, p.Error)
			}
			if p.CommittedOffset >= 0 {
				committed[p.Partition] = p.CommittedOffset
			}
		}
	}

	var uncommitted []int
	for _, p := range partitions {
		if _, ok := committed[p]; !ok {
			uncommitted = append(uncommitted, p)
		}
	}
	if len(uncommitted) > 0 {
		start, err := listOffsets(ctx, client, topic, uncommitted, kafka.FirstOffsetOf)
		if err != nil {
			return nil, nil, fmt.Errorf("lag of %s: start offsets: %w", topic, err)
		}
		for p, off := range start {
			committed[p] = off
		}
	}

	return committed, end, nil
}

// listOffsets asks for one offset per partition; of picks which (first or
// last). First and last go in separate requests: a request naming a
// partition twice is invalid.
func listOffsets(ctx context.Context, client *kafka.Client, topic string, partitions []int, of func(int) kafka.OffsetRequest) (map[int]int64, error) {
	reqs := make([]kafka.OffsetRequest, len(partitions))
	for i, p := range partitions {
		reqs[i] = of(p)
	}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, err
	}
	out := make(map[int]int64, len(partitions))
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("partition %d: %w", p.Partition, p.Error)
		}
		if reqs[0].Timestamp == kafka.FirstOffset {
			out[p.Partition] = p.FirstOffset
		} else {
			out[p.Partition] = p.LastOffset
		}
	}
	for _, p := range partitions {
		if _, ok := out[p]; !ok {
			return nil, fmt.Errorf("partition %d: no offset in response", p)
		}
	}
	return out, nil
}

// oldestWaiting returns the timestamp of the record at offset in partition
// of topic: the oldest record the group has not committed past. ok is false
// when there is none (the partition is caught up, or the record was
// deleted by retention meanwhile).
func oldestWaiting(ctx context.Context, client *kafka.Client, topic string, partition int, offset int64) (time.Time, bool, error) {
	// MaxBytes 1: a broker returns the first record batch at offset whole
	// however small the limit, and that batch holds the record wanted. A
	// larger limit made every refresh of every worker read up to a MiB per
	// lagging partition only to look at one timestamp.
	res, err := client.Fetch(ctx, &kafka.FetchRequest{
		Topic: topic, Partition: partition, Offset: offset,
		MinBytes: 1, MaxBytes: 1, MaxWait: 100 * time.Millisecond,
	})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("fetch %s/%d at %d: %w", topic, partition, offset, err)
	}
	for {
		// A fetch returns whole batches: skip the records before offset.
		r, err := res.Records.ReadRecord()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return time.Time{}, false, nil
			}
			return time.Time{}, false, fmt.Errorf("read %s/%d at %d: %w", topic, partition, offset, err)
		}
		if r.Offset >= offset {
			return r.Time, true, nil
		}
	}
}

// CheckAssigned reports nil when group is stable and its members own all
// partitions partitions of topic between them, and otherwise what is
// missing: a harness's way to know a group is consuming before it
// measures.
func CheckAssigned(ctx context.Context, client *kafka.Client, group, topic string, partitions int) error {
	resp, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return fmt.Errorf("describe group: %w", err)
	}
	if len(resp.Groups) != 1 {
		return fmt.Errorf("describe group: %d groups in answer", len(resp.Groups))
	}
	g := resp.Groups[0]
	if g.Error != nil {
		return fmt.Errorf("describe group: %w", g.Error)
	}
	if g.GroupState != "Stable" {
		return fmt.Errorf("group %s is %q", group, g.GroupState)
	}
	assigned := 0
	for _, m := range g.Members {
		for _, t := range m.MemberAssignments.Topics {
			if t.Topic == topic {
				assigned += len(t.Partitions)
			}
		}
	}
	if assigned != partitions {
		return fmt.Errorf("group %s has %d of %d partitions assigned", group, assigned, partitions)
	}
	return nil
}
