package consumer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/postline/postline/internal/testkit"
)

// The byte budget: a partition holds at most its share of
// MaxInFlightBytes in messages not yet done, and reads on as they are done;
// a record larger than the share still moves when nothing else is in
// flight, so no record can stop its partition.
func TestByteBudgetBoundsWhatIsInFlight(t *testing.T) {
	verifyNoLeaks(t)
	const topic = "jobs"
	brokers := testkit.FakeKafka(t, kfake.SeedTopics(int32(2), topic))
	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, RequiredAcks: kafka.RequireAll, Transport: transport,
		BatchTimeout: time.Millisecond, Balancer: &kafka.Hash{}, BatchBytes: 16 << 20}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var msgs []kafka.Message
	for i := range 20 {
		msgs = append(msgs, kafka.Message{Key: []byte("same"), Value: make([]byte, 10_000+i)})
	}
	msgs = append(msgs, kafka.Message{Key: []byte("same"), Value: make([]byte, 200_000)}) // over the share
	msgs = append(msgs, kafka.Message{Key: []byte("same"), Value: make([]byte, 10_000)})
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	cfg := fastConfig(brokers, topic, "budget")
	cfg.MaxInFlightBytes = 2 * 35_000 // two partitions: 35 KB each, three of the 10 KB records
	r := start(t, cfg)
	var (
		mu   sync.Mutex
		held []Message
		max  int64
	)
	col := collect(r.Consumer, func(m Message) {
		mu.Lock()
		defer mu.Unlock()
		held = append(held, m)
		var inFlight int64
		for _, h := range held {
			inFlight += int64(len(h.Value) + len(h.Key))
		}
		if len(held) > 1 {
			max = inFlight
		}
	})
	heldCount := func() int { mu.Lock(); defer mu.Unlock(); return len(held) }
	testkit.Eventually(t, 10*time.Second, "the share to fill", func() bool { return heldCount() == 3 })
	time.Sleep(300 * time.Millisecond) // a fetcher that ignored the budget would hand out more by now
	if n := heldCount(); n != 3 {
		t.Fatalf("%d messages in flight, want 3: the partition's 35 KB share holds three 10 KB records", n)
	}
	if got := testutil.ToFloat64(r.metrics.inFlightBytes); got <= 30_000 || got > 35_000 {
		t.Errorf("in_flight_bytes = %v, want the three records' bytes", got)
	}
	// Finish what is held, one batch at a time, until all 22 arrived.
	testkit.Eventually(t, 20*time.Second, "every record, in shares", func() bool {
		mu.Lock()
		for _, m := range held {
			r.MarkDone(m)
		}
		held = held[:0]
		mu.Unlock()
		return col.distinct() >= 21 // the two last values are both 10,000 zero bytes
	})
	mu.Lock()
	if max > cfg.MaxInFlightBytes/2 {
		t.Errorf("%d bytes were in flight at once with more than one message, over the 35 KB share", max)
	}
	if got := testutil.ToFloat64(r.metrics.budgetWaits); got == 0 {
		t.Error("budget_waits_total stayed 0: the fetcher never waited for its share")
	}
	for _, m := range held {
		r.MarkDone(m)
	}
	held = nil
	mu.Unlock()
	r.stop(t)
	col.wg.Wait()
}
