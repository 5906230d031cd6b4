package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/retry"
)

// defaultWorkerGroup is the worker's default consumer group
// (POSTLINE_CONSUMER_GROUP of cmd/worker).
const defaultWorkerGroup = "postline-worker"

// partitionLag is one partition in the output of postctl lag.
type partitionLag struct {
	Partition int    `json:"partition"`
	Lag       int64  `json:"lag"`
	Member    string `json:"member,omitempty"` // the member's client ID and host
}

// topicLag is one topic of a group in the output of postctl lag.
type topicLag struct {
	Topic      string         `json:"topic"`
	Total      int64          `json:"total"`
	Partitions []partitionLag `json:"partitions"`
}

// groupMember is a member of a consumer group.
type groupMember struct {
	MemberID   string `json:"member_id"`
	ClientID   string `json:"client_id"`
	ClientHost string `json:"client_host"`
	// Assigned maps topic to the member's partitions of it.
	Assigned map[string][]int `json:"assigned"`
}

// groupLag is one consumer group in the output of postctl lag.
type groupLag struct {
	Group   string        `json:"group"`
	State   string        `json:"state"`
	Total   int64         `json:"total"`
	Topics  []topicLag    `json:"topics"`
	Members []groupMember `json:"members"`
}

// lagReport is the output of postctl lag.
type lagReport struct {
	Workers   groupLag  `json:"workers"`
	Scheduler *groupLag `json:"scheduler,omitempty"`
}

func newLagCmd(g *globals) *cobra.Command {
	var (
		group, schedulerGroup string
		withScheduler         bool
	)
	cmd := &cobra.Command{
		Use:   "lag",
		Short: "Show the consumer groups' lag per partition and in total, and their members",
		Long: `Show the whole worker group's lag on the jobs topic (--topic): per partition, the
records the group has not committed past (end offset minus committed offset, or
minus the first retained offset when the group never committed the partition),
the total, and the group's state and members with their assigned partitions.
Unless --scheduler=false, the same for the retry scheduler's group on the delay
topics (<--retry-topic-prefix>.<tier> for each of --retry-tiers): its lag is the
retries waiting for their time, not a backlog.

--output json prints one object:
  {"workers": GROUP, "scheduler": GROUP (left out with --scheduler=false)}
  GROUP = {"group", "state", "total",
           "topics": [{"topic", "total", "partitions": [{"partition", "lag", "member"?}]}],
           "members": [{"member_id", "client_id", "client_host", "assigned": {topic: [partition]}}]}
"state" is Kafka's group state (Stable, Empty, PreparingRebalance, Dead, ...);
"member" is the client ID and host of the member assigned the partition.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(group) == "" {
				return usagef("--group is empty")
			}
			var tiers retry.Tiers
			if withScheduler {
				if strings.TrimSpace(schedulerGroup) == "" {
					return usagef("--scheduler-group is empty (or use --scheduler=false)")
				}
				var err error
				if tiers, err = retry.ParseTiers(g.retryTiers); err != nil {
					return usagef("--retry-tiers %q: %w", g.retryTiers, err)
				}
			}
			return lag(cmd.Context(), g, group, schedulerGroup, tiers, withScheduler)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&group, "group", defaultWorkerGroup, "the workers' consumer group (env POSTLINE_CONSUMER_GROUP)")
	fl.StringVar(&schedulerGroup, "scheduler-group", retry.DefaultSchedulerGroup, "the retry scheduler's consumer group (env POSTLINE_SCHEDULER_GROUP)")
	fl.BoolVar(&withScheduler, "scheduler", true, "also show the scheduler group's lag on the delay topics")
	return cmd
}

func lag(ctx context.Context, g *globals, group, schedulerGroup string, tiers retry.Tiers, withScheduler bool) error {
	client, closeConn := g.kafka.Client("", 10*time.Second)
	defer closeConn()

	var rep lagReport
	var err error
	if rep.Workers, err = readGroupLag(ctx, client, group, []string{g.topic}); err != nil {
		return fmt.Errorf("lag of group %s on %s (--group, --topic): %w", group, g.topic, err)
	}
	if withScheduler {
		topics := tiers.Topics(g.retryPrefix)
		s, err := readGroupLag(ctx, client, schedulerGroup, topics)
		if err != nil {
			return fmt.Errorf("lag of group %s on the delay topics (--scheduler-group, --retry-topic-prefix, --retry-tiers; "+
				"--scheduler=false skips them): %w", schedulerGroup, err)
		}
		rep.Scheduler = &s
	}
	return printReport(g, rep, func() error {
		groups := []groupLag{rep.Workers}
		if rep.Scheduler != nil {
			groups = append(groups, *rep.Scheduler)
		}
		for i, gl := range groups {
			if i > 0 {
				fmt.Fprintln(g.stdout)
			}
			if err := writeGroupLag(g, gl); err != nil {
				return err
			}
		}
		return nil
	})
}

// readGroupLag reads group's lag on topics and its membership.
func readGroupLag(ctx context.Context, client *kafka.Client, group string, topics []string) (groupLag, error) {
	out := groupLag{Group: group, Topics: []topicLag{}, Members: []groupMember{}}
	res, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return out, fmt.Errorf("describe group: %w", err)
	}
	owner := map[string]map[int]string{} // topic, partition: member
	for _, dg := range res.Groups {
		if dg.GroupID != group {
			continue
		}
		if dg.Error != nil {
			return out, fmt.Errorf("describe group: %w", dg.Error)
		}
		out.State = dg.GroupState
		for _, m := range dg.Members {
			gm := groupMember{MemberID: m.MemberID, ClientID: m.ClientID, ClientHost: m.ClientHost, Assigned: map[string][]int{}}
			for _, t := range m.MemberAssignments.Topics {
				ps := slices.Sorted(slices.Values(t.Partitions))
				gm.Assigned[t.Topic] = ps
				if owner[t.Topic] == nil {
					owner[t.Topic] = map[int]string{}
				}
				for _, p := range ps {
					owner[t.Topic][p] = m.ClientID + "@" + strings.TrimPrefix(m.ClientHost, "/")
				}
			}
			out.Members = append(out.Members, gm)
		}
	}
	slices.SortFunc(out.Members, func(a, b groupMember) int { return strings.Compare(a.MemberID, b.MemberID) })
	for _, name := range topics {
		perPartition, err := consumer.Lag(ctx, client, name, group)
		if err != nil {
			return out, err
		}
		tl := topicLag{Topic: name, Partitions: []partitionLag{}}
		for _, p := range slices.Sorted(maps.Keys(perPartition)) {
			tl.Partitions = append(tl.Partitions, partitionLag{Partition: p, Lag: perPartition[p], Member: owner[name][p]})
			tl.Total += perPartition[p]
		}
		out.Topics = append(out.Topics, tl)
		out.Total += tl.Total
	}
	return out, nil
}

// writeGroupLag writes the text form of one group: a summary line, a table
// of partitions, and a table of members.
func writeGroupLag(g *globals, gl groupLag) error {
	state := gl.State
	if state == "" {
		state = "unknown"
	}
	fmt.Fprintf(g.stdout, "group %s (%s): total lag %d, %d %s\n", gl.Group, state, gl.Total,
		len(gl.Members), plural(len(gl.Members), "member", "members"))
	var rows [][]string
	for _, t := range gl.Topics {
		for _, p := range t.Partitions {
			rows = append(rows, []string{t.Topic, strconv.Itoa(p.Partition), strconv.FormatInt(p.Lag, 10), cmp.Or(p.Member, "-")})
		}
		if len(t.Partitions) > 1 {
			rows = append(rows, []string{t.Topic, "total", strconv.FormatInt(t.Total, 10), ""})
		}
	}
	if err := writeTable(g.stdout, []string{"TOPIC", "PARTITION", "LAG", "MEMBER"}, rows); err != nil {
		return err
	}
	if len(gl.Members) == 0 {
		return nil
	}
	rows = rows[:0]
	for _, m := range gl.Members {
		var assigned []string
		for _, t := range slices.Sorted(maps.Keys(m.Assigned)) {
			ps := make([]string, len(m.Assigned[t]))
			for i, p := range m.Assigned[t] {
				ps[i] = strconv.Itoa(p)
			}
			assigned = append(assigned, t+":"+strings.Join(ps, ","))
		}
		rows = append(rows, []string{m.ClientID, strings.TrimPrefix(m.ClientHost, "/"), cmp.Or(strings.Join(assigned, " "), "-"), m.MemberID})
	}
	fmt.Fprintln(g.stdout)
	return writeTable(g.stdout, []string{"CLIENT_ID", "HOST", "ASSIGNED", "MEMBER_ID"}, rows)
}
