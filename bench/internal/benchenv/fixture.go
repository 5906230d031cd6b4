package benchenv

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/bench/internal/benchkafka"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/topic"
)

// Cleanups are undo steps, run newest first: a pool closes before its
// schema is dropped.
type Cleanups []func()

// Add appends an undo step.
func (c *Cleanups) Add(fn func()) { *c = append(*c, fn) }

// Run runs the steps newest first and forgets them.
func (c *Cleanups) Run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
	*c = nil
}

// FixtureOptions say where a run's fixture lives and what it is called.
type FixtureOptions struct {
	// Name names the run: topics bench.<Name>.<id>.*, the consumer group
	// bench-<Name>-<id> and the schema bench_<Name>_<id>.
	Name        string
	Brokers     []string
	DatabaseURL string
	// Partitions of the jobs topic.
	Partitions int
	// Keep leaves the topics and the schema in place at Close.
	Keep bool
	// Events also names an events topic for the workers
	// (POSTLINE_EVENTS_TOPIC), deleted at Close once a worker created it.
	Events bool
	// CleanupTimeout bounds each undo step. Defaults to 30 s.
	CleanupTimeout time.Duration
	// Log gets the undo steps' failures.
	Log io.Writer
}

// Fixture is one run's own Kafka topics (jobs, dead letters, retry tiers),
// consumer group and PostgreSQL schema, and the POSTLINE_* settings that
// point a worker at them.
type Fixture struct {
	Cleanups
	// Prefix starts the names of the run's topics: bench.<name>.<id>.
	Prefix                                  string
	JobsTopic, DLQTopic, RetryPrefix, Group string
	EventsTopic                             string // set with FixtureOptions.Events
	DatabaseURL                             string // with the run's schema as search_path
	Pool                                    *pgxpool.Pool
	Env                                     []string
}

// NewFixture creates the topics and the schema of a run; Close removes
// them unless o.Keep.
func NewFixture(ctx context.Context, o FixtureOptions) (_ *Fixture, err error) {
	id := RandomHex(4)
	f := &Fixture{Prefix: fmt.Sprintf("bench.%s.%s", o.Name, id), Group: fmt.Sprintf("bench-%s-%s", o.Name, id)}
	f.JobsTopic, f.DLQTopic, f.RetryPrefix = f.Prefix+".jobs", f.Prefix+".dlq", f.Prefix+".retry"
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	logw := cmp.Or[io.Writer](o.Log, io.Discard)
	cleanupCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), cmp.Or(o.CleanupTimeout, 30*time.Second))
	}
	topics := append([]string{f.JobsTopic, f.DLQTopic}, retry.DefaultTiers.Topics(f.RetryPrefix)...)
	if o.Events {
		f.EventsTopic = f.Prefix + ".events"
		topics = append(topics, f.EventsTopic)
	}
	specs := append(topic.Defaults(f.JobsTopic, f.DLQTopic, o.Partitions), retry.TopicSpecs(f.RetryPrefix, retry.DefaultTiers, 1)...)
	if err := topic.Ensure(ctx, benchkafka.Cluster(o.Brokers...), specs...); err != nil {
		return nil, err
	}
	if !o.Keep {
		f.Add(func() {
			c, cancel := cleanupCtx()
			defer cancel()
			if err := topic.Delete(c, benchkafka.Cluster(o.Brokers...), topics...); err != nil {
				fmt.Fprintf(logw, "bench: %s: delete topics: %v\n", o.Name, err)
			}
		})
	}
	schema := strings.ReplaceAll(fmt.Sprintf("bench_%s_%s", o.Name, id), "-", "_")
	if f.DatabaseURL, err = CreateSchema(ctx, o.DatabaseURL, schema); err != nil {
		return nil, err
	}
	if !o.Keep {
		f.Add(func() {
			c, cancel := cleanupCtx()
			defer cancel()
			if err := DropSchema(c, o.DatabaseURL, schema); err != nil {
				fmt.Fprintf(logw, "bench: %s: %v\n", o.Name, err)
			}
		})
	}
	if f.Pool, err = pgxpool.New(ctx, f.DatabaseURL); err != nil {
		return nil, fmt.Errorf("postgres pool: %w", err)
	}
	f.Add(f.Pool.Close)
	f.Env = []string{
		"POSTLINE_KAFKA_BROKERS=" + strings.Join(o.Brokers, ","),
		"POSTLINE_JOBS_TOPIC=" + f.JobsTopic,
		"POSTLINE_DLQ_TOPIC=" + f.DLQTopic,
		"POSTLINE_RETRY_TOPIC_PREFIX=" + f.RetryPrefix,
		"POSTLINE_CONSUMER_GROUP=" + f.Group,
		"POSTLINE_DATABASE_URL=" + f.DatabaseURL,
	}
	if o.Events {
		f.Env = append(f.Env, "POSTLINE_EVENTS_TOPIC="+f.EventsTopic)
	}
	return f, nil
}

// Close undoes NewFixture, newest first.
func (f *Fixture) Close() { f.Run() }
