package consumer

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/kafkaclient"

	"github.com/postline/postline/internal/configerr"
)

// Defaults for Config.
const (
	DefaultSessionTimeout          = 10 * time.Second
	DefaultHeartbeatInterval       = time.Second
	DefaultRebalanceTimeout        = 15 * time.Second
	DefaultCommitInterval          = 500 * time.Millisecond
	DefaultDrainTimeout            = 10 * time.Second
	DefaultMaxInFlightPerPartition = 2000
	DefaultMaxInFlightBytes        = 96 << 20
	DefaultMinBytes                = 1
	DefaultMaxBytes                = 8 << 20
	DefaultMaxWait                 = 250 * time.Millisecond
	DefaultStartOffset             = kafka.FirstOffset
)

// Config configures a Consumer.
type Config struct {
	// Kafka is the cluster to consume from; the group and every partition
	// reader connect through it. Required.
	Kafka *kafkaclient.Cluster
	// Topic is the topic to consume: shorthand for Topics with one entry.
	// Set exactly one of Topic and Topics.
	Topic string
	// Topics are the topics to consume in one group membership; offsets are
	// tracked and committed per (topic, partition). Set exactly one of Topic
	// and Topics.
	Topics []string
	// GroupID is the consumer group. Required.
	GroupID string
	// SessionTimeout is how long the coordinator waits for a heartbeat before
	// it evicts this member. Defaults to 10s.
	SessionTimeout time.Duration
	// HeartbeatInterval is how often the member heartbeats; a rebalance is
	// noticed at the next heartbeat. Defaults to 1s.
	HeartbeatInterval time.Duration
	// RebalanceTimeout is how long the coordinator waits for members to
	// rejoin during a rebalance. It must exceed DrainTimeout, or a member
	// still draining is dropped from the group and its final commit is
	// refused. Defaults to 15s.
	RebalanceTimeout time.Duration
	// CommitInterval is how often finished offsets are committed. Defaults
	// to 500ms.
	CommitInterval time.Duration
	// DrainTimeout is how long a revoked or stopping partition waits for its
	// in-flight messages to be marked done before the final commit. Defaults
	// to 10s.
	DrainTimeout time.Duration
	// MaxInFlightPerPartition caps the messages of one partition that were
	// fetched but not yet marked done; fetching pauses at the cap. Defaults
	// to 2000.
	MaxInFlightPerPartition int
	// MaxInFlightBytes caps the bytes (key, value and headers) of the
	// messages fetched and not yet marked done, across every owned
	// partition: each partition gets an equal share, and fetching pauses
	// while a partition's share is spent (one record is always allowed, so
	// a record larger than the share still moves). It is what bounds a
	// process's memory when mails are large. Defaults to 96 MiB: with the
	// decoded jobs and the messages built from them, and the readers' small
	// prefetch, a worker stays within a 512 MiB container.
	MaxInFlightBytes int64
	// MinBytes is the least data a fetch waits for. Defaults to 1.
	MinBytes int
	// MaxBytes is the most data one fetch returns. Defaults to 8 MiB.
	MaxBytes int
	// MaxWait is how long a fetch waits for MinBytes. Defaults to 250ms.
	MaxWait time.Duration
	// StartOffset is where a partition starts when the group has never
	// committed it: kafka.FirstOffset or kafka.LastOffset. Defaults to
	// kafka.FirstOffset.
	StartOffset int64
}

// topicList returns the topics to consume: Topics, or Topic alone.
func (c Config) topicList() []string {
	if len(c.Topics) > 0 {
		return c.Topics
	}
	return []string{c.Topic}
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.SessionTimeout = cmp.Or(c.SessionTimeout, DefaultSessionTimeout)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, DefaultHeartbeatInterval)
	c.RebalanceTimeout = cmp.Or(c.RebalanceTimeout, DefaultRebalanceTimeout)
	c.CommitInterval = cmp.Or(c.CommitInterval, DefaultCommitInterval)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DefaultDrainTimeout)
	c.MaxInFlightPerPartition = cmp.Or(c.MaxInFlightPerPartition, DefaultMaxInFlightPerPartition)
	c.MaxInFlightBytes = cmp.Or(c.MaxInFlightBytes, DefaultMaxInFlightBytes)
	c.MinBytes = cmp.Or(c.MinBytes, DefaultMinBytes)
	c.MaxBytes = cmp.Or(c.MaxBytes, DefaultMaxBytes)
	c.MaxWait = cmp.Or(c.MaxWait, DefaultMaxWait)
	c.StartOffset = cmp.Or(c.StartOffset, DefaultStartOffset)
	return c
}

// Validate reports every invalid field of c, each by name and value. Call it
// on c.WithDefaults(): zero durations and sizes are invalid.
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, value any, why string) {
		errs = append(errs, configerr.Errorf(field, "consumer config: %s = %v: %s", field, value, why))
	}
	if c.Kafka == nil {
		bad("Kafka", "nil", "required")
	}
	switch {
	case c.Topic == "" && len(c.Topics) == 0:
		bad("Topic", `""`, "required (or set Topics)")
	case c.Topic != "" && len(c.Topics) > 0:
		bad("Topics", c.Topics, fmt.Sprintf("set either Topic (%q) or Topics, not both", c.Topic))
	}
	seen := make(map[string]bool, len(c.Topics))
	for i, t := range c.Topics {
		switch {
		case t == "":
			bad(fmt.Sprintf("Topics[%d]", i), `""`, "must not be empty")
		case seen[t]:
			bad(fmt.Sprintf("Topics[%d]", i), fmt.Sprintf("%q", t), "duplicate topic")
		}
		seen[t] = true
	}
	if c.GroupID == "" {
		bad("GroupID", `""`, "required")
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{
		{"SessionTimeout", c.SessionTimeout},
		{"HeartbeatInterval", c.HeartbeatInterval},
		{"RebalanceTimeout", c.RebalanceTimeout},
		{"CommitInterval", c.CommitInterval},
		{"DrainTimeout", c.DrainTimeout},
		{"MaxWait", c.MaxWait},
	} {
		if d.value <= 0 {
			bad(d.name, d.value, "must be positive")
		}
	}
	if c.HeartbeatInterval > 0 && c.SessionTimeout > 0 && c.HeartbeatInterval >= c.SessionTimeout {
		bad("HeartbeatInterval", c.HeartbeatInterval, fmt.Sprintf("must be less than SessionTimeout (%v)", c.SessionTimeout))
	}
	if c.DrainTimeout > 0 && c.RebalanceTimeout > 0 && c.DrainTimeout >= c.RebalanceTimeout {
		bad("DrainTimeout", c.DrainTimeout, fmt.Sprintf("must be less than RebalanceTimeout (%v)", c.RebalanceTimeout))
	}
	if c.MaxInFlightPerPartition <= 0 {
		bad("MaxInFlightPerPartition", c.MaxInFlightPerPartition, "must be positive")
	}
	if c.MaxInFlightBytes <= 0 {
		bad("MaxInFlightBytes", c.MaxInFlightBytes, "must be positive")
	}
	if c.MinBytes <= 0 {
		bad("MinBytes", c.MinBytes, "must be positive")
	}
	if c.MaxBytes < c.MinBytes {
		bad("MaxBytes", c.MaxBytes, fmt.Sprintf("must be at least MinBytes (%d)", c.MinBytes))
	}
	if c.StartOffset != kafka.FirstOffset && c.StartOffset != kafka.LastOffset {
		bad("StartOffset", c.StartOffset, fmt.Sprintf("must be kafka.FirstOffset (%d) or kafka.LastOffset (%d)", kafka.FirstOffset, kafka.LastOffset))
	}
	return errors.Join(errs...)
}
