package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/postline/postline/internal/retry"
)

// DefaultWorkerGroup is the worker's default consumer group
// (POSTLINE_CONSUMER_GROUP of cmd/worker).
const DefaultWorkerGroup = "postline-worker"

// QueueNames names the topics and groups Queues reads.
type QueueNames struct {
	// JobsTopic is the jobs topic; WorkerGroup the workers' group.
	JobsTopic, WorkerGroup string
	// RetryTiers are the delay tiers, each with its topic
	// <RetryPrefix>.<tier>, read by the retry scheduler's SchedulerGroup.
	// With no tiers the scheduler's group is not read.
	RetryTiers     retry.Tiers
	RetryPrefix    string
	SchedulerGroup string
}

func (n QueueNames) isZero() bool {
	return n.JobsTopic == "" && n.WorkerGroup == "" && len(n.RetryTiers) == 0 && n.RetryPrefix == "" && n.SchedulerGroup == ""
}

func (n QueueNames) validate() error {
	switch {
	case strings.TrimSpace(n.JobsTopic) == "":
		return errors.New("fleet: QueueNames.JobsTopic is empty")
	case strings.TrimSpace(n.WorkerGroup) == "":
		return errors.New("fleet: QueueNames.WorkerGroup is empty")
	case len(n.RetryTiers) == 0:
		return nil
	case strings.TrimSpace(n.SchedulerGroup) == "":
		return errors.New("fleet: QueueNames.SchedulerGroup is empty (or leave RetryTiers empty)")
	case strings.TrimSpace(n.RetryPrefix) == "":
		return errors.New("fleet: QueueNames.RetryPrefix is empty (or leave RetryTiers empty)")
	}
	return n.RetryTiers.Validate()
}

// PartitionLag is one partition's lag for a group.
type PartitionLag struct {
	Partition int   `json:"partition"`
	Lag       int64 `json:"lag"`
	// Member is the client ID and host ("worker-1@10.0.0.7") of the member
	// assigned the partition; "" when no member has it.
	Member string `json:"member,omitempty"`
}

// TopicLag is a group's lag on one topic.
type TopicLag struct {
	Topic      string         `json:"topic"`
	Total      int64          `json:"total"`
	Partitions []PartitionLag `json:"partitions"` // by partition
}

// GroupMember is a member of a consumer group.
type GroupMember struct {
	MemberID   string `json:"member_id"`
	ClientID   string `json:"client_id"`
	ClientHost string `json:"client_host"` // as Kafka reports it ("/10.0.0.7")
	// Assigned maps topic to the member's partitions of it, ascending.
	Assigned map[string][]int `json:"assigned"`
}

// GroupLag is a consumer group's lag on its topics, and its membership.
type GroupLag struct {
	Group string `json:"group"`
	// State is Kafka's group state (Stable, Empty, PreparingRebalance,
	// Dead, ...); "" when Kafka did not describe the group.
	State   string        `json:"state"`
	Total   int64         `json:"total"`
	Topics  []TopicLag    `json:"topics"`  // in the order asked for
	Members []GroupMember `json:"members"` // by member ID
}

// TierWaiting is how many retries wait in one delay tier: the scheduler
// group's lag on the tier's topic. They wait for their time; it is not a
// backlog.
type TierWaiting struct {
	Tier    time.Duration `json:"-"`
	Name    string        `json:"tier"` // the tier's short name: "5s", "6h"
	Topic   string        `json:"topic"`
	Waiting int64         `json:"waiting"`
}

// Queues is what waits in Kafka: the workers' lag on the jobs topic, and
// the retry scheduler's on the delay topics, also per tier.
type Queues struct {
	Workers GroupLag `json:"workers"`
	// Scheduler is nil, and Tiers empty, when no tiers were named.
	Scheduler *GroupLag     `json:"scheduler,omitempty"`
	Tiers     []TierWaiting `json:"tiers,omitempty"` // in tier order
}

// GroupLagError is a group whose lag could not be read.
type GroupLagError struct {
	Group string
	// Scheduler is true for the retry scheduler's group on the delay
	// topics, false for the workers' group on the jobs topic.
	Scheduler bool
	Err       error
}

func (e *GroupLagError) Error() string {
	if e.Scheduler {
		return fmt.Sprintf("lag of group %s on the delay topics: %v", e.Group, e.Err)
	}
	return fmt.Sprintf("lag of group %s on the jobs topic: %v", e.Group, e.Err)
}

func (e *GroupLagError) Unwrap() error { return e.Err }

// groupSource opens a connection to the groups: one per Queues call, so
// its reads share the connections.
type groupSource interface {
	open() (groupReader, func())
}

// groupReader reads consumer groups.
type groupReader interface {
	// membership reads the group's state and members; a group Kafka does
	// not know is the zero membership.
	membership(ctx context.Context, group string) (membership, error)
	// lag reads the group's lag per partition of topic: the end offset
	// minus the committed one, or minus the first retained offset when the
	// group never committed the partition.
	lag(ctx context.Context, group, topic string) (map[int]int64, error)
}

// membership is a group's state and members as Kafka describes them.
type membership struct {
	State   string
	Members []GroupMember
}

// Queues reads the workers' lag per partition of the jobs topic with each
// partition's member and, when tiers are configured, the retry
// scheduler's lag on the delay topics and the retries waiting per tier.
// A group's read failing is a *GroupLagError.
func (r *Reader) Queues(ctx context.Context) (Queues, error) {
	if r.groups == nil {
		return Queues{}, ErrNotConfigured
	}
	gr, closeConn := r.groups.open()
	defer closeConn()
	return readQueues(ctx, gr, r.names)
}

func readQueues(ctx context.Context, gr groupReader, n QueueNames) (Queues, error) {
	var q Queues
	var err error
	if q.Workers, err = readGroupLag(ctx, gr, n.WorkerGroup, []string{n.JobsTopic}); err != nil {
		return q, &GroupLagError{Group: n.WorkerGroup, Err: err}
	}
	if len(n.RetryTiers) == 0 {
		return q, nil
	}
	topics := n.RetryTiers.Topics(n.RetryPrefix)
	s, err := readGroupLag(ctx, gr, n.SchedulerGroup, topics)
	if err != nil {
		return q, &GroupLagError{Group: n.SchedulerGroup, Scheduler: true, Err: err}
	}
	q.Scheduler = &s
	q.Tiers = tiersWaiting(n.RetryTiers, topics, s)
	return q, nil
}

// tiersWaiting is each tier's waiting count: the group's total on the
// tier's topic (topics[i] is tier i's).
func tiersWaiting(tiers retry.Tiers, topics []string, s GroupLag) []TierWaiting {
	total := make(map[string]int64, len(s.Topics))
	for _, t := range s.Topics {
		total[t.Topic] = t.Total
	}
	out := make([]TierWaiting, len(tiers))
	for i, d := range tiers {
		out[i] = TierWaiting{Tier: d, Name: retry.TierName(d), Topic: topics[i], Waiting: total[topics[i]]}
	}
	return out
}

// readGroupLag reads group's membership and its lag on topics, and joins
// them: each partition with the member assigned it.
func readGroupLag(ctx context.Context, gr groupReader, group string, topics []string) (GroupLag, error) {
	out := GroupLag{Group: group, Topics: []TopicLag{}, Members: []GroupMember{}}
	m, err := gr.membership(ctx, group)
	if err != nil {
		return out, fmt.Errorf("describe group: %w", err)
	}
	out.State = m.State
	owner := map[string]map[int]string{} // topic, partition: member
	for _, gm := range m.Members {
		for t, ps := range gm.Assigned {
			if owner[t] == nil {
				owner[t] = map[int]string{}
			}
			for _, p := range ps {
				owner[t][p] = gm.ClientID + "@" + strings.TrimPrefix(gm.ClientHost, "/")
			}
		}
		out.Members = append(out.Members, gm)
	}
	slices.SortFunc(out.Members, func(a, b GroupMember) int { return strings.Compare(a.MemberID, b.MemberID) })
	for _, name := range topics {
		perPartition, err := gr.lag(ctx, group, name)
		if err != nil {
			return out, err
		}
		tl := TopicLag{Topic: name, Partitions: []PartitionLag{}}
		for _, p := range slices.Sorted(maps.Keys(perPartition)) {
			tl.Partitions = append(tl.Partitions, PartitionLag{Partition: p, Lag: perPartition[p], Member: owner[name][p]})
			tl.Total += perPartition[p]
		}
		out.Topics = append(out.Topics, tl)
		out.Total += tl.Total
	}
	return out, nil
}
