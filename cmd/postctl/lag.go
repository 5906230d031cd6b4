package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/fleet"
	"github.com/postline/postline/internal/retry"
)

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
  {"workers": GROUP, "scheduler": GROUP, "tiers": [{"tier", "topic", "waiting"}]}
  ("scheduler" and "tiers" are left out with --scheduler=false; "waiting" is the
  scheduler group's lag on the tier's topic)
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
	fl.StringVar(&group, "group", fleet.DefaultWorkerGroup, "the workers' consumer group (env POSTLINE_CONSUMER_GROUP)")
	fl.StringVar(&schedulerGroup, "scheduler-group", retry.DefaultSchedulerGroup, "the retry scheduler's consumer group (env POSTLINE_SCHEDULER_GROUP)")
	fl.BoolVar(&withScheduler, "scheduler", true, "also show the scheduler group's lag on the delay topics")
	return cmd
}

func lag(ctx context.Context, g *globals, group, schedulerGroup string, tiers retry.Tiers, withScheduler bool) error {
	names := fleet.QueueNames{JobsTopic: g.topic, WorkerGroup: group}
	if withScheduler {
		names.RetryTiers, names.RetryPrefix, names.SchedulerGroup = tiers, g.retryPrefix, schedulerGroup
	}
	r, err := fleet.New(fleet.Config{Kafka: g.kafka, Queues: names})
	if err != nil {
		return err
	}
	q, err := r.Queues(ctx)
	if ge := (*fleet.GroupLagError)(nil); errors.As(err, &ge) {
		if ge.Scheduler {
			return fmt.Errorf("lag of group %s on the delay topics (--scheduler-group, --retry-topic-prefix, --retry-tiers; "+
				"--scheduler=false skips them): %w", ge.Group, ge.Err)
		}
		return fmt.Errorf("lag of group %s on %s (--group, --topic): %w", ge.Group, g.topic, ge.Err)
	}
	if err != nil {
		return err
	}
	return printReport(g, q, func() error { return writeQueues(g, q) })
}

// writeQueues writes the text form of postctl lag: the workers' group, then
// the scheduler's and the retries waiting per tier.
func writeQueues(g *globals, q fleet.Queues) error {
	if err := writeGroupLag(g, q.Workers); err != nil {
		return err
	}
	if q.Scheduler == nil {
		return nil
	}
	fmt.Fprintln(g.stdout)
	if err := writeGroupLag(g, *q.Scheduler); err != nil {
		return err
	}
	waiting := make([]string, len(q.Tiers))
	for i, t := range q.Tiers {
		waiting[i] = t.Name + " " + strconv.FormatInt(t.Waiting, 10)
	}
	_, err := fmt.Fprintf(g.stdout, "\nretries waiting by tier: %s\n", strings.Join(waiting, ", "))
	return err
}

// writeGroupLag writes the text form of one group: a summary line, a table
// of partitions, and a table of members.
func writeGroupLag(g *globals, gl fleet.GroupLag) error {
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
