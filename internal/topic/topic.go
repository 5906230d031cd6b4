// Package topic administers Kafka topics: it creates the topics Postline
// needs and waits until they can be used, deletes them, and describes their
// partitions and offsets. It knows topics, partitions and configs, not
// mail: which topics exist and how they are sized is decided by the callers
// (Defaults gives the standard set). It does not produce or consume.
package topic

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/postline/postline/internal/backoff"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/segmentio/kafka-go"
)

// Sizes and settings of the standard topics.
const (
	// DefaultJobsPartitions is the partition count of the jobs topic.
	DefaultJobsPartitions = 8
	// DefaultDLQPartitions is the partition count of the dead-letter topic.
	DefaultDLQPartitions = 4
	// MaxMessageBytes is max.message.bytes of the jobs topic: twice the job
	// package's 2 MiB record limit, so a full-size job plus its headers
	// always fits. The broker default (about 1 MiB) would reject large jobs.
	MaxMessageBytes = 4 << 20
	// CopyMaxMessageBytes is max.message.bytes of the topics Postline copies
	// job records into (the dead-letter and delay topics): the jobs topic's
	// limit plus room for the headers a copy adds, so that any record the
	// jobs topic accepted can be dead-lettered or retried.
	CopyMaxMessageBytes = MaxMessageBytes + kafkaclient.HeaderHeadroomBytes + kafkaclient.BatchOverheadBytes + kafkaclient.RecordOverheadBytes
	// DLQRetention is how long dead letters are kept.
	DLQRetention = 14 * 24 * time.Hour
	// DefaultWaitTimeout bounds Ensure when ctx has no earlier deadline.
	DefaultWaitTimeout = 30 * time.Second
	// DefaultReplicationFactor asks the broker for its
	// default.replication.factor.
	DefaultReplicationFactor = -1
)

// pollInterval is how often Ensure re-reads metadata while it waits.
const pollInterval = 100 * time.Millisecond

// Spec describes a topic to create.
type Spec struct {
	// Name is the topic name: at most 249 characters of [a-zA-Z0-9._-].
	Name string
	// Partitions is the number of partitions, at least 1.
	Partitions int
	// ReplicationFactor is the number of replicas of each partition.
	// Defaults to DefaultReplicationFactor (the broker's default).
	ReplicationFactor int
	// Configs are topic-level configs such as "retention.ms".
	// Defaults to none (broker defaults).
	Configs map[string]string
}

// Validate reports a missing or illegal name or partition count.
func (s Spec) Validate() error {
	if err := validName(s.Name); err != nil {
		return err
	}
	if s.Partitions < 1 {
		return fmt.Errorf("topic %s: Partitions must be at least 1, got %d", s.Name, s.Partitions)
	}
	if s.ReplicationFactor < -1 {
		return fmt.Errorf("topic %s: ReplicationFactor must be -1 (broker default) or positive, got %d", s.Name, s.ReplicationFactor)
	}
	return nil
}

func validName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 249 {
		return fmt.Errorf("topic name %q: want 1 to 249 characters, and not \".\" or \"..\"", name)
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic name %q: character %q is not one of [a-zA-Z0-9._-]", name, c)
		}
	}
	return nil
}

// Defaults returns the specs of the jobs topic (partitions partitions, or
// DefaultJobsPartitions when zero, max.message.bytes MaxMessageBytes) and the
// dead-letter topic (DefaultDLQPartitions partitions, max.message.bytes
// CopyMaxMessageBytes, retention DLQRetention).
func Defaults(jobs, dlq string, partitions int) []Spec {
	maxBytes := strconv.Itoa(MaxMessageBytes)
	return []Spec{
		{
			Name:       jobs,
			Partitions: cmp.Or(partitions, DefaultJobsPartitions),
			Configs:    map[string]string{"max.message.bytes": maxBytes},
		},
		{
			Name:       dlq,
			Partitions: DefaultDLQPartitions,
			Configs: map[string]string{
				"max.message.bytes": strconv.Itoa(CopyMaxMessageBytes),
				"retention.ms":      strconv.FormatInt(DLQRetention.Milliseconds(), 10),
			},
		},
	}
}

// Events topic settings.
const (
	// DefaultEventsPartitions is the partition count of the events topic.
	DefaultEventsPartitions = 8
	// EventsRetention is how long events are kept: long enough for a
	// consumer that was down over a long weekend to catch up.
	EventsRetention = 7 * 24 * time.Hour
)

// EventsSpec is the events topic: one small JSON record per recipient
// transition, keyed by Message-ID.
func EventsSpec(name string) Spec {
	return Spec{
		Name:       name,
		Partitions: DefaultEventsPartitions,
		Configs:    map[string]string{"retention.ms": strconv.FormatInt(EventsRetention.Milliseconds(), 10)},
	}
}

// TopicInfo describes one topic.
type TopicInfo struct {
	// Name is the topic name.
	Name string
	// Partitions are ordered by ID.
	Partitions []PartitionInfo
}

// Messages returns the number of records currently retained in the topic.
func (t TopicInfo) Messages() int64 {
	var n int64
	for _, p := range t.Partitions {
		n += p.EndOffset - p.StartOffset
	}
	return n
}

// PartitionInfo describes one partition.
type PartitionInfo struct {
	// ID is the partition number.
	ID int
	// Leader is the broker ID of the leader, or -1 when there is none.
	Leader int
	// Replicas and ISR are broker IDs.
	Replicas, ISR []int
	// StartOffset is the first retained offset; EndOffset is the offset the
	// next record will get.
	StartOffset, EndOffset int64
}

// Ensure creates the topics that do not exist and waits until every topic
// has its partitions visible with a leader. A topic that already exists is
// fine, but one with fewer partitions than its spec is an error (Ensure does
// not add partitions: that would move keys between partitions). An existing
// topic whose max.message.bytes is below its spec's is raised to it (never
// lowered), so that topics made by an older Postline pass the worker's start
// check. Transient errors (no broker reachable yet, controller moving) are
// tried again until ctx is done or DefaultWaitTimeout has passed.
func Ensure(ctx context.Context, k *kafkaclient.Cluster, specs ...Spec) error {
	specs = slices.Clone(specs)
	for i := range specs {
		specs[i].ReplicationFactor = cmp.Or(specs[i].ReplicationFactor, DefaultReplicationFactor)
		if err := specs[i].Validate(); err != nil {
			return err
		}
	}
	if len(specs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultWaitTimeout)
	defer cancel()
	c, done := k.Client("topic", 10*time.Second)
	defer done()

	existed, err := create(ctx, c, specs)
	if err != nil {
		return err
	}
	if err := raiseLimits(ctx, c, specs, existed); err != nil {
		return err
	}
	return waitReady(ctx, c, specs, existed)
}

// raiseLimits sets max.message.bytes of the existing topics among specs to
// their spec's value where the topic's is lower.
func raiseLimits(ctx context.Context, c *kafka.Client, specs []Spec, existed map[string]bool) error {
	want := make(map[string]int)
	req := &kafka.DescribeConfigsRequest{}
	for _, s := range specs {
		n, err := strconv.Atoi(s.Configs["max.message.bytes"])
		if !existed[s.Name] || err != nil {
			continue
		}
		want[s.Name] = n
		req.Resources = append(req.Resources, kafka.DescribeConfigRequestResource{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: s.Name, ConfigNames: []string{"max.message.bytes"},
		})
	}
	if len(want) == 0 {
		return nil
	}
	resp, err := c.DescribeConfigs(ctx, req)
	if err != nil {
		return fmt.Errorf("describe existing topics: %w", err)
	}
	alter := &kafka.IncrementalAlterConfigsRequest{}
	for _, r := range resp.Resources {
		for _, e := range r.ConfigEntries {
			if got, err := strconv.Atoi(e.ConfigValue); e.ConfigName == "max.message.bytes" && err == nil && got < want[r.ResourceName] {
				alter.Resources = append(alter.Resources, kafka.IncrementalAlterConfigsRequestResource{
					ResourceType: kafka.ResourceTypeTopic, ResourceName: r.ResourceName,
					Configs: []kafka.IncrementalAlterConfigsRequestConfig{{
						Name: "max.message.bytes", Value: strconv.Itoa(want[r.ResourceName]), ConfigOperation: kafka.ConfigOperationSet,
					}},
				})
			}
		}
	}
	if len(alter.Resources) == 0 {
		return nil
	}
	res, err := c.IncrementalAlterConfigs(ctx, alter)
	if err != nil {
		return fmt.Errorf("raise max.message.bytes of existing topics: %w", err)
	}
	for _, r := range res.Resources {
		if r.Error != nil {
			return fmt.Errorf("raise max.message.bytes of topic %s: %w", r.ResourceName, r.Error)
		}
	}
	return nil
}

// create creates specs, retrying transient failures, and returns the names
// of the topics that already existed.
func create(ctx context.Context, c *kafka.Client, specs []Spec) (map[string]bool, error) {
	existed := make(map[string]bool)
	pending := slices.Clone(specs)
	for {
		req := &kafka.CreateTopicsRequest{Topics: make([]kafka.TopicConfig, len(pending))}
		for i, s := range pending {
			req.Topics[i] = kafka.TopicConfig{
				Topic:             s.Name,
				NumPartitions:     s.Partitions,
				ReplicationFactor: s.ReplicationFactor,
				ConfigEntries:     configEntries(s.Configs),
			}
		}
		resp, err := c.CreateTopics(ctx, req)
		var retry []Spec
		var lastErr error
		if err != nil {
			retry, lastErr = pending, err
		} else {
			for _, s := range pending {
				switch err := resp.Errors[s.Name]; {
				case err == nil:
				case errors.Is(err, kafka.TopicAlreadyExists):
					existed[s.Name] = true
				case isTemporary(err):
					retry, lastErr = append(retry, s), err
				default:
					return nil, fmt.Errorf("create topic %s: %w", s.Name, err)
				}
			}
		}
		if len(retry) == 0 {
			return existed, nil
		}
		if err := backoff.Sleep(ctx, pollInterval); err != nil {
			return nil, fmt.Errorf("create topics: %w (last error: %w)", err, lastErr)
		}
		pending = retry
	}
}

// waitReady polls metadata until every topic has its partitions with
// leaders.
func waitReady(ctx context.Context, c *kafka.Client, specs []Spec, existed map[string]bool) error {
	names := specNames(specs)
	var lastProblem error
	for {
		meta, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
		if err != nil {
			lastProblem = err
		} else {
			lastProblem = nil
			byName := make(map[string]kafka.Topic, len(meta.Topics))
			for _, t := range meta.Topics {
				byName[t.Name] = t
			}
			for _, s := range specs {
				want := s.Partitions
				if existed[s.Name] {
					want = 1 // the topic is as it is; compare below
				}
				if err := ready(byName[s.Name], s.Name, want); err != nil {
					lastProblem = err
					break
				}
				if n := len(byName[s.Name].Partitions); n < s.Partitions {
					return fmt.Errorf("topic %s exists with %d partitions, want at least %d", s.Name, n, s.Partitions)
				}
			}
		}
		if lastProblem == nil {
			// Metadata can name a leader before that broker serves the
			// partition (KRaft brokers apply the metadata log
			// asynchronously): ask every partition for its end offset.
			lastProblem = offsetsServed(ctx, c, specs)
		}
		if lastProblem == nil {
			return nil
		}
		if err := backoff.Sleep(ctx, pollInterval); err != nil {
			return fmt.Errorf("wait for topics %v: %w (last problem: %w)", names, err, lastProblem)
		}
	}
}

// offsetsServed reports the first partition of specs whose leader does not
// answer ListOffsets yet.
func offsetsServed(ctx context.Context, c *kafka.Client, specs []Spec) error {
	req := &kafka.ListOffsetsRequest{Topics: make(map[string][]kafka.OffsetRequest, len(specs))}
	meta, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: specNames(specs)})
	if err != nil {
		return err
	}
	for _, t := range meta.Topics {
		for _, p := range t.Partitions {
			req.Topics[t.Name] = append(req.Topics[t.Name], kafka.LastOffsetOf(p.ID))
		}
	}
	resp, err := c.ListOffsets(ctx, req)
	if err != nil {
		return err
	}
	for name, parts := range req.Topics {
		if got := len(resp.Topics[name]); got != len(parts) {
			return fmt.Errorf("topic %s: %d of %d partitions answered ListOffsets", name, got, len(parts))
		}
		for _, po := range resp.Topics[name] {
			if po.Error != nil {
				return fmt.Errorf("topic %s partition %d: %w", name, po.Partition, po.Error)
			}
		}
	}
	return nil
}

func specNames(specs []Spec) []string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return names
}

func ready(t kafka.Topic, name string, want int) error {
	switch {
	case t.Name == "":
		return fmt.Errorf("topic %s not in metadata yet", name)
	case t.Error != nil:
		return fmt.Errorf("topic %s: %w", name, t.Error)
	case len(t.Partitions) < want:
		return fmt.Errorf("topic %s has %d of %d partitions", name, len(t.Partitions), want)
	}
	for _, p := range t.Partitions {
		if p.Error != nil {
			return fmt.Errorf("topic %s partition %d: %w", name, p.ID, p.Error)
		}
		// kafka-go maps leader -1 to a zero Broker: no host means no leader.
		if p.Leader.Host == "" {
			return fmt.Errorf("topic %s partition %d has no leader", name, p.ID)
		}
	}
	return nil
}

// Delete deletes the named topics. Topics that do not exist are ignored.
// Deletion completes asynchronously on the brokers.
func Delete(ctx context.Context, k *kafkaclient.Cluster, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	c, done := k.Client("topic", 10*time.Second)
	defer done()
	resp, err := c.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: names})
	if err != nil {
		return fmt.Errorf("delete topics %v: %w", names, err)
	}
	var errs []error
	for _, name := range names {
		if err := resp.Errors[name]; err != nil && !errors.Is(err, kafka.UnknownTopicOrPartition) {
			errs = append(errs, fmt.Errorf("delete topic %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Describe returns the partitions of the named topics, in the order of
// names, with their leaders, replicas and start and end offsets. A topic
// that does not exist is an error matching kafka.UnknownTopicOrPartition.
func Describe(ctx context.Context, k *kafkaclient.Cluster, names ...string) ([]TopicInfo, error) {
	if len(names) == 0 {
		return nil, nil
	}
	c, done := k.Client("topic", 10*time.Second)
	defer done()
	meta, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
	if err != nil {
		return nil, fmt.Errorf("describe topics %v: %w", names, err)
	}
	byName := make(map[string]kafka.Topic, len(meta.Topics))
	for _, t := range meta.Topics {
		byName[t.Name] = t
	}
	infos := make([]TopicInfo, len(names))
	offsets := &kafka.ListOffsetsRequest{Topics: make(map[string][]kafka.OffsetRequest, len(names))}
	for i, name := range names {
		t, ok := byName[name]
		switch {
		case !ok:
			return nil, fmt.Errorf("describe topic %s: %w", name, kafka.UnknownTopicOrPartition)
		case t.Error != nil:
			return nil, fmt.Errorf("describe topic %s: %w", name, t.Error)
		}
		info := TopicInfo{Name: name, Partitions: make([]PartitionInfo, len(t.Partitions))}
		for j, p := range t.Partitions {
			leader := -1
			if p.Leader.Host != "" {
				leader = p.Leader.ID
			}
			info.Partitions[j] = PartitionInfo{ID: p.ID, Leader: leader, Replicas: brokerIDs(p.Replicas), ISR: brokerIDs(p.Isr)}
			offsets.Topics[name] = append(offsets.Topics[name], kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
		}
		slices.SortFunc(info.Partitions, func(a, b PartitionInfo) int { return a.ID - b.ID })
		infos[i] = info
	}
	resp, err := c.ListOffsets(ctx, offsets)
	if err != nil {
		return nil, fmt.Errorf("list offsets of %v: %w", names, err)
	}
	for i := range infos {
		got := make(map[int]kafka.PartitionOffsets)
		for _, po := range resp.Topics[infos[i].Name] {
			got[po.Partition] = po
		}
		for j := range infos[i].Partitions {
			p := &infos[i].Partitions[j]
			po, ok := got[p.ID]
			if !ok {
				return nil, fmt.Errorf("list offsets of %s partition %d: no answer", infos[i].Name, p.ID)
			}
			if po.Error != nil {
				return nil, fmt.Errorf("list offsets of %s partition %d: %w", infos[i].Name, p.ID, po.Error)
			}
			p.StartOffset, p.EndOffset = po.FirstOffset, po.LastOffset
		}
	}
	return infos, nil
}

func configEntries(m map[string]string) []kafka.ConfigEntry {
	var entries []kafka.ConfigEntry
	for _, k := range slices.Sorted(maps.Keys(m)) {
		entries = append(entries, kafka.ConfigEntry{ConfigName: k, ConfigValue: m[k]})
	}
	return entries
}

func brokerIDs(bs []kafka.Broker) []int {
	ids := make([]int, len(bs))
	for i, b := range bs {
		ids[i] = b.ID
	}
	return ids
}

// isTemporary reports whether a per-topic CreateTopics error may go away on
// retry.
func isTemporary(err error) bool {
	var ke kafka.Error
	return errors.As(err, &ke) && ke.Temporary()
}
