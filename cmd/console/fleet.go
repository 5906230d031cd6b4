package main

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/fleet"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/retry"
)

// staleIntervals is how many relay state publications a worker misses
// before the relays page shows it stale (fleet.DefaultStaleAfter is three
// of the default 2s).
const staleIntervals = 3

// queueNames are the topics and groups the queues page reads, from the
// settings the workers and the retry scheduler share; an error names the
// setting.
func queueNames(s settings) (fleet.QueueNames, error) {
	for name, v := range map[string]string{"POSTLINE_JOBS_TOPIC": s.JobsTopic, "POSTLINE_CONSUMER_GROUP": s.ConsumerGroup,
		"POSTLINE_RETRY_TOPIC_PREFIX": s.RetryPrefix, "POSTLINE_SCHEDULER_GROUP": s.SchedulerGroup} {
		if strings.TrimSpace(v) == "" {
			return fleet.QueueNames{}, fmt.Errorf("setting %s: empty", name)
		}
	}
	tiers, err := retry.ParseTiers(s.RetryTiers)
	if err != nil {
		return fleet.QueueNames{}, fmt.Errorf("setting POSTLINE_RETRY_TIERS: %w", err)
	}
	return fleet.QueueNames{JobsTopic: s.JobsTopic, WorkerGroup: s.ConsumerGroup, RetryTiers: tiers, RetryPrefix: s.RetryPrefix,
		SchedulerGroup: s.SchedulerGroup}, nil
}

// checkFleetSettings refuses settings the queues and relays pages cannot
// read with, at start.
func checkFleetSettings(s settings) error {
	if s.RelayStateInterval <= 0 {
		return fmt.Errorf("setting POSTLINE_RELAY_STATE_INTERVAL: %s must be positive", s.RelayStateInterval)
	}
	_, err := queueNames(s)
	return err
}

// newFleetReader is the read layer of the queues and relays pages, as
// postctl lag, relays and dlq stats read: the groups' lag and the
// dead-letter topic in Kafka, the relays in PostgreSQL.
func newFleetReader(s settings, cluster *kafkaclient.Cluster, pool *pgxpool.Pool) (*fleet.Reader, error) {
	names, err := queueNames(s)
	if err != nil {
		return nil, err
	}
	r, err := fleet.New(fleet.Config{Kafka: cluster, Queues: names, DeadLetterTopic: s.DLQTopic, Database: pool,
		StaleAfter: staleIntervals * s.RelayStateInterval})
	if err != nil {
		return nil, fmt.Errorf("settings of the queues and relays pages: %w", err)
	}
	return r, nil
}
