package main

import (
	"time"

	"github.com/postline/postline/internal/config"
)

// settings are the console's configuration: each field is an environment
// variable and a flag (see internal/config). Kafka is read for the events
// the console indexes, so that a mail's page shows its whole life, and for
// the dead letters it lists, re-drives and counts by reason, and for the
// consumer groups' lag the queues page shows: the groups, tiers and relay
// state interval are the worker's and the retry scheduler's settings, with
// their defaults.
type settings struct {
	config.Kafka
	EventsTopic        string        `env:"POSTLINE_EVENTS_TOPIC" default:"mail.events" usage:"topic of the events the console indexes into postline_mail_events, which mail lives read; re-drives write their redriven events there"`
	JobsTopic          string        `env:"POSTLINE_JOBS_TOPIC" default:"mail.jobs" usage:"topic re-driven dead letters are published to"`
	DLQTopic           string        `env:"POSTLINE_DLQ_TOPIC" default:"mail.dlq" usage:"dead-letter topic the console lists and re-drives"`
	ConsumerGroup      string        `env:"POSTLINE_CONSUMER_GROUP" default:"postline-worker" usage:"the workers' consumer group, whose lag on the jobs topic the queues page shows"`
	RetryPrefix        string        `env:"POSTLINE_RETRY_TOPIC_PREFIX" default:"mail.retry" usage:"the delay topics are <prefix>.<tier>, as the workers' and the retry scheduler's"`
	RetryTiers         string        `env:"POSTLINE_RETRY_TIERS" default:"5s,30s,2m,10m,1h,6h" usage:"the delay tiers, as the workers' and the retry scheduler's: the queues page shows the retries waiting in each"`
	SchedulerGroup     string        `env:"POSTLINE_SCHEDULER_GROUP" default:"postline-retry-scheduler" usage:"the retry scheduler's consumer group, whose lag on the delay topics is the retries waiting"`
	RelayStateInterval time.Duration `env:"POSTLINE_RELAY_STATE_INTERVAL" default:"2s" usage:"how often the workers publish their relay state (the workers' setting); the relays page shows a worker silent for 3 intervals as stale"`
	IndexerGroup       string        `env:"POSTLINE_CONSOLE_INDEXER_GROUP" default:"postline-mailquery" usage:"consumer group the console replicas index the events in, together"`
	EventsRetention    time.Duration `env:"POSTLINE_CONSOLE_EVENTS_RETENTION" default:"720h" usage:"how long indexed events are kept (the workers' POSTLINE_RETENTION suits); older ones are purged every hour"`

	Addr            string        `env:"POSTLINE_CONSOLE_ADDR" default:"127.0.0.1:8090" usage:"address of the console's pages and API; plain HTTP only on loopback, any other address needs the TLS certificate and key"`
	TLSCertFile     string        `env:"POSTLINE_CONSOLE_TLS_CERT_FILE" default:"" usage:"PEM certificate chain the console serves HTTPS with (with the key file)"`
	TLSKeyFile      string        `env:"POSTLINE_CONSOLE_TLS_KEY_FILE" default:"" usage:"PEM private key of the console's certificate"`
	SessionLifetime time.Duration `env:"POSTLINE_CONSOLE_SESSION_LIFETIME" default:"12h" usage:"how long a login lasts; logout, disabling the account or a new password end it sooner"`

	DatabaseURL      string `env:"POSTLINE_DATABASE_URL" default:"postgres://postline:postline@127.0.0.1:5432/postline?sslmode=disable" usage:"PostgreSQL URL of the store the workers use: the console's accounts, sessions and audit log live there too"`
	DatabaseMaxConns int    `env:"POSTLINE_DATABASE_MAX_CONNS" default:"4" usage:"maximum PostgreSQL connections"`

	HTTPAddr        string        `env:"POSTLINE_CONSOLE_HTTP_ADDR" default:":8085" usage:"address of /metrics, /healthz and /readyz"`
	ShutdownTimeout time.Duration `env:"POSTLINE_SHUTDOWN_TIMEOUT" default:"10s" usage:"how long SIGTERM waits for requests in flight"`
	config.Logging
}
