package fleet

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/relaystate"
)

// Config wires a Reader. Each view needs only its own sources: Queues needs
// Kafka and Queues, Relays needs Database, DeadLetterHistogram needs Kafka
// and DeadLetterTopic; a view whose sources are not set returns
// ErrNotConfigured.
type Config struct {
	// Kafka is the cluster Queues and DeadLetterHistogram read.
	Kafka *kafkaclient.Cluster
	// Queues names the topics and groups Queues reads.
	Queues QueueNames
	// DeadLetterTopic is the dead-letter topic DeadLetterHistogram reads
	// (mail.dlq, or mail.webhooks.dlq).
	DeadLetterTopic string
	// Database is the pool Relays reads.
	Database *pgxpool.Pool
	// StaleAfter is how long after its last publication a worker's relay
	// state counts as stale; DefaultStaleAfter when 0.
	StaleAfter time.Duration
	// Now is the clock a histogram's open end is read from; time.Now when
	// nil.
	Now func() time.Time
}

// ErrNotConfigured is returned by a view whose source the Config left nil.
var ErrNotConfigured = errors.New("fleet: this view's source is not configured")

// Reader reads the fleet views. It is safe for concurrent use: it keeps no
// state between calls.
type Reader struct {
	names       QueueNames
	staleAfter  time.Duration
	now         func() time.Time
	groups      groupSource // nil without Kafka and queue names
	relays      relaySource // nil without a database
	deadLetters deadLetterSource
}

// New returns a Reader for cfg.
func New(cfg Config) (*Reader, error) {
	if cfg.StaleAfter < 0 {
		return nil, errors.New("fleet: Config.StaleAfter must not be negative")
	}
	r := &Reader{names: cfg.Queues, staleAfter: cfg.StaleAfter, now: cfg.Now}
	if r.staleAfter == 0 {
		r.staleAfter = DefaultStaleAfter
	}
	if r.now == nil {
		r.now = time.Now
	}
	if cfg.Kafka != nil && !cfg.Queues.isZero() {
		if err := cfg.Queues.validate(); err != nil {
			return nil, err
		}
		r.groups = kafkaGroups{cluster: cfg.Kafka}
	}
	if cfg.Kafka != nil && cfg.DeadLetterTopic != "" {
		r.deadLetters = topicDeadLetters{cluster: cfg.Kafka, topic: cfg.DeadLetterTopic}
	}
	if cfg.Database != nil {
		r.relays = pgRelays{store: relaystate.New(cfg.Database), pool: cfg.Database}
	}
	return r, nil
}
