package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

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
	Name       string `json:"name"`
	Partitions int    `json:"partitions"`
	Messages   int64  `json:"messages"`
}

func newTopicsCreateCmd(g *globals) *cobra.Command {
	var partitions, replication int
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create the jobs, dead-letter and delay topics if they do not exist, and wait until they are usable",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if partitions < 1 {
				return fmt.Errorf("--partitions %d: must be at least 1", partitions)
			}
			if replication == 0 || replication < -1 {
				return fmt.Errorf("--replication-factor %d: want -1 (broker default) or a positive count", replication)
			}
			tiers, err := retry.ParseTiers(g.retryTiers)
			if err != nil {
				return fmt.Errorf("--retry-tiers %q: %w", g.retryTiers, err)
			}
			specs := topic.Defaults(g.topic, g.dlqTopic, partitions)
			specs = append(specs, retry.TopicSpecs(g.retryPrefix, tiers, partitions)...)
			for i := range specs {
				specs[i].ReplicationFactor = replication
			}
			if err := topic.Ensure(cmd.Context(), g.brokerList(), specs...); err != nil {
				return err
			}
			names := []string{g.topic, g.dlqTopic}
			return describe(cmd, g, append(names, tiers.Topics(g.retryPrefix)...)...)
		},
	}
	cmd.Flags().IntVar(&partitions, "partitions", topic.DefaultJobsPartitions, "partitions of the jobs and delay topics")
	cmd.Flags().IntVar(&replication, "replication-factor", topic.DefaultReplicationFactor, "replicas per partition (-1: broker default)")
	return cmd
}

func newTopicsDescribeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "describe [topic...]",
		Short: "Show partitions and retained messages of topics (default: the jobs and dead-letter topics)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{g.topic, g.dlqTopic}
			}
			return describe(cmd, g, args...)
		},
	}
}

func describe(cmd *cobra.Command, g *globals, names ...string) error {
	infos, err := topic.Describe(cmd.Context(), g.brokerList(), names...)
	if err != nil {
		return err
	}
	summaries := make([]topicSummary, len(infos))
	lines := make([]string, len(infos))
	for i, info := range infos {
		summaries[i] = topicSummary{Name: info.Name, Partitions: len(info.Partitions), Messages: info.Messages()}
		lines[i] = fmt.Sprintf("%s: %d partitions, %d messages", info.Name, len(info.Partitions), info.Messages())
	}
	return g.print(summaries, strings.Join(lines, "\n"))
}
