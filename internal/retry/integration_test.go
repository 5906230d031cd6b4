package retry

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"
	"go.uber.org/goleak"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/topic"
)

const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// verifyNoLeaks checks, after every other cleanup of the test, that no
// goroutine started during the test still runs.
func verifyNoLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// delayTopics creates the delay topics of tiers under a unique prefix and a
// unique jobs topic, and deletes them when the test ends.
func delayTopics(t *testing.T, tiers Tiers, partitions int) (prefix, jobs string) {
	t.Helper()
	prefix = testenv.UniqueName("retry")
	jobs = testenv.UniqueName("jobs")
	specs := append(TopicSpecs(prefix, tiers, partitions), topic.Defaults(jobs, jobs+".dlq", partitions)[0])
	for i := range specs {
		specs[i].ReplicationFactor = 1
	}
	brokers := testenv.KafkaBrokers()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := topic.Ensure(ctx, testenv.KafkaCluster(brokers...), specs...); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		names := make([]string, len(specs))
		for i, s := range specs {
			names[i] = s.Name
		}
		if err := topic.Delete(ctx, testenv.KafkaCluster(brokers...), names...); err != nil {
			t.Errorf("delete topics: %v", err)
		}
	})
	return prefix, jobs
}

// arrival is one record read from the jobs topic, with when it was read.
type arrival struct {
	msg consumer.Message
	at  time.Time
}

// arrivals reads a topic in the background and keeps what arrives.
type arrivals struct {
	mu    sync.Mutex
	byKey map[string][]arrival
	total int
}

func (a *arrivals) distinct() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byKey)
}

func (a *arrivals) snapshot() map[string][]arrival {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string][]arrival, len(a.byKey))
	for k, v := range a.byKey {
		out[k] = slices.Clone(v)
	}
	return out
}

// readTopic consumes name from the start with a fresh group until the test
// ends.
func readTopic(t *testing.T, name string) *arrivals {
	t.Helper()
	c, err := consumer.New(consumer.Config{
		Kafka: testenv.Kafka(), Topic: name, GroupID: testenv.UniqueName("reader"),
		SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond, DrainTimeout: time.Second,
		MaxWait: 50 * time.Millisecond,
	}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &arrivals{byKey: make(map[string][]arrival)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for m := range c.Messages() {
			now := time.Now()
			a.mu.Lock()
			a.byKey[string(m.Key)] = append(a.byKey[string(m.Key)], arrival{msg: m, at: now})
			a.total++
			a.mu.Unlock()
			c.MarkDone(m)
		}
	})
	wg.Go(func() { _ = c.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return a
}

// runScheduler runs s until the returned stop is called (or the test
// ends).
func runScheduler(t *testing.T, s *Scheduler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Scheduler.Run = %v, want nil", err)
				}
			case <-time.After(45 * time.Second):
				t.Errorf("Scheduler.Run did not return within 45s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func testCopy(i, attempt int, notBefore time.Time, tier time.Duration) Copy {
	return Copy{
		Key:       fmt.Appendf(nil, "msg-%d@retry.test", i),
		Value:     fmt.Appendf(nil, `{"n":%d}`, i),
		Headers:   []kafka.Header{{Key: "traceparent", Value: []byte(traceparent)}, {Key: "x-custom", Value: []byte{0, 1, 2}}},
		Attempt:   attempt,
		NotBefore: notBefore,
		FirstSeen: notBefore.Add(-time.Minute).Truncate(time.Second),
		LastClass: "transient",
		Tier:      tier,
	}
}

// quantile estimates the q-quantile of a histogram the way PromQL's
// histogram_quantile does (linear within a bucket).
func quantile(q float64, h *dto.Histogram) float64 {
	n := float64(h.GetSampleCount())
	if n == 0 {
		return math.NaN()
	}
	rank := q * n
	prevBound, prevCount := 0.0, 0.0
	for _, b := range h.GetBucket() {
		c := float64(b.GetCumulativeCount())
		if c >= rank {
			return prevBound + (b.GetUpperBound()-prevBound)*(rank-prevCount)/max(c-prevCount, 1)
		}
		prevBound, prevCount = b.GetUpperBound(), c
	}
	return prevBound
}

func latenessHistogram(t *testing.T, reg *prometheus.Registry, tier string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "postline_scheduler_lateness_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == tier {
				return m.GetHistogram()
			}
		}
	}
	t.Fatalf("no lateness histogram for tier %s", tier)
	return nil
}

// Copies written with the Writer come back on the jobs topic no earlier
// than their not-before time, with key, value and headers intact, and the
// lateness histogram records each.
func TestIntegrationWriterAndScheduler(t *testing.T) {
	testenv.Integration(t, "Kafka")
	verifyNoLeaks(t)
	tiers := Tiers{2 * time.Second, 5 * time.Second}
	prefix, jobs := delayTopics(t, tiers, 2)
	brokers := testenv.KafkaBrokers()
	got := readTopic(t, jobs)

	reg := prometheus.NewRegistry()
	s, err := NewScheduler(SchedulerConfig{
		RejectFunc: rejectUnexpected(t),
		Kafka:      testenv.KafkaCluster(brokers...), Prefix: prefix, Tiers: tiers, JobsTopic: jobs, GroupID: testenv.UniqueName("sched"),
		SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond, DrainTimeout: time.Second,
	}, testLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	stop := runScheduler(t, s)
	testkit.Eventually(t, 30*time.Second, "the scheduler to be ready", s.Ready)

	w, err := NewWriter(WriterConfig{Kafka: testenv.KafkaCluster(brokers...), Prefix: prefix, Tiers: tiers}, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// In the 5s tier, copies due in the past, now, in 1s and in 3s; in the 2s
	// tier, 100 copies due over 1s to 2s from now, whose lateness is the
	// scheduler's own (the others are late by construction).
	now := time.Now()
	offsets := []time.Duration{-time.Second, 0, time.Second, 3 * time.Second}
	var copies []Copy
	for i, d := range offsets {
		for j := range 10 {
			copies = append(copies, testCopy(i*10+j, 2+i, now.Add(d), 5*time.Second))
		}
	}
	for i := range 100 {
		copies = append(copies, testCopy(100+i, 2, now.Add(time.Second+time.Duration(i)*10*time.Millisecond), 2*time.Second))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Publish(ctx, copies...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	testkit.Eventually(t, 30*time.Second, "every copy on the jobs topic", func() bool { return got.distinct() == len(copies) })

	arrived := got.snapshot()
	for _, c := range copies {
		as := arrived[string(c.Key)]
		if len(as) != 1 {
			t.Errorf("%s arrived %d times, want once", c.Key, len(as))
			continue
		}
		a := as[0]
		if a.at.Before(c.NotBefore) {
			t.Errorf("%s arrived %v before its not-before", c.Key, c.NotBefore.Sub(a.at))
		}
		if string(a.msg.Value) != string(c.Value) {
			t.Errorf("%s value %q, want %q", c.Key, a.msg.Value, c.Value)
		}
		want := copyHeaders(c)
		if !slices.EqualFunc(a.msg.Headers, want, func(x, y kafka.Header) bool { return x.Key == y.Key && string(x.Value) == string(y.Value) }) {
			t.Errorf("%s headers %v, want %v", c.Key, a.msg.Headers, want)
		}
		if p := (*jobheader.Carrier)(&a.msg.Headers).Get("traceparent"); p != traceparent {
			t.Errorf("%s traceparent %q, want %q", c.Key, p, traceparent)
		}
	}
	if got := testutilCount(t, reg, "postline_retry_records_total"); got != float64(len(copies)) {
		t.Errorf("retry records_total = %v, want %d", got, len(copies))
	}
	testkit.Eventually(t, 10*time.Second, "reinjected_total to count every copy", func() bool {
		return testutilCount(t, reg, "postline_scheduler_reinjected_total") == float64(len(copies))
	})
	stop()
	for _, tier := range []string{"2s", "5s"} {
		h := latenessHistogram(t, reg, tier)
		t.Logf("lateness tier %s: %d observations, mean %.1f ms, p99 %.1f ms", tier, h.GetSampleCount(),
			1000*h.GetSampleSum()/float64(max(h.GetSampleCount(), 1)), 1000*quantile(0.99, h))
	}
	if n := latenessHistogram(t, reg, "2s").GetSampleCount() + latenessHistogram(t, reg, "5s").GetSampleCount(); n != uint64(len(copies)) {
		t.Errorf("lateness observations = %d, want %d", n, len(copies))
	}
}

// testutilCount sums every series of a counter.
func testutilCount(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// A scheduler stopped abruptly (no drain) in the middle of a run loses
// nothing: a new member of the group re-injects the rest, and any copy
// re-injected twice is an exact duplicate (same key, value and attempt).
func TestIntegrationSchedulerAbruptStopLosesNothing(t *testing.T) {
	testenv.Integration(t, "Kafka")
	verifyNoLeaks(t)
	const records = 300
	tiers := Tiers{time.Second, 3 * time.Second}
	prefix, jobs := delayTopics(t, tiers, 4)
	brokers := testenv.KafkaBrokers()
	got := readTopic(t, jobs)

	w, err := NewWriter(WriterConfig{Kafka: testenv.KafkaCluster(brokers...), Prefix: prefix, Tiers: tiers}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	now := time.Now()
	copies := make([]Copy, records)
	for i := range copies {
		d := time.Duration(i) * 3 * time.Second / records // due over 3s
		copies[i] = testCopy(i, 3, now.Add(d), tiers.Pick(d))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Publish(ctx, copies...); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	cfg := SchedulerConfig{
		RejectFunc: rejectUnexpected(t),
		Kafka:      testenv.KafkaCluster(brokers...), Prefix: prefix, Tiers: tiers, JobsTopic: jobs, GroupID: testenv.UniqueName("sched"),
		SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond,
		DrainTimeout: time.Millisecond, // no drain: parked and in-flight records are abandoned
	}
	a, err := NewScheduler(cfg, testLogger(t).With("member", "a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	stopA := runScheduler(t, a)
	testkit.Eventually(t, 30*time.Second, "a third of the copies", func() bool { return got.distinct() >= records/3 })
	stopA()
	before := got.distinct()
	if before == records {
		t.Fatalf("every copy arrived before the stop; the test proves nothing")
	}

	b, err := NewScheduler(cfg, testLogger(t).With("member", "b"), nil)
	if err != nil {
		t.Fatal(err)
	}
	runScheduler(t, b)
	testkit.Eventually(t, 60*time.Second, "every copy after the restart", func() bool { return got.distinct() == records })

	dups := 0
	for key, as := range got.snapshot() {
		for _, a := range as[1:] {
			dups++
			if string(a.msg.Value) != string(as[0].msg.Value) || jobheader.Attempt(a.msg.Headers) != jobheader.Attempt(as[0].msg.Headers) {
				t.Errorf("%s: duplicate differs from the first copy", key)
			}
		}
	}
	t.Logf("%d of %d copies arrived before the abrupt stop; %d duplicates after the restart (exact copies, deduped by the worker's claim)",
		before, records, dups)
}
