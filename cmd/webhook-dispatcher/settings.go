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
	EndpointsFile     string        `env:"POSTLINE_WEBHOOKS_FILE" default:"" usage:"endpoints file, YAML (JSON when it ends in .json): id, url, secret_env, types, tenants, timeout per endpoint; required"`
	EventsTopic       string        `env:"POSTLINE_EVENTS_TOPIC" default:"mail.events" usage:"topic of the events to send"`
	Group             string        `env:"POSTLINE_WEBHOOKS_GROUP" default:"postline-webhooks" usage:"consumer group shared by all dispatcher replicas"`
	DLQTopic          string        `env:"POSTLINE_WEBHOOKS_DLQ_TOPIC" default:"mail.webhooks.dlq" usage:"dead-letter topic of the events an endpoint gave up on (created when missing)"`
	RetryBase         time.Duration `env:"POSTLINE_WEBHOOKS_RETRY_BASE" default:"1s" usage:"wait after a failed delivery attempt; doubles per attempt, with jitter"`
	RetryMaxDelay     time.Duration `env:"POSTLINE_WEBHOOKS_RETRY_MAX_DELAY" default:"5m" usage:"longest wait between two attempts (a Retry-After included)"`
	MaxAttempts       int           `env:"POSTLINE_WEBHOOKS_MAX_ATTEMPTS" default:"8" usage:"attempts per event and endpoint before it is dead-lettered"`
	MaxAge            time.Duration `env:"POSTLINE_WEBHOOKS_MAX_AGE" default:"24h" usage:"an event is dead-lettered when its next attempt would come later than this after it was queued"`
	MaxPending        int           `env:"POSTLINE_WEBHOOKS_MAX_PENDING" default:"1000" usage:"events one endpoint may have queued or retrying; when full, consumption waits"`
	Concurrency       int           `env:"POSTLINE_WEBHOOKS_CONCURRENCY" default:"8" usage:"requests in flight per endpoint"`
	SessionTimeout    time.Duration `env:"POSTLINE_SESSION_TIMEOUT" default:"10s" usage:"consumer-group session timeout: how long a dead replica keeps its partitions"`
	HeartbeatInterval time.Duration `env:"POSTLINE_HEARTBEAT_INTERVAL" default:"1s" usage:"consumer-group heartbeat interval"`
	HTTPAddr          string        `env:"POSTLINE_WEBHOOKS_HTTP_ADDR" default:":8084" usage:"address of /metrics, /healthz and /readyz"`
	ShutdownTimeout   time.Duration `env:"POSTLINE_SHUTDOWN_TIMEOUT" default:"15s" usage:"how long SIGTERM waits for requests in flight before leaving the group; unfinished events are sent again by the next owner"`
	LogLevel          string        `env:"POSTLINE_LOG_LEVEL" default:"info" usage:"debug, info, warn or error"`
}
