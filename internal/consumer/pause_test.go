package consumer

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
)

func TestConfigValidateTopics(t *testing.T) {
	base := Config{Kafka: testenv.KafkaCluster("127.0.0.1:9092"), GroupID: "g"}.WithDefaults()
	tests := []struct {
		name   string
		topic  string
		topics []string
		want   string // substring of the error; "" = valid
	}{
		{"topic", "a", nil, ""},
		{"topics", "", []string{"a", "b"}, ""},
		{"one of topics", "", []string{"a"}, ""},
		{"neither", "", nil, `Topic = ""`},
		{"both", "a", []string{"b"}, `Topics = [b]: set either Topic ("a") or Topics, not both`},
		{"empty entry", "", []string{"a", ""}, `Topics[1] = ""`},
		{"duplicate", "", []string{"a", "b", "a"}, `Topics[2] = "a": duplicate topic`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			c.Topic, c.Topics = tt.topic, tt.topics
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// One member consumes two topics: every message arrives tagged with its
// topic, partitions are tracked per (topic, partition), and both topics are
// committed to their ends.
func TestRunMultipleTopics(t *testing.T) {
	verifyNoLeaks(t)
	const partitions, per = 3, 40
	topics := []string{"retry.5s", "retry.30s"}
	brokers := testkit.FakeKafka(t, kfake.SeedTopics(int32(partitions), topics...), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	for _, topic := range topics {
		produce(t, brokers, topic, partitions, per)
	}
	cfg := fastConfig(brokers, "", "multi")
	cfg.Topics = topics
	r := start(t, cfg)
	var mu sync.Mutex
	byTopic := map[string]int{}
	col := collect(r.Consumer, func(m Message) {
		mu.Lock()
		byTopic[m.Topic]++
		mu.Unlock()
		r.MarkDone(m)
	})
	testkit.Eventually(t, 20*time.Second, "every message of both topics", func() bool { return col.distinct() == 2*partitions*per })
	want := map[string][]int{topics[0]: {0, 1, 2}, topics[1]: {0, 1, 2}}
	if got := r.AssignedTopics(); !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("AssignedTopics() = %v, want %v", got, want)
	}
	if got := r.Assigned(); !slices.Equal(got, []int{0, 1, 2, 0, 1, 2}) {
		t.Fatalf("Assigned() = %v, want [0 1 2 0 1 2] (both topics, sorted by topic)", got)
	}
	for _, topic := range topics {
		testkit.Eventually(t, 10*time.Second, "commits of "+topic+" to reach its end", func() bool {
			return maps.Equal(committedOffsets(t, brokers, topic, "multi", partitions), endOffsets(t, brokers, topic, partitions))
		})
		if got := testutil.ToFloat64(r.metrics.committedOffset.WithLabelValues(topic, "2")); got != per {
			t.Errorf("committed_offset{topic=%s,partition=2} = %v, want %d", topic, got, per)
		}
		if got := testutil.ToFloat64(r.metrics.messages.WithLabelValues(topic)); got != partitions*per {
			t.Errorf("messages_total{topic=%s} = %v, want %d", topic, got, partitions*per)
		}
	}
	r.stop(t)
	col.wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if byTopic[topics[0]] != partitions*per || byTopic[topics[1]] != partitions*per {
		t.Fatalf("messages per topic = %v, want %d each", byTopic, partitions*per)
	}
	if r.AssignedTopics() != nil {
		t.Fatalf("AssignedTopics() = %v after Run, want nil", r.AssignedTopics())
	}
}

// assertSilent fails if r hands out a message within d. Absence cannot be
// polled for, so the test waits d.
func assertSilent(t *testing.T, r *running, d time.Duration, why string) {
	t.Helper()
	select {
	case m := <-r.Messages():
		t.Fatalf("%s: received offset %d of partition %d", why, m.Offset, m.Partition)
	case <-time.After(d):
	}
}

func receiveN(t *testing.T, r *running, n int) []Message {
	t.Helper()
	var got []Message
	for len(got) < n {
		select {
		case m := <-r.Messages():
			got = append(got, m)
		case <-time.After(20 * time.Second):
			t.Fatalf("received %d messages, want %d", len(got), n)
		}
	}
	return got
}

// While paused nothing is handed out, but messages in flight can still be
// marked done and are committed, and the member stays in its generation
// for longer than the session timeout. Resume hands out the rest.
func TestPauseResume(t *testing.T) {
	verifyNoLeaks(t)
	const topic, per = "jobs", 60
	brokers := testkit.FakeKafka(t, kfake.SeedTopics(int32(1), topic), kfake.GroupMinSessionTimeout(500*time.Millisecond)) // allows a short session timeout
	produce(t, brokers, topic, 1, per)
	cfg := fastConfig(brokers, topic, "pause")
	cfg.SessionTimeout = time.Second
	cfg.HeartbeatInterval = 100 * time.Millisecond
	r := start(t, cfg)

	held := receiveN(t, r, 10)
	r.Pause()
	r.Pause() // idempotent
	if !r.Paused() || testutil.ToFloat64(r.metrics.paused) != 1 {
		t.Fatalf("Paused() = %v, paused gauge = %v after Pause; want true, 1", r.Paused(), testutil.ToFloat64(r.metrics.paused))
	}
	for _, m := range held {
		r.MarkDone(m)
	}
	testkit.Eventually(t, 10*time.Second, "the in-flight messages to be committed while paused", func() bool {
		return committedOffsets(t, brokers, topic, "pause", 1)[0] == 10
	})
	// Longer than the session timeout: heartbeats must keep the membership.
	assertSilent(t, r, 2*cfg.SessionTimeout, "while paused")
	if !r.Joined() || testutil.ToFloat64(r.metrics.rebalances) != 1 {
		t.Fatalf("after a pause longer than the session timeout: Joined() = %v, rebalances_total = %v; want true, 1",
			r.Joined(), testutil.ToFloat64(r.metrics.rebalances))
	}

	r.Resume()
	r.Resume() // idempotent
	if r.Paused() || testutil.ToFloat64(r.metrics.paused) != 0 {
		t.Fatalf("Paused() = %v, paused gauge = %v after Resume; want false, 0", r.Paused(), testutil.ToFloat64(r.metrics.paused))
	}
	rest := receiveN(t, r, per-10)
	for i, m := range rest {
		if m.Offset != int64(10+i) {
			t.Fatalf("after Resume message %d has offset %d, want %d", i, m.Offset, 10+i)
		}
		r.MarkDone(m)
	}
	testkit.Eventually(t, 10*time.Second, "commit to the end", func() bool {
		return committedOffsets(t, brokers, topic, "pause", 1)[0] == per
	})
}

// A consumer paused before Run joins and commits but hands out nothing; a
// consumer stopped while paused returns, and the message its fetcher held is
// not committed.
func TestPauseBeforeRunAndStopWhilePaused(t *testing.T) {
	verifyNoLeaks(t)
	const topic, per = "jobs", 20
	brokers := testkit.FakeKafka(t, kfake.SeedTopics(int32(2), topic))
	produce(t, brokers, topic, 2, per)
	cfg := fastConfig(brokers, topic, "paused-start")
	cfg.DrainTimeout = 300 * time.Millisecond
	r := start(t, cfg)
	r.Pause()
	testkit.Eventually(t, 20*time.Second, "the group to be joined", r.Joined)
	assertSilent(t, r, 300*time.Millisecond, "paused before Run")
	r.stop(t)
	for m := range r.Messages() {
		t.Fatalf("received offset %d after stopping a paused consumer", m.Offset)
	}
	if got := committedOffsets(t, brokers, topic, "paused-start", 2); got[0] != -1 || got[1] != -1 {
		t.Fatalf("committed %v, want nothing (nothing was handed out)", got)
	}
}

// Pause, Resume and Paused race with hand-offs without data races or
// deadlocks, and no message is lost or duplicated.
func TestPauseResumeConcurrent(t *testing.T) {
	verifyNoLeaks(t)
	const topic, partitions, per = "jobs", 4, 100
	brokers := testkit.FakeKafka(t, kfake.SeedTopics(int32(partitions), topic))
	produce(t, brokers, topic, partitions, per)
	r := start(t, fastConfig(brokers, topic, "flap"))
	col := collect(r.Consumer, func(m Message) { r.MarkDone(m) })
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				if (i+j)%2 == 0 {
					r.Pause()
				} else {
					r.Resume()
				}
				_ = r.Paused()
			}
		})
	}
	// Let the flapping overlap the consumption for a while.
	assertEventuallyProgress := func() bool { return col.distinct() >= partitions*per/4 }
	testkit.Eventually(t, 20*time.Second, "some messages while Pause and Resume flap", assertEventuallyProgress)
	close(stop)
	wg.Wait()
	r.Resume()
	testkit.Eventually(t, 20*time.Second, "all messages", func() bool { return col.distinct() == partitions*per })
	r.stop(t)
	col.wg.Wait()
	for v, n := range col.seen {
		if n != 1 {
			t.Errorf("message %s received %d times, want once", v, n)
		}
	}
}

// On the real broker: a member of one group consumes two topics, pauses for
// longer than the session timeout without losing its partitions, commits
// while paused, and finishes both topics after Resume. It takes about 8 s:
// the broker's minimum session timeout is 6 s.
func TestIntegrationMultiTopicPause(t *testing.T) {
	testenv.Integration(t, "Kafka")
	verifyNoLeaks(t)
	const partitions, per = 2, 50
	topics := []string{testenv.NewTopic(t, partitions), testenv.NewTopic(t, partitions)}
	brokers := testenv.KafkaBrokers()
	for _, topic := range topics {
		produce(t, brokers, topic, partitions, per)
	}
	cfg := integrationConfig("")
	cfg.Topic, cfg.Topics = "", topics
	r := start(t, cfg)

	held := receiveN(t, r, 20)
	r.Pause()
	for _, m := range held {
		r.MarkDone(m)
	}
	testkit.Eventually(t, 20*time.Second, "the held messages to be committed while paused", func() bool {
		n := int64(0)
		for _, topic := range topics {
			for _, off := range committedOffsets(t, brokers, topic, cfg.GroupID, partitions) {
				n += max(off, 0)
			}
		}
		return n == int64(len(held))
	})
	assertSilent(t, r, cfg.SessionTimeout+time.Second, "while paused")
	if got := testutil.ToFloat64(r.metrics.rebalances); got != 1 || !r.Joined() {
		t.Fatalf("rebalances_total = %v, Joined() = %v after the pause; want 1, true", got, r.Joined())
	}
	want := map[string][]int{topics[0]: {0, 1}, topics[1]: {0, 1}}
	if got := r.AssignedTopics(); !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("AssignedTopics() = %v, want %v", got, want)
	}

	r.Resume()
	col := collect(r.Consumer, func(m Message) { r.MarkDone(m) })
	testkit.Eventually(t, 30*time.Second, "the rest of both topics", func() bool { return col.distinct() == 2*partitions*per-len(held) })
	for _, topic := range topics {
		end := endOffsets(t, brokers, topic, partitions)
		testkit.Eventually(t, 20*time.Second, "commits of "+topic+" to reach its end", func() bool {
			return maps.Equal(committedOffsets(t, brokers, topic, cfg.GroupID, partitions), end)
		})
	}
	r.stop(t)
	col.wg.Wait()
}
