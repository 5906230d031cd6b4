package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/topic"
)

func newTopicsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "Create and describe the jobs, dead-letter and delay topics",
	}
	cmd.AddCommand(newTopicsCreateCmd(g), newTopicsDescribeCmd(g))
	return cmd
}

// topicSummary is one topic in the output of the topics commands.
type topicSummary struct {
	Name              string `json:"name"`
	Partitions        int    `json:"partitions"`
	ReplicationFactor int    `json:"replication_factor"`
	Messages          int64  `json:"messages"`
	// Configs are the topic's retention and size settings and every
	// setting overridden on the topic, by name.
	Configs          map[string]string  `json:"configs"`
	PartitionDetails []partitionSummary `json:"partition_details"`
}

// partitionSummary is one partition of a topicSummary.
type partitionSummary struct {
	Partition   int   `json:"partition"`
	Leader      int   `json:"leader"`
	Replicas    []int `json:"replicas"`
	ISR         []int `json:"isr"`
	StartOffset int64 `json:"start_offset"`
	EndOffset   int64 `json:"end_offset"`
	Messages    int64 `json:"messages"`
}

// topicsDescribeHelp documents the output of the topics commands.
const topicsDescribeHelp = `
Text output is one block per topic: a summary line, its settings, and a table
of partitions (leader, replicas, in-sync replicas, first retained offset, end
offset: the offset the next record gets, and retained records).

--output json prints an array of
  {"name", "partitions": count, "replication_factor", "messages": retained records,
   "configs": {name: value},   retention and size settings, and every setting
                               overridden on the topic
   "partition_details": [{"partition", "leader", "replicas": [broker], "isr": [broker],
                          "start_offset", "end_offset", "messages"}]}
A leader of -1 means the partition has none.`

func newTopicsCreateCmd(g *globals) *cobra.Command {
	var partitions, replication int
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create the jobs, dead-letter, delay and events topics if they do not exist, and wait until they are usable",
		Long: `Create the jobs (--topic), dead-letter (--dlq-topic), delay
(<--retry-topic-prefix>.<tier> for each of --retry-tiers) and events
(--events-topic) topics if they do not exist,
wait until they are usable, and describe them.
` + topicsDescribeHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if partitions < 1 {
				return usagef("--partitions %d: must be at least 1", partitions)
			}
			if replication == 0 || replication < -1 {
				return usagef("--replication-factor %d: want -1 (broker default) or a positive count", replication)
			}
			tiers, err := retry.ParseTiers(g.retryTiers)
			if err != nil {
				return usagef("--retry-tiers %q: %w", g.retryTiers, err)
			}
			specs := topic.Defaults(g.topic, g.dlqTopic, partitions)
			specs = append(specs, retry.TopicSpecs(g.retryPrefix, tiers, partitions)...)
			specs = append(specs, topic.EventsSpec(g.eventsTopic))
			for i := range specs {
				specs[i].ReplicationFactor = replication
			}
			if err := topic.Ensure(cmd.Context(), g.kafka, specs...); err != nil {
				return err
			}
			names := []string{g.topic, g.dlqTopic}
			names = append(names, tiers.Topics(g.retryPrefix)...)
			return describe(cmd, g, append(names, g.eventsTopic)...)
		},
	}
	cmd.Flags().IntVar(&partitions, "partitions", topic.DefaultJobsPartitions, "partitions of the jobs and delay topics")
	cmd.Flags().IntVar(&replication, "replication-factor", topic.DefaultReplicationFactor, "replicas per partition (-1: broker default)")
	return cmd
}

func newTopicsDescribeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "describe [topic...]",
		Short: "Show partitions, replication, settings and offsets of topics (default: the jobs and dead-letter topics)",
		Long: `Show the named topics (default: --topic and --dlq-topic): partitions, replication,
retention and other settings, and each partition's leader, replicas and offsets.
` + topicsDescribeHelp,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{g.topic, g.dlqTopic}
			}
			return describe(cmd, g, args...)
		},
	}
}

func describe(cmd *cobra.Command, g *globals, names ...string) error {
	ctx := cmd.Context()
	infos, err := topic.Describe(ctx, g.kafka, names...)
	if err != nil {
		return err
	}
	configs, err := topicConfigs(ctx, g.kafka, names)
	if err != nil {
		return err
	}
	summaries := make([]topicSummary, len(infos))
	for i, info := range infos {
		summaries[i] = newTopicSummary(info, configs[info.Name])
	}
	return printReport(g, summaries, func() error {
		for i, s := range summaries {
			if i > 0 {
				fmt.Fprintln(g.stdout)
			}
			if err := writeTopic(g, s); err != nil {
				return err
			}
		}
		return nil
	})
}

func newTopicSummary(info topic.TopicInfo, configs map[string]string) topicSummary {
	s := topicSummary{Name: info.Name, Partitions: len(info.Partitions), Messages: info.Messages(),
		Configs: configs, PartitionDetails: []partitionSummary{}}
	if s.Configs == nil {
		s.Configs = map[string]string{}
	}
	for _, p := range info.Partitions {
		s.ReplicationFactor = max(s.ReplicationFactor, len(p.Replicas))
		s.PartitionDetails = append(s.PartitionDetails, partitionSummary{
			Partition: p.ID, Leader: p.Leader, Replicas: nonNil(p.Replicas), ISR: nonNil(p.ISR),
			StartOffset: p.StartOffset, EndOffset: p.EndOffset, Messages: p.EndOffset - p.StartOffset,
		})
	}
	return s
}

// writeTopic writes the text form of one topic.
func writeTopic(g *globals, s topicSummary) error {
	fmt.Fprintf(g.stdout, "%s: %d %s, replication factor %d, %d %s\n", s.Name, s.Partitions,
		plural(s.Partitions, "partition", "partitions"), s.ReplicationFactor, s.Messages, plural(int(s.Messages), "message", "messages"))
	if len(s.Configs) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(s.Configs)) {
			kv = append(kv, k+"="+describeConfigValue(k, s.Configs[k]))
		}
		fmt.Fprintf(g.stdout, "  %s\n", strings.Join(kv, " "))
	}
	rows := make([][]string, len(s.PartitionDetails))
	for i, p := range s.PartitionDetails {
		rows[i] = []string{strconv.Itoa(p.Partition), strconv.Itoa(p.Leader), joinInts(p.Replicas), joinInts(p.ISR),
			strconv.FormatInt(p.StartOffset, 10), strconv.FormatInt(p.EndOffset, 10), strconv.FormatInt(p.Messages, 10)}
	}
	return writeTable(g.stdout, []string{"PARTITION", "LEADER", "REPLICAS", "ISR", "START", "END", "MESSAGES"}, rows)
}

// describeConfigValue adds a readable duration to millisecond settings
// ("604800000 (7d0h)").
func describeConfigValue(name, value string) string {
	if !strings.HasSuffix(name, ".ms") {
		return value
	}
	ms, err := strconv.ParseInt(value, 10, 64)
	if err != nil || ms <= 0 {
		return value
	}
	return fmt.Sprintf("%s(%s)", value, formatAge(time.Duration(ms)*time.Millisecond))
}

// shownConfigs are the topic settings describe always shows; others only
// when overridden on the topic.
var shownConfigs = []string{"cleanup.policy", "retention.ms", "retention.bytes", "max.message.bytes", "min.insync.replicas"}

// topicConfigs returns the shown settings of each topic of names.
func topicConfigs(ctx context.Context, k *kafkaclient.Cluster, names []string) (map[string]map[string]string, error) {
	client, closeConn := k.Client("", 10*time.Second)
	defer closeConn()
	req := &kafka.DescribeConfigsRequest{}
	for _, n := range names {
		req.Resources = append(req.Resources, kafka.DescribeConfigRequestResource{ResourceType: kafka.ResourceTypeTopic, ResourceName: n})
	}
	res, err := client.DescribeConfigs(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("describe settings of topics %v: %w", names, err)
	}
	out := make(map[string]map[string]string, len(names))
	for _, r := range res.Resources {
		if r.Error != nil {
			return nil, fmt.Errorf("describe settings of topic %s: %w", r.ResourceName, r.Error)
		}
		m := map[string]string{}
		for _, e := range r.ConfigEntries {
			if e.IsSensitive {
				continue
			}
			if slices.Contains(shownConfigs, e.ConfigName) || e.ConfigSource == configSourceTopic {
				m[e.ConfigName] = e.ConfigValue
			}
		}
		out[r.ResourceName] = m
	}
	return out, nil
}

// configSourceTopic is the DescribeConfigs source of a setting overridden on
// the topic itself (DYNAMIC_TOPIC_CONFIG).
const configSourceTopic = 1

func joinInts(ns []int) string {
	if len(ns) == 0 {
		return "-"
	}
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// nonNil makes an empty list encode as [] rather than null.
func nonNil(ns []int) []int {
	if ns == nil {
		return []int{}
	}
	return ns
}
