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

// Scratch is where a run creates the topics and schemas it owns, and how
// it removes them: unless Keep, each creation adds its removal to the
// run's Cleanups, bounded by CleanupTimeout and logged to Logf when it
// fails.
type Scratch struct {
	Brokers     []string
	DatabaseURL string
	// Keep leaves what was created in place.
	Keep bool
	// CleanupTimeout bounds each removal. Defaults to 30 s.
	CleanupTimeout time.Duration
	// Logf gets the removals' failures; nil discards them.
	Logf func(format string, args ...any)
}

// EnsureTopics creates the topics of specs; at cleanup it deletes names,
// which may also name topics the run's binaries create later.
func (s Scratch) EnsureTopics(ctx context.Context, c *Cleanups, specs []topic.Spec, names []string) error {
	if err := topic.Ensure(ctx, benchkafka.Cluster(s.Brokers...), specs...); err != nil {
		return err
	}
	s.removeLater(ctx, c, "delete topics: %v", func(ctx context.Context) error {
		return topic.Delete(ctx, benchkafka.Cluster(s.Brokers...), names...)
	})
	return nil
}

// EnsureSchema creates schema in DatabaseURL, as CreateSchema does, and
// drops it at cleanup.
func (s Scratch) EnsureSchema(ctx context.Context, c *Cleanups, schema string) (string, error) {
	url, err := CreateSchema(ctx, s.DatabaseURL, schema)
	if err != nil {
		return "", err
	}
	s.removeLater(ctx, c, "%v", func(ctx context.Context) error {
		return DropSchema(ctx, s.DatabaseURL, schema)
	})
	return url, nil
}

// removeLater adds remove to c unless s.Keep. It runs with a context that
// outlives ctx's cancellation, since cleanup also follows an interrupted
// run, and its failure goes to Logf with format.
func (s Scratch) removeLater(ctx context.Context, c *Cleanups, format string, remove func(context.Context) error) {
	if s.Keep {
		return
	}
	c.Add(func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmp.Or(s.CleanupTimeout, 30*time.Second))
		defer cancel()
		if err := remove(rctx); err != nil && s.Logf != nil {
			s.Logf(format, err)
		}
	})
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
	logf := func(format string, args ...any) {
		fmt.Fprintf(logw, "bench: %s: %s\n", o.Name, fmt.Sprintf(format, args...))
	}
	scratch := Scratch{Brokers: o.Brokers, DatabaseURL: o.DatabaseURL, Keep: o.Keep, CleanupTimeout: o.CleanupTimeout, Logf: logf}
	topics := append([]string{f.JobsTopic, f.DLQTopic}, retry.DefaultTiers.Topics(f.RetryPrefix)...)
	if o.Events {
		f.EventsTopic = f.Prefix + ".events"
		topics = append(topics, f.EventsTopic)
	}
	specs := append(topic.Defaults(f.JobsTopic, f.DLQTopic, o.Partitions), retry.TopicSpecs(f.RetryPrefix, retry.DefaultTiers, 1)...)
	if err := scratch.EnsureTopics(ctx, &f.Cleanups, specs, topics); err != nil {
		return nil, err
	}
	schema := strings.ReplaceAll(fmt.Sprintf("bench_%s_%s", o.Name, id), "-", "_")
	if f.DatabaseURL, err = scratch.EnsureSchema(ctx, &f.Cleanups, schema); err != nil {
		return nil, err
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
