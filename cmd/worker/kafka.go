package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/job"
)

// workerTopics are the topics the worker reads and writes.
type workerTopics struct {
	jobs, dlq string
	retries   []string
}

// checkKafka waits until the cluster answers, then reads the
// max.message.bytes of every topic the worker uses and checks that what it
// copies fits where it copies it: any record the jobs topic takes must fit
// the dead-letter topic as a dead letter, and any job the worker accepts
// must fit a delay topic as a retry copy and the jobs topic again when the
// scheduler re-injects it. A topic too small would stop a partition at the
// first large record, so the worker refuses to start and names the topic.
// Refused credentials and untrusted certificates end the wait at once.
func checkKafka(ctx context.Context, cluster *kafkaclient.Cluster, topics workerTopics, limits job.Limits, logger *slog.Logger) (map[string]int, error) {
	err := cluster.AwaitLogged(ctx, logger)
	if err != nil {
		return nil, err
	}
	all := append([]string{topics.jobs, topics.dlq}, topics.retries...)
	got, err := cluster.MaxMessageBytes(ctx, all...)
	if err != nil {
		return nil, fmt.Errorf("kafka topics (create them with postctl topics create): %w", err)
	}
	if err := kafkaclient.CheckCopyFits(got, topics.jobs, topics.dlq); err != nil {
		return nil, fmt.Errorf("setting POSTLINE_DLQ_TOPIC: %w", err)
	}
	accepted := map[string]int{"accepted jobs": limits.WithDefaults().MaxMessageBytes}
	for _, t := range append([]string{topics.jobs}, topics.retries...) {
		accepted[t] = got[t]
	}
	for _, t := range append(topics.retries, topics.jobs) {
		if err := kafkaclient.CheckCopyFits(accepted, "accepted jobs", t); err != nil {
			return nil, fmt.Errorf("setting POSTLINE_MAX_MESSAGE_BYTES: jobs of up to %d bytes are accepted, but a retry copy of one would not fit: %w",
				limits.WithDefaults().MaxMessageBytes, err)
		}
	}
	logger.Info("kafka topics checked", "max_message_bytes", got)
	return got, nil
}
