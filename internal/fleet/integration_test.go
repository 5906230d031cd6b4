package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/fleet"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/relaystate"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/topic"
)

// byPartition routes each record to the partition its Partition field
// names.
type byPartition struct{}

func (byPartition) Balance(m kafka.Message, _ ...int) int { return m.Partition }

// produce writes msgs to topic, each to its own Partition.
func produce(t *testing.T, name string, msgs ...kafka.Message) {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(testenv.KafkaBrokers()...), Transport: tr, Topic: name, Balancer: byPartition{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := w.WriteMessages(ctx, msgs...)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("produce to %s: %v", name, err)
	}
}

// records is n records for partition p.
func records(p, n int) []kafka.Message {
	out := make([]kafka.Message, n)
	for i := range out {
		out[i] = kafka.Message{Partition: p, Key: fmt.Appendf(nil, "k-%d-%d", p, i), Value: []byte("{}")}
	}
	return out
}

// commit commits offsets (partition: next offset to read) of topic for
// group as a consumer outside any generation would: the group has no
// member.
func commit(t *testing.T, group, name string, offsets map[int]int64) {
	t.Helper()
	client, closeConn := testenv.Kafka().Client("test", 10*time.Second)
	defer closeConn()
	var commits []kafka.OffsetCommit
	for p, o := range offsets {
		commits = append(commits, kafka.OffsetCommit{Partition: p, Offset: o})
	}
	res, err := client.OffsetCommit(t.Context(), &kafka.OffsetCommitRequest{GroupID: group, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{name: commits}})
	if err != nil {
		t.Fatalf("commit %s for %s: %v", name, group, err)
	}
	for _, ps := range res.Topics {
		for _, p := range ps {
			if p.Error != nil {
				t.Fatalf("commit %s/%d for %s: %v", name, p.Partition, group, p.Error)
			}
		}
	}
}

// partitionLags is a topic's lag by partition.
func partitionLags(tl fleet.TopicLag) map[int]int64 {
	out := map[int]int64{}
	for _, p := range tl.Partitions {
		out[p.Partition] = p.Lag
	}
	return out
}

// TestQueuesKafka produces to a jobs topic and two delay topics, commits
// part of them for the workers' and the scheduler's groups, and reads the
// lag per partition, the totals and the retries waiting per tier; then a
// member joins the workers' group and owns the partitions.
func TestQueuesKafka(t *testing.T) {
	testenv.Integration(t, "Kafka")
	jobs := testenv.NewTopic(t, 2)
	prefix := testenv.UniqueName("fleet_retry")
	tiers := retry.Tiers{5 * time.Second, time.Minute}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if err := topic.Ensure(ctx, testenv.Kafka(), retry.TopicSpecs(prefix, tiers, 2)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := topic.Delete(ctx, testenv.Kafka(), tiers.Topics(prefix)...); err != nil {
			t.Error(err)
		}
	})
	workers, scheduler := testenv.UniqueName("fleet_workers"), testenv.UniqueName("fleet_sched")
	t5s, t1m := retry.TopicName(prefix, 5*time.Second), retry.TopicName(prefix, time.Minute)

	// Jobs: 5 on partition 0, of which the workers committed 2; 3 on
	// partition 1, never committed. 5s tier: 2 and 1, the scheduler past
	// the first 2. 1m tier: 4 on partition 1, none committed.
	produce(t, jobs, append(records(0, 5), records(1, 3)...)...)
	produce(t, t5s, append(records(0, 2), records(1, 1)...)...)
	produce(t, t1m, records(1, 4)...)
	commit(t, workers, jobs, map[int]int64{0: 2})
	commit(t, scheduler, t5s, map[int]int64{0: 2})

	r, err := fleet.New(fleet.Config{Kafka: testenv.Kafka(), Queues: fleet.QueueNames{JobsTopic: jobs, WorkerGroup: workers,
		RetryTiers: tiers, RetryPrefix: prefix, SchedulerGroup: scheduler}})
	if err != nil {
		t.Fatal(err)
	}
	q, err := r.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := q.Workers
	if w.Group != workers || w.Total != 6 || len(w.Topics) != 1 || w.Topics[0].Topic != jobs || w.Topics[0].Total != 6 ||
		fmt.Sprint(partitionLags(w.Topics[0])) != "map[0:3 1:3]" || len(w.Members) != 0 || w.Topics[0].Partitions[0].Member != "" {
		t.Errorf("workers %+v; want lag 3 and 3 on %s, no members", w, jobs)
	}
	s := q.Scheduler
	if s == nil || s.Group != scheduler || s.Total != 5 || len(s.Topics) != 2 ||
		s.Topics[0].Topic != t5s || fmt.Sprint(partitionLags(s.Topics[0])) != "map[0:0 1:1]" ||
		s.Topics[1].Topic != t1m || fmt.Sprint(partitionLags(s.Topics[1])) != "map[0:0 1:4]" {
		t.Errorf("scheduler %+v; want 0+1 on %s, 0+4 on %s", s, t5s, t1m)
	}
	if fmt.Sprint(q.Tiers) != fmt.Sprint([]fleet.TierWaiting{
		{Tier: 5 * time.Second, Name: "5s", Topic: t5s, Waiting: 1}, {Tier: time.Minute, Name: "1m", Topic: t1m, Waiting: 4}}) {
		t.Errorf("tiers %+v; want 5s waiting 1, 1m waiting 4", q.Tiers)
	}

	// A member that joins and reads nothing commits nothing: the lag stays,
	// and each partition names it.
	member := kafka.NewReader(kafka.ReaderConfig{Brokers: testenv.KafkaBrokers(), GroupID: workers, Topic: jobs,
		HeartbeatInterval: 500 * time.Millisecond, MaxWait: 100 * time.Millisecond})
	t.Cleanup(func() { _ = member.Close() })
	testkit.Eventually(t, 60*time.Second, "a member holding both partitions", func(ctx context.Context) (bool, string) {
		q, err = r.Queues(ctx)
		if err != nil {
			return false, err.Error()
		}
		w := q.Workers
		return w.State == "Stable" && len(w.Members) == 1 && len(w.Members[0].Assigned[jobs]) == 2, fmt.Sprintf("%+v", w)
	})
	m := q.Workers.Members[0]
	for _, p := range q.Workers.Topics[0].Partitions {
		if p.Member != m.ClientID+"@"+strings.TrimPrefix(m.ClientHost, "/") || p.Lag != 3 {
			t.Errorf("partition %+v, want lag 3 held by %s@%s", p, m.ClientID, m.ClientHost)
		}
	}

	// A tier whose topic does not exist is the scheduler's error.
	r, err = fleet.New(fleet.Config{Kafka: testenv.Kafka(), Queues: fleet.QueueNames{JobsTopic: jobs, WorkerGroup: workers,
		RetryTiers: retry.Tiers{5 * time.Second, 2 * time.Hour}, RetryPrefix: prefix, SchedulerGroup: scheduler}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Queues(ctx)
	var ge *fleet.GroupLagError
	if !errors.As(err, &ge) || !ge.Scheduler || ge.Group != scheduler {
		t.Errorf("a missing delay topic: %v, want the scheduler group's *GroupLagError", err)
	}
}

// TestDeadLetterHistogramKafka writes dead letters with known reasons and
// dead-letter times over two partitions and counts them by hour.
func TestDeadLetterHistogramKafka(t *testing.T) {
	testenv.Integration(t, "Kafka")
	dlq := testenv.NewTopic(t, 2)
	t0 := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	dead := func(p int, offset time.Duration, reason string) kafka.Message {
		when := t0.Add(offset)
		return kafka.Message{Partition: p, Key: []byte("m-" + when.Format(time.RFC3339Nano)), Value: []byte("not a job"),
			Headers: []kafka.Header{
				{Key: jobheader.KeyDLQReason, Value: []byte(reason)},
				{Key: jobheader.KeyDLQClass, Value: []byte("permanent")},
				{Key: jobheader.KeyDLQTime, Value: []byte(jobheader.FormatTime(when))},
			}}
	}
	produce(t, dlq,
		dead(0, -time.Minute, "smtp_permanent"), // before the window
		dead(0, 10*time.Minute, "smtp_permanent"),
		dead(1, 20*time.Minute, "smtp_permanent"),
		dead(1, 59*time.Minute, "max_attempts"),
		dead(0, 70*time.Minute, "max_attempts"),
		dead(1, 150*time.Minute, "smtp_permanent"),
		dead(0, 179*time.Minute, "render_failed"),
		dead(1, 180*time.Minute, "render_failed"), // at the window's end
	)

	r, err := fleet.New(fleet.Config{Kafka: testenv.Kafka(), DeadLetterTopic: dlq})
	if err != nil {
		t.Fatal(err)
	}
	h, err := r.DeadLetterHistogram(t.Context(), fleet.HistogramQuery{Since: t0, Until: t0.Add(3 * time.Hour), Bucket: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if h.Total != 6 || fmt.Sprint(h.Reasons) != "[{smtp_permanent 3} {max_attempts 2} {render_failed 1}]" || len(h.Buckets) != 3 {
		t.Fatalf("histogram %+v; want 6 in 3 buckets: smtp_permanent 3, max_attempts 2, render_failed 1", h)
	}
	want := []string{"map[max_attempts:1 smtp_permanent:2]", "map[max_attempts:1]", "map[render_failed:1 smtp_permanent:1]"}
	for i, b := range h.Buckets {
		if !b.Start.Equal(t0.Add(time.Duration(i)*time.Hour)) || fmt.Sprint(b.ByReason) != want[i] {
			t.Errorf("bucket %d from %v: %v, want from %v: %s", i, b.Start, b.ByReason, t0.Add(time.Duration(i)*time.Hour), want[i])
		}
	}

	// A window after every record was written skips them by the broker's
	// time index, and counts none.
	h, err = r.DeadLetterHistogram(t.Context(), fleet.HistogramQuery{Since: time.Now().Add(time.Hour), Until: time.Now().Add(2 * time.Hour), Bucket: time.Hour})
	if err != nil || h.Total != 0 {
		t.Errorf("a later window: %+v, %v; want none", h, err)
	}
}

// TestRelaysPostgres publishes three workers' relay states (one stale)
// into a migrated schema with two breakers, and reads the relays.
func TestRelaysPostgres(t *testing.T) {
	_, pool := testenv.NewSchema(t)
	ctx := t.Context()
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	store := relaystate.New(pool)
	now := time.Now()
	inf := math.Inf(1)
	publish := func(worker string, at time.Time, states ...relaystate.Snapshot) {
		t.Helper()
		if err := store.Publish(ctx, worker, at, states); err != nil {
			t.Fatal(err)
		}
	}
	publish("worker-a", now, relaystate.Snapshot{Relay: "mx-main", Priority: 1, Limit: 5, InFlight: 2, Rate: 30, FleetShare: inf},
		relaystate.Snapshot{Relay: "mx-spare", Priority: 2, Limit: 16, Rate: inf, FleetShare: inf})
	publish("worker-b", now, relaystate.Snapshot{Relay: "mx-main", Priority: 1, Limit: 7, Rate: 20.5, FleetShare: inf})
	publish("worker-gone", now.Add(-time.Minute), relaystate.Snapshot{Relay: "mx-main", Priority: 1, Limit: 1, Rate: 900, FleetShare: inf})
	if _, err := pool.Exec(ctx, `INSERT INTO postline_circuits (provider, state, failures, cooldown, opened_at, open_until, last_class)
		VALUES ('mx-main', 'closed', 1, '30s', NULL, NULL, 'timeout'),
		       ('mx-spare', 'open', 5, '30s', now() - interval '3 seconds', now() + interval '27 seconds', 'connection_refused')`); err != nil {
		t.Fatal(err)
	}

	r, err := fleet.New(fleet.Config{Database: pool})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.Relays(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Relays) != 2 || rep.Relays[0].Name != "mx-main" || rep.Relays[1].Name != "mx-spare" {
		t.Fatalf("relays %+v; want mx-main, then mx-spare", rep.Relays)
	}
	main, spare := rep.Relays[0], rep.Relays[1]
	if main.FleetRate != 50.5 || main.Live != 2 || main.Paced != 2 || len(main.Workers) != 3 {
		t.Errorf("mx-main %+v; want 50.5/s over 2 live paced workers, 3 listed", main)
	}
	stale := 0
	for _, w := range main.Workers {
		if w.Stale {
			stale++
			if w.WorkerID != "worker-gone" || w.AgeSeconds < 59 {
				t.Errorf("stale worker %+v, want worker-gone, a minute old", w)
			}
		}
	}
	if stale != 1 {
		t.Errorf("%d stale workers, want worker-gone only", stale)
	}
	if main.Breaker == nil || main.Breaker.State != "closed" || main.Breaker.Failures != 1 || main.Breaker.Since != nil {
		t.Errorf("mx-main breaker %+v, want closed, 1 fault, no since", main.Breaker)
	}
	b := spare.Breaker
	if b == nil || b.State != "open" || b.LastClass != "connection_refused" || b.Since == nil || b.OpenUntil == nil ||
		!b.Since.Before(rep.At) || !b.OpenUntil.After(rep.At) {
		t.Errorf("mx-spare breaker %+v at %v, want open since before, until after", b, rep.At)
	}
	if spare.Live != 1 || spare.Paced != 0 || spare.Workers[0].Rate != nil {
		t.Errorf("mx-spare %+v, want one live unpaced worker", spare)
	}

	// A schema never migrated: PostgreSQL's undefined table comes through.
	_, bare := testenv.NewSchema(t)
	r, err = fleet.New(fleet.Config{Database: bare})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Relays(ctx)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42P01" {
		t.Errorf("relays on an unmigrated schema: %v, want undefined_table", err)
	}
}
