package main

import (
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/console"
	"github.com/postline/postline/internal/eventstream"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/redrive"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/internal/webhook"
)

// operations are what the console's re-drive and webhook pages act
// through, as postctl dlq redrive and postctl webhooks do: the
// dead-letter topic, the rows, the suppression lists, writers of the jobs
// and events topics, and the webhook queue. The writers connect on first
// use, so the console starts while Kafka is away.
type operations struct {
	redriver      *redrive.Redriver
	webhooks      *webhook.Queue
	webhookEvents func(from time.Time) webhook.EventScanner
	close         func()
}

// newOperations wires the re-drive and the webhook queue on pool and
// cluster.
func newOperations(s settings, cluster *kafkaclient.Cluster, pool *pgxpool.Pool, lists *suppression.Store) (operations, error) {
	host, _ := os.Hostname()
	store, err := idempotency.New(idempotency.Config{Owner: fmt.Sprintf("console-%s-%d", host, os.Getpid())}, pool, nil, nil)
	if err != nil {
		return operations{}, err
	}
	jobs, err := cluster.TopicWriter(kafkaclient.WriterConfig{Topic: s.JobsTopic, Name: "redrive",
		Limits: map[string]int{s.JobsTopic: topic.MaxMessageBytes}})
	if err != nil {
		return operations{}, fmt.Errorf("setting POSTLINE_JOBS_TOPIC: %w", err)
	}
	events, err := eventstream.New(eventstream.Config{Kafka: cluster, Topic: s.EventsTopic}, nil)
	if err != nil {
		_ = jobs.Close()
		return operations{}, fmt.Errorf("setting POSTLINE_EVENTS_TOPIC: %w", err)
	}
	closeAll := func() {
		_ = events.Close()
		_ = jobs.Close()
	}
	rd, err := redrive.New(redrive.Config{Source: redrive.TopicSource{Kafka: cluster, Topic: s.DLQTopic},
		Store: store, Lists: lists, Publisher: jobs, Events: events})
	if err != nil {
		closeAll()
		return operations{}, fmt.Errorf("setting POSTLINE_DLQ_TOPIC: %w", err)
	}
	return operations{redriver: rd, webhooks: webhook.NewQueue(pool), close: closeAll,
		webhookEvents: func(from time.Time) webhook.EventScanner {
			return redrive.TopicSource{Kafka: cluster, Topic: s.EventsTopic, From: from}
		}}, nil
}

// consoleConfig is the console's handler configuration with ops.
func (o operations) consoleConfig(cfg console.Config) console.Config {
	cfg.Redrive, cfg.Webhooks, cfg.WebhookEvents = o.redriver, o.webhooks, o.webhookEvents
	return cfg
}
