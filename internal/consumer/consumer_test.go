package consumer

import (
	"context"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
)

func TestConfigWithDefaults(t *testing.T) {
	got := Config{Kafka: testenv.KafkaCluster("b:9092"), Topic: "t", GroupID: "g", MaxWait: time.Second}.WithDefaults()
	want := Config{
		Kafka: testenv.KafkaCluster("b:9092"), Topic: "t", GroupID: "g",
		SessionTimeout: 10 * time.Second, HeartbeatInterval: time.Second, RebalanceTimeout: 15 * time.Second,
		CommitInterval: 500 * time.Millisecond, DrainTimeout: 10 * time.Second,
		MaxInFlightPerPartition: 2000, MinBytes: 1, MaxBytes: 8 << 20,
		MaxWait: time.Second, StartOffset: kafka.FirstOffset,
	}
	if got.Topic != want.Topic || got.SessionTimeout != want.SessionTimeout ||
		got.HeartbeatInterval != want.HeartbeatInterval || got.RebalanceTimeout != want.RebalanceTimeout ||
		got.CommitInterval != want.CommitInterval || got.DrainTimeout != want.DrainTimeout ||
		got.MaxInFlightPerPartition != want.MaxInFlightPerPartition || got.MinBytes != want.MinBytes ||
		got.MaxBytes != want.MaxBytes || got.MaxWait != want.MaxWait || got.StartOffset != want.StartOffset {
		t.Fatalf("WithDefaults:\n got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if lo := (Config{StartOffset: kafka.LastOffset}).WithDefaults().StartOffset; lo != kafka.LastOffset {
		t.Fatalf("WithDefaults replaced StartOffset LastOffset with %d", lo)
	}
}

func TestConfigValidate(t *testing.T) {
	valid := Config{Kafka: testenv.KafkaCluster("127.0.0.1:9092"), Topic: "mail.jobs", GroupID: "worker"}.WithDefaults()
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // substring of the error; "" = valid
	}{
		{"valid", func(*Config) {}, ""},
		{"no cluster", func(c *Config) { c.Kafka = nil }, "Kafka = nil: required"},
		{"no topic", func(c *Config) { c.Topic = "" }, `Topic = ""`},
		{"no group", func(c *Config) { c.GroupID = "" }, `GroupID = ""`},
		{"negative session timeout", func(c *Config) { c.SessionTimeout = -time.Second }, "SessionTimeout = -1s"},
		{"zero commit interval", func(c *Config) { c.CommitInterval = 0 }, "CommitInterval = 0s"},
		{"heartbeat not below session", func(c *Config) { c.HeartbeatInterval = 10 * time.Second }, "HeartbeatInterval = 10s: must be less than SessionTimeout (10s)"},
		{"drain not below rebalance", func(c *Config) { c.DrainTimeout = 20 * time.Second }, "DrainTimeout = 20s: must be less than RebalanceTimeout (15s)"},
		{"zero in-flight", func(c *Config) { c.MaxInFlightPerPartition = 0 }, "MaxInFlightPerPartition = 0"},
		{"zero min bytes", func(c *Config) { c.MinBytes = 0 }, "MinBytes = 0"},
		{"max below min", func(c *Config) { c.MinBytes = 10; c.MaxBytes = 5 }, "MaxBytes = 5: must be at least MinBytes (10)"},
		{"bad start offset", func(c *Config) { c.StartOffset = 42 }, "StartOffset = 42"},
		{"last offset is valid", func(c *Config) { c.StartOffset = kafka.LastOffset }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.mutate(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && err == nil:
				t.Fatalf("Validate() = nil, want error containing %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("Validate() = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	if _, err := New(Config{Topic: "t", GroupID: "g"}, slog.New(slog.DiscardHandler), nil); err == nil || !strings.Contains(err.Error(), "Kafka") {
		t.Fatalf("New with no cluster: err = %v, want one naming Kafka", err)
	}
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		n    int
		want time.Duration
	}{
		{1, 500 * time.Millisecond}, {2, time.Second}, {3, 2 * time.Second}, {5, 8 * time.Second},
		{6, 10 * time.Second}, {100, 10 * time.Second},
	}
	for _, tt := range tests {
		if got := joinBackoff(tt.n); got != tt.want {
			t.Errorf("joinBackoff(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	// Give every vector a series so the linter sees it.
	m.messages.WithLabelValues("mail.jobs").Inc()
	m.committedOffset.WithLabelValues("mail.jobs", "0").Set(1)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	names := []string{
		"postline_consumer_messages_total", "postline_consumer_commits_total",
		"postline_consumer_committed_offset", "postline_consumer_in_flight",
		"postline_consumer_rebalances_total", "postline_consumer_assigned_partitions",
		"postline_consumer_paused",
	}
	if n, err := testutil.GatherAndCount(reg, names...); err != nil || n != 8 {
		t.Fatalf("GatherAndCount = %d, %v; want 8 series (commits_total has ok and error)", n, err)
	}
	if _, err := newMetrics(reg); err == nil {
		t.Fatal("registering the metrics twice on one registry succeeded, want an error")
	}
}

func TestMarkDoneIgnoresHandMadeMessages(t *testing.T) {
	c, err := New(Config{Kafka: testenv.KafkaCluster("127.0.0.1:1"), Topic: "t", GroupID: "g"}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.MarkDone(Message{Topic: "t", Partition: 0, Offset: 5}) // must not panic
	if got := testutil.ToFloat64(c.metrics.inFlight); got != 0 {
		t.Fatalf("in_flight = %v after MarkDone of a hand-made message, want 0", got)
	}
}

// fastConfig is a Config tuned for quick tests.
func fastConfig(brokers []string, topic, group string) Config {
	return Config{
		Kafka:             testenv.KafkaCluster(brokers...),
		Topic:             topic,
		GroupID:           group,
		SessionTimeout:    6 * time.Second,
		HeartbeatInterval: 500 * time.Millisecond,
		RebalanceTimeout:  10 * time.Second,
		CommitInterval:    100 * time.Millisecond,
		DrainTimeout:      2 * time.Second,
		MaxWait:           100 * time.Millisecond,
	}
}

// verifyNoLeaks checks, when the test ends (after every other cleanup), that
// no goroutine started during the test is still running.
func verifyNoLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

func TestRunConsumesAndCommitsOutOfOrder(t *testing.T) {
	verifyNoLeaks(t)
	const topic, partitions, per = "jobs", 3, 100
	brokers := testkit.FakeKafka(t, kfake.SeedTopics(int32(partitions), topic))
	produce(t, brokers, topic, partitions, per)

	r := start(t, fastConfig(brokers, topic, "g1"))
	// Hold messages and mark them done in reverse, 50 at a time.
	var held []Message
	col := collect(r.Consumer, func(m Message) {
		held = append(held, m)
		if len(held) == 50 {
			for i := len(held) - 1; i >= 0; i-- {
				r.MarkDone(held[i])
			}
			held = held[:0]
		}
	})
	testkit.Eventually(t, 20*time.Second, "all messages received", func() bool { return col.distinct() == partitions*per })
	testkit.Eventually(t, 10*time.Second, "commits to reach the end offsets", func() bool {
		return maps.Equal(committedOffsets(t, brokers, topic, "g1", partitions), endOffsets(t, brokers, topic, partitions))
	})
	if got := r.Assigned(); len(got) != partitions || !r.Joined() {
		t.Fatalf("Assigned() = %v, Joined() = %v; want all %d partitions", got, r.Joined(), partitions)
	}
	if got := testutil.ToFloat64(r.metrics.messages.WithLabelValues(topic)); got != partitions*per {
		t.Errorf("messages_total = %v, want %d", got, partitions*per)
	}
	if got := testutil.ToFloat64(r.metrics.inFlight); got != 0 {
		t.Errorf("in_flight = %v, want 0", got)
	}
	if got := testutil.ToFloat64(r.metrics.committedOffset.WithLabelValues(topic, "0")); got != per {
		t.Errorf("committed_offset{partition=0} = %v, want %d", got, per)
	}

	r.stop(t)
	col.wg.Wait()
	if r.Joined() || len(r.Assigned()) != 0 {
		t.Errorf("after Run: Joined() = %v, Assigned() = %v; want false, none", r.Joined(), r.Assigned())
	}
	end := endOffsets(t, brokers, topic, partitions)
	if got := committedOffsets(t, brokers, topic, "g1", partitions); !maps.Equal(got, end) {
		t.Fatalf("committed %v, want end offsets %v", got, end)
	}
	for v, n := range col.seen {
		if n != 1 {
			t.Errorf("message %s received %d times, want once", v, n)
		}
	}
}

func TestRunDoesNotCommitPastUnfinishedMessage(t *testing.T) {
	verifyNoLeaks(t)
	const topic, partitions, per = "jobs", 2, 40
	brokers := testkit.FakeKafka(t, kfake.SeedTopics(int32(partitions), topic))
	produce(t, brokers, topic, partitions, per)

	cfg := fastConfig(brokers, topic, "g2")
	cfg.DrainTimeout = 300 * time.Millisecond
	r := start(t, cfg)
	col := collect(r.Consumer, func(m Message) {
		if m.Partition == 0 && m.Offset == 10 {
			return // never finished
		}
		r.MarkDone(m)
	})
	testkit.Eventually(t, 20*time.Second, "all messages received", func() bool { return col.distinct() == partitions*per })
	testkit.Eventually(t, 10*time.Second, "commits to settle", func() bool {
		got := committedOffsets(t, brokers, topic, "g2", partitions)
		return got[0] == 10 && got[1] == per
	})
	if got := testutil.ToFloat64(r.metrics.inFlight); got != 1 {
		t.Errorf("in_flight = %v, want 1 (the unfinished message)", got)
	}
	r.stop(t)
	col.wg.Wait()
	if got := committedOffsets(t, brokers, topic, "g2", partitions); got[0] != 10 || got[1] != per {
		t.Fatalf("committed %v after Run, want p0=10 p1=%d", got, per)
	}
	if got := testutil.ToFloat64(r.metrics.inFlight); got != 0 {
		t.Errorf("in_flight = %v after Run, want 0 (abandoned messages leave the gauge)", got)
	}

	// A new member of the group gets offset 10 of partition 0 again.
	r2 := start(t, cfg)
	first := make(chan Message, 1)
	col2 := collect(r2.Consumer, func(m Message) {
		if m.Partition == 0 {
			select {
			case first <- m:
			default:
			}
		}
		r2.MarkDone(m)
	})
	select {
	case m := <-first:
		if m.Offset != 10 {
			t.Fatalf("redelivery of partition 0 started at offset %d, want 10", m.Offset)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("partition 0 was not redelivered within 20s")
	}
	r2.stop(t)
	col2.wg.Wait()
}

func TestRunBackPressure(t *testing.T) {
	verifyNoLeaks(t)
	const topic, per, limit = "jobs", 50, 5
	brokers := testkit.FakeKafka(t, kfake.SeedTopics(int32(1), topic))
	produce(t, brokers, topic, 1, per)

	cfg := fastConfig(brokers, topic, "g3")
	cfg.MaxInFlightPerPartition = limit
	cfg.DrainTimeout = 300 * time.Millisecond // the held messages are never finished
	r := start(t, cfg)
	var got []Message
	for len(got) < limit {
		select {
		case m := <-r.Messages():
			got = append(got, m)
		case <-time.After(20 * time.Second):
			t.Fatalf("received %d messages, want %d", len(got), limit)
		}
	}
	// Absence cannot be polled for: give the fetcher a moment to overrun.
	select {
	case m := <-r.Messages():
		t.Fatalf("received offset %d beyond the in-flight limit of %d", m.Offset, limit)
	case <-time.After(300 * time.Millisecond):
	}
	r.MarkDone(got[2]) // out of order still frees a slot
	select {
	case m := <-r.Messages():
		if m.Offset != limit {
			t.Fatalf("after one MarkDone received offset %d, want %d", m.Offset, limit)
		}
		got = append(got, m)
	case <-time.After(10 * time.Second):
		t.Fatal("no message after MarkDone freed a slot")
	}
	if v := testutil.ToFloat64(r.metrics.inFlight); v != limit {
		t.Errorf("in_flight = %v, want %d", v, limit)
	}
	// Finish the prefix 0..1 (2 is done): the commit point is 3.
	r.MarkDone(got[0])
	r.MarkDone(got[1])
	r.MarkDone(got[1]) // repeated: ignored
	testkit.Eventually(t, 10*time.Second, "commit of offset 3", func() bool {
		return committedOffsets(t, brokers, topic, "g3", 1)[0] == 3
	})
	// Stop while nobody reads Messages(): Run must still return.
	r.stop(t)
	for range r.Messages() {
	}
	if c := committedOffsets(t, brokers, topic, "g3", 1)[0]; c != 3 {
		t.Fatalf("committed %d after Run, want 3", c)
	}
}

// logRecorder is a slog.Handler that keeps the messages of records at or
// above Warn.
type logRecorder struct {
	mu    sync.Mutex
	warns []string
}

func (h *logRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.warns = append(h.warns, r.Message)
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

func (h *logRecorder) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, w := range h.warns {
		if w == msg {
			n++
		}
	}
	return n
}

func TestRunKeepsRetryingUnreachableCoordinator(t *testing.T) {
	verifyNoLeaks(t)
	rec := &logRecorder{}
	c, err := New(fastConfig([]string{closedPort(t)}, "jobs", "g4"), slog.New(rec), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	testkit.Eventually(t, 15*time.Second, "two warnings about the failed join", func() bool {
		return rec.count("join consumer group failed; trying again") >= 2
	})
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while the coordinator was unreachable; want it to keep retrying", err)
	default:
	}
	if c.Joined() {
		t.Fatal("Joined() = true without a coordinator")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v after cancel, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15s of cancel")
	}
	if _, ok := <-c.Messages(); ok {
		t.Fatal("Messages() not closed after Run returned")
	}
	if err := c.Run(context.Background()); err == nil {
		t.Fatal("second Run returned nil, want an error")
	}
}

func TestLag(t *testing.T) {
	verifyNoLeaks(t)
	const topic, partitions, per = "jobs", 2, 30
	brokers := testkit.FakeKafka(t, kfake.SeedTopics(int32(partitions), topic))
	produce(t, brokers, topic, partitions, per)
	client, closeClient := newClient(brokers)
	defer closeClient()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	lag, err := Lag(ctx, client, topic, "never-committed")
	if err != nil {
		t.Fatalf("Lag of a group that never committed: %v", err)
	}
	if lag[0] != per || lag[1] != per {
		t.Fatalf("Lag = %v, want %d per partition", lag, per)
	}

	// Commit p0 fully and p1 up to 10 through a real member.
	cfg := fastConfig(brokers, topic, "g5")
	cfg.DrainTimeout = 300 * time.Millisecond // p1 from 10 on is never finished
	r := start(t, cfg)
	col := collect(r.Consumer, func(m Message) {
		if m.Partition == 0 || m.Offset < 10 {
			r.MarkDone(m)
		}
	})
	testkit.Eventually(t, 20*time.Second, "commits p0=30 p1=10", func() bool {
		got := committedOffsets(t, brokers, topic, "g5", partitions)
		return got[0] == per && got[1] == 10
	})
	r.stop(t)
	col.wg.Wait()
	lag, err = Lag(ctx, client, topic, "g5")
	if err != nil {
		t.Fatal(err)
	}
	if lag[0] != 0 || lag[1] != per-10 {
		t.Fatalf("Lag = %v, want p0=0 p1=%d", lag, per-10)
	}
	if _, err := Lag(ctx, client, "no-such-topic", "g5"); err == nil {
		t.Fatal("Lag of a missing topic returned no error")
	}
}

// A message still in flight when its generation ends is abandoned: the
// partition is committed only up to it, it is delivered again in the next
// generation, and MarkDone of the stale copy is ignored.
func TestMarkDoneOfEndedGenerationIsIgnored(t *testing.T) {
	verifyNoLeaks(t)
	const topic, partitions, per = "jobs", 2, 20
	brokers := testkit.FakeKafka(t, kfake.SeedTopics(int32(partitions), topic))
	produce(t, brokers, topic, partitions, per)
	cfg := fastConfig(brokers, topic, "g6")
	cfg.DrainTimeout = 200 * time.Millisecond

	seen := newSeenSet()
	held := make(chan Message, 1)
	var holdOnce sync.Once
	a := start(t, cfg)
	colA := collect(a.Consumer, func(m Message) {
		seen.add(m)
		hold := false
		if m.Partition == 0 && m.Offset == 0 {
			holdOnce.Do(func() { hold = true }) // first delivery: never finished by a
		}
		if hold {
			held <- m
			return
		}
		a.MarkDone(m)
	})
	testkit.Eventually(t, 20*time.Second, "a to receive everything", func() bool { return seen.distinct() == partitions*per })
	stale := <-held

	b := start(t, cfg)
	colB := collect(b.Consumer, func(m Message) { seen.add(m); b.MarkDone(m) })
	testkit.Eventually(t, 30*time.Second, "a and b to share the partitions", func() bool {
		pa, pb := a.Assigned(), b.Assigned()
		return len(pa) == 1 && len(pb) == 1 && pa[0] != pb[0]
	})
	testkit.Eventually(t, 20*time.Second, "partition 0 offset 0 delivered again", func() bool {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		return seen.m[[2]int64{0, 0}] == 2
	})
	testkit.Eventually(t, 10*time.Second, "commits to reach the end", func() bool {
		return maps.Equal(committedOffsets(t, brokers, topic, "g6", partitions), map[int]int64{0: per, 1: per})
	})

	a.MarkDone(stale) // its generation has ended
	if got := testutil.ToFloat64(a.metrics.inFlight); got != 0 {
		t.Fatalf("a in_flight = %v after MarkDone of a stale message, want 0", got)
	}
	if got := testutil.ToFloat64(a.metrics.rebalances); got < 2 {
		t.Fatalf("a rebalances_total = %v, want at least 2", got)
	}
	a.stop(t)
	b.stop(t)
	colA.wg.Wait()
	colB.wg.Wait()
}
