// Command redrive is the guarded re-drive's benchmark: that a re-drive
// holds its rate bound, and that running it again sends nothing, against
// the real Kafka and PostgreSQL of the local stack.
//
// It creates a run's own topics (jobs, dead letters, events) and schema,
// writes -n jobs (10,000 by default) as a worker that failed them would
// leave them: a failed row each and a dead letter each. It then re-drives
// them all with package redrive at -rate (500 a second by default), as
// postctl dlq redrive --yes does: a dry run that counts them, then the run.
// The run should take -n / -rate, within -tolerance (10 %); the first tenth
// of a second's worth goes at once (the limiter's burst), so it takes a
// little less. Finally it re-drives again, which must re-drive nothing.
//
// The report gives the dry run's time, the run's time against the expected
// one, and the second run's count; it PASSes when the run is within the
// tolerance, every job was published with one redriven event, and the
// second run re-drove 0. The topics and schema are removed at the end
// (-keep leaves them).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/bench/internal/benchcli"
	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/bench/internal/benchjobs"
	"github.com/postline/postline/bench/internal/benchkafka"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/eventstream"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/redrive"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/topic"
)

type options struct {
	n         int
	rate      float64
	tolerance float64
	keep      bool
}

func main() { benchcli.Main("redrive", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("redrive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	stack := benchenv.AddStackFlags(fs, "PostgreSQL to seed (a schema of its own is created)")
	fs.IntVar(&o.n, "n", 10_000, "dead letters to re-drive, each with a failed row")
	fs.Float64Var(&o.rate, "rate", 500, "re-drives a second")
	fs.Float64Var(&o.tolerance, "tolerance", 0.10, "accepted deviation of the run's time from n/rate, as a fraction")
	fs.BoolVar(&o.keep, "keep", false, "leave the topics and the schema")
	if err := benchcli.ParseFlags(fs, args); err != nil {
		return err
	}
	if o.n < 1 || o.tolerance <= 0 {
		return errors.New("-n and -tolerance must be positive")
	}
	if err := (redrive.Options{Rate: o.rate}).Validate(func(f string) string { return "-" + f }); err != nil {
		return err
	}

	f, err := benchenv.NewFixture(ctx, benchenv.FixtureOptions{Name: "redrive", Brokers: stack.Brokers(), DatabaseURL: stack.DatabaseURL(),
		Partitions: 4, Keep: o.keep, Events: true, Log: stderr})
	if err != nil {
		return err
	}
	defer f.Close()
	cluster := benchkafka.Cluster(stack.Brokers()...)
	if err := topic.Ensure(ctx, cluster, topic.EventsSpec(f.EventsTopic)); err != nil {
		return err
	}
	if err := schema.Migrate(ctx, f.Pool); err != nil {
		return err
	}
	store, err := idempotency.New(idempotency.Config{Owner: "bench-redrive"}, f.Pool, nil, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "redrive: topics %s.*; seeding %d dead letters with failed rows\n", f.Prefix, o.n)
	start := time.Now()
	if err := seed(ctx, cluster, store, f.DLQTopic, o.n); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	fmt.Fprintf(stderr, "redrive: seeded in %v\n", time.Since(start).Round(time.Millisecond))

	r, closeAll, err := newRedriver(cluster, store, f)
	if err != nil {
		return err
	}
	defer closeAll()
	var res result
	res.n, res.rate = o.n, o.rate
	start = time.Now()
	plan, err := r.Plan(ctx, redrive.Filter{})
	if err != nil {
		return fmt.Errorf("dry run: %w", err)
	}
	res.planTime, res.planned = time.Since(start), plan.Redriven
	fmt.Fprintf(stderr, "redrive: dry run: %d of %d would be re-driven (%v); re-driving at %g a second\n",
		plan.Redriven, plan.Matched, res.planTime.Round(time.Millisecond), o.rate)
	opts := redrive.Options{Rate: o.rate, Note: "bench", Actor: "bench-redrive"}
	start = time.Now()
	first, err := r.Run(ctx, redrive.Filter{}, opts)
	res.runTime, res.first = time.Since(start), first
	if err != nil {
		return fmt.Errorf("re-drive: %w", err)
	}
	fmt.Fprintf(stderr, "redrive: re-drove %d in %v\n", first.Redriven, res.runTime.Round(time.Millisecond))
	start = time.Now()
	res.second, err = r.Run(ctx, redrive.Filter{}, opts)
	res.secondTime = time.Since(start)
	if err != nil {
		return fmt.Errorf("second re-drive: %w", err)
	}
	if res.published, err = records(ctx, cluster, f.JobsTopic); err != nil {
		return err
	}
	if res.events, err = records(ctx, cluster, f.EventsTopic); err != nil {
		return err
	}
	return report(stdout, o, res)
}

// seed writes n failed rows, in batches as a worker records fates, and
// their dead letters.
func seed(ctx context.Context, cluster *kafkaclient.Cluster, store *idempotency.Store, dlq string, n int) error {
	w, err := deadletter.New(deadletter.Config{Kafka: cluster, Topic: dlq}, prometheus.NewRegistry())
	if err != nil {
		return err
	}
	defer w.Close()
	jobs := benchjobs.Plain(n, benchjobs.Body(512, "re-driven bench mail. "))
	const batch = 500
	prefix := benchenv.RandomHex(4)
	for from := 0; from < n; from += batch {
		chunk := jobs[from:min(from+batch, n)]
		reqs := make([]idempotency.ClaimRequest, len(chunk))
		letters := make([]deadletter.Letter, len(chunk))
		for i := range chunk {
			j := &chunk[i]
			j.MessageID = fmt.Sprintf("redrive-%d.%s@bench.postline.test", from+i, prefix)
			reqs[i] = idempotency.ClaimRequest{MessageID: j.MessageID, PayloadHash: j.Hash(), Attempt: 1}
			value, err := json.Marshal(j)
			if err != nil {
				return err
			}
			letters[i] = deadletter.Letter{Key: []byte(j.MessageID), Value: value, Topic: "mail.jobs", Offset: int64(from + i),
				Reason: "smtp_permanent", Class: "permanent", Error: "550 5.7.1 relay misconfigured", Attempt: 1}
		}
		claims, err := store.Claim(ctx, reqs)
		if err != nil {
			return err
		}
		fates := make([]idempotency.Fate, len(claims))
		for i, c := range claims {
			if c.Result != idempotency.Claimed {
				return fmt.Errorf("claim %s: %s", chunk[i].MessageID, c.Result)
			}
			fates[i] = idempotency.Fate{MessageID: chunk[i].MessageID, Version: c.Version, Status: idempotency.StatusFailed,
				Attempt: 1, ErrorClass: "permanent", Error: "550 5.7.1 relay misconfigured"}
		}
		if _, err := store.Record(ctx, fates); err != nil {
			return err
		}
		if err := w.Publish(ctx, letters...); err != nil {
			return err
		}
	}
	return nil
}

// newRedriver wires a Redriver as postctl dlq redrive does.
func newRedriver(cluster *kafkaclient.Cluster, store *idempotency.Store, f *benchenv.Fixture) (*redrive.Redriver, func(), error) {
	lists, err := suppression.New(suppression.Config{}, f.Pool, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	pub, err := cluster.TopicWriter(kafkaclient.WriterConfig{Topic: f.JobsTopic, Name: "publisher", Limits: map[string]int{f.JobsTopic: topic.MaxMessageBytes}})
	if err != nil {
		return nil, nil, err
	}
	events, err := eventstream.New(eventstream.Config{Kafka: cluster, Topic: f.EventsTopic}, nil)
	if err != nil {
		pub.Close()
		return nil, nil, err
	}
	r, err := redrive.New(redrive.Config{Source: redrive.TopicSource{Kafka: cluster, Topic: f.DLQTopic},
		Store: store, Lists: lists, Publisher: pub, Events: events})
	closeAll := func() { events.Close(); pub.Close() }
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return r, closeAll, nil
}

// records counts the records of name, from its partitions' offsets.
func records(ctx context.Context, cluster *kafkaclient.Cluster, name string) (int64, error) {
	infos, err := topic.Describe(ctx, cluster, name)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, p := range infos[0].Partitions {
		n += p.EndOffset - p.StartOffset
	}
	return n, nil
}
