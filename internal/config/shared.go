package config

import "time"

// Logging is the log setting every service shares; embed it, last, in a
// service's settings struct.
type Logging struct {
	LogLevel string `env:"POSTLINE_LOG_LEVEL" default:"info" usage:"debug, info, warn or error"`
}

// ConsumerGroup are the consumer-group membership settings every service
// that reads Kafka in a group shares; embed it in that service's settings
// struct. The group's name is each service's own setting.
type ConsumerGroup struct {
	SessionTimeout    time.Duration `env:"POSTLINE_SESSION_TIMEOUT" default:"10s" usage:"consumer-group session timeout: how long a dead replica keeps its partitions"`
	HeartbeatInterval time.Duration `env:"POSTLINE_HEARTBEAT_INTERVAL" default:"1s" usage:"consumer-group heartbeat interval"`
}
