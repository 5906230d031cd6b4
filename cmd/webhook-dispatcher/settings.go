package main

import (
	"time"

	"github.com/postline/postline/internal/config"
)

// settings are the dispatcher's configuration: each field is an
// environment variable and a flag (see internal/config). Endpoint secrets
// are not settings: the endpoints file names the variable of each.
type settings struct {
	config.Kafka
	EndpointsFile    string        `env:"POSTLINE_WEBHOOKS_FILE" default:"" usage:"endpoints file, YAML (JSON when it ends in .json): id, url, secret_env, types, tenants, timeout per endpoint; required"`
	EventsTopic      string        `env:"POSTLINE_EVENTS_TOPIC" default:"mail.events" usage:"topic of the events to send"`
	Group            string        `env:"POSTLINE_WEBHOOKS_GROUP" default:"postline-webhooks" usage:"prefix of the consumer groups: each endpoint reads the events topic in its own group, <prefix>.<endpoint id>, shared by all dispatcher replicas"`
	DLQTopic         string        `env:"POSTLINE_WEBHOOKS_DLQ_TOPIC" default:"mail.webhooks.dlq" usage:"dead-letter topic of the events an endpoint gave up on (created when missing)"`
	DatabaseURL      string        `env:"POSTLINE_DATABASE_URL" default:"postgres://postline:postline@127.0.0.1:5432/postline?sslmode=disable" usage:"PostgreSQL URL of the store the workers use: the endpoints' retry queues and dead letters live there"`
	DatabaseMaxConns int           `env:"POSTLINE_DATABASE_MAX_CONNS" default:"4" usage:"maximum PostgreSQL connections"`
	RetryDelays      string        `env:"POSTLINE_WEBHOOKS_RETRY_DELAYS" default:"5s,5m,30m,2h,5h,10h,10h" usage:"waits before the second, third, ... attempt of an event an endpoint did not take (the first is at once), comma-separated; the last repeats to the horizon"`
	RetryHorizon     time.Duration `env:"POSTLINE_WEBHOOKS_RETRY_HORIZON" default:"72h" usage:"an event whose attempt fails this long after its first is dead-lettered"`
	DisableAfter     time.Duration `env:"POSTLINE_WEBHOOKS_DISABLE_AFTER" default:"120h" usage:"an endpoint that failed every attempt for this long is disabled (postctl webhooks enable turns it back on)"`
	Concurrency      int           `env:"POSTLINE_WEBHOOKS_CONCURRENCY" default:"8" usage:"requests in flight per endpoint"`
	config.ConsumerGroup
	HTTPAddr        string        `env:"POSTLINE_WEBHOOKS_HTTP_ADDR" default:":8084" usage:"address of /metrics, /healthz and /readyz"`
	ShutdownTimeout time.Duration `env:"POSTLINE_SHUTDOWN_TIMEOUT" default:"15s" usage:"how long SIGTERM waits for requests in flight before leaving the group; unfinished events are sent again by the next owner"`
	config.Logging
}
