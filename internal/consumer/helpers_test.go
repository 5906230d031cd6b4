package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

// byPartition routes each message to the partition its Partition field names.
type byPartition struct{}

func (byPartition) Balance(m kafka.Message, _ ...int) int { return m.Partition }

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// newClient returns a client with its own transport; call the returned func
// when done so its connection goroutines do not outlive the test (goleak).
func newClient(brokers []string) (*kafka.Client, func()) {
	tr := &kafka.Transport{}
	return &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second, Transport: tr}, tr.CloseIdleConnections
}

// writer produces test messages to a topic, spreading them over partitions.
type writer struct {
	w  *kafka.Writer
	tr *kafka.Transport
}

func newWriter(brokers []string, topic string) *writer {
	tr := &kafka.Transport{}
	return &writer{tr: tr, w: &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Transport:    tr,
		Topic:        topic,
		Balancer:     byPartition{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond,
		BatchSize:    1000,
	}}
}

func (w *writer) close() error {
	defer w.tr.CloseIdleConnections()
	return w.w.Close()
}

// write writes perPartition messages to each of partitions partitions.
// Values are "round/p/i" so tests can tell them apart. It retries
// UnknownTopicOrPartition: right after CreateTopics the writer's metadata may
// not know the topic yet.
func (w *writer) write(ctx context.Context, partitions, perPartition, round int) error {
	msgs := make([]kafka.Message, 0, partitions*perPartition)
	for i := range perPartition {
		for p := range partitions {
			msgs = append(msgs, kafka.Message{
				Partition: p,
				Key:       fmt.Appendf(nil, "k-%d-%d-%d", round, p, i),
				Value:     fmt.Appendf(nil, "%d/%d/%d", round, p, i),
				Headers:   []kafka.Header{{Key: "seq", Value: fmt.Appendf(nil, "%d", i)}},
			})
		}
	}
	for {
		err := w.w.WriteMessages(ctx, msgs...)
		if err == nil || !errors.Is(err, kafka.UnknownTopicOrPartition) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond): // retry pacing
		}
	}
}

// produce writes perPartition messages to each of partitions partitions of
// topic.
func produce(t testing.TB, brokers []string, topic string, partitions, perPartition int) {
	t.Helper()
	w := newWriter(brokers, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := w.write(ctx, partitions, perPartition, int(time.Now().UnixNano()))
	if cerr := w.close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// committedOffsets returns the group's committed offset per partition (-1
// for none).
func committedOffsets(t testing.TB, brokers []string, topic, group string, partitions int) map[int]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := fetchCommitted(ctx, brokers, topic, group, partitions)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fetchCommitted is committedOffsets for goroutines other than the test's.
func fetchCommitted(ctx context.Context, brokers []string, topic, group string, partitions int) (map[int]int64, error) {
	ids := make([]int, partitions)
	for i := range ids {
		ids[i] = i
	}
	client, closeClient := newClient(brokers)
	defer closeClient()
	res, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{
		GroupID: group, Topics: map[string][]int{topic: ids},
	})
	if err == nil {
		err = res.Error
	}
	out := make(map[int]int64, partitions)
	if errors.Is(err, kafka.GroupIdNotFound) { // a group that never committed
		for _, p := range ids {
			out[p] = -1
		}
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("offset fetch %s/%s: %w", topic, group, err)
	}
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("offset fetch %s/%s partition %d: %w", topic, group, p.Partition, p.Error)
		}
		out[p.Partition] = p.CommittedOffset
	}
	return out, nil
}

// endOffsets returns the end offset of every partition.
func endOffsets(t testing.TB, brokers []string, topic string, partitions int) map[int]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids := make([]int, partitions)
	for i := range ids {
		ids[i] = i
	}
	client, closeClient := newClient(brokers)
	defer closeClient()
	out, err := listOffsets(ctx, client, topic, ids, kafka.LastOffsetOf)
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	return out
}

// running is a Consumer whose Run executes in the background.
type running struct {
	*Consumer
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// start creates a consumer for cfg and runs it until stop (or the test's
// end).
func start(t testing.TB, cfg Config) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := New(cfg, testLogger(t), reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Consumer: c, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels Run and waits (bounded) for it to return. Safe to call twice.
func (r *running) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run returned %v, want nil", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(45 * time.Second):
		t.Fatalf("Run did not return within 45s of cancellation")
	}
}

// collector receives a consumer's messages in the background and hands them
// to onMessage, until the Messages channel is closed.
type collector struct {
	mu   sync.Mutex
	seen map[string]int // value -> times received
	wg   sync.WaitGroup
}

func collect(c *Consumer, onMessage func(Message)) *collector {
	col := &collector{seen: make(map[string]int)}
	col.wg.Add(1)
	go func() {
		defer col.wg.Done()
		for m := range c.Messages() {
			col.mu.Lock()
			col.seen[string(m.Value)]++
			col.mu.Unlock()
			onMessage(m)
		}
	}()
	return col
}

func (col *collector) distinct() int {
	col.mu.Lock()
	defer col.mu.Unlock()
	return len(col.seen)
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
