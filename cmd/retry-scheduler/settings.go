package main

import (
	"time"

	"github.com/postline/postline/internal/config"
)

// settings are the scheduler's configuration: each field is an environment
// variable and a flag (see internal/config).
type settings struct {
	config.Kafka
	JobsTopic string        `env:"POSTLINE_JOBS_TOPIC" default:"mail.jobs" usage:"topic due jobs are re-injected into"`
	DLQTopic  string        `env:"POSTLINE_DLQ_TOPIC" default:"mail.dlq" usage:"dead-letter topic, for due records too large for the jobs topic"`
	Prefix    string        `env:"POSTLINE_RETRY_TOPIC_PREFIX" default:"mail.retry" usage:"name prefix of the delay topics (<prefix>.<tier>)"`
	Tiers     string        `env:"POSTLINE_RETRY_TIERS" default:"5s,30s,2m,10m,1h,6h" usage:"delay tiers, ascending, comma-separated; one delay topic each"`
	Group     string        `env:"POSTLINE_SCHEDULER_GROUP" default:"postline-retry-scheduler" usage:"consumer group shared by all scheduler replicas"`
	MaxJitter time.Duration `env:"POSTLINE_SCHEDULER_MAX_JITTER" default:"1s" usage:"re-injections are spread over up to this much (at most a tenth of the tier) so retries do not arrive as one wave"`
	config.ConsumerGroup
	MaxInFlightBytes int64         `env:"POSTLINE_MAX_IN_FLIGHT_BYTES" default:"100663296" usage:"bytes of the records read and not yet re-injected (parked until due), across partitions (each gets an equal share); bounds memory"`
	HTTPAddr         string        `env:"POSTLINE_SCHEDULER_HTTP_ADDR" default:":8082" usage:"address of /metrics, /healthz and /readyz"`
	ShutdownTimeout  time.Duration `env:"POSTLINE_SHUTDOWN_TIMEOUT" default:"10s" usage:"how long SIGTERM waits for re-injections falling due before leaving the group; later ones stay in the delay topics"`
	config.Logging
}
