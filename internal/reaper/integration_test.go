package reaper_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/reaper"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/job"
)

// fixture is a migrated schema with one row left in sending by a crashed
// owner, and a jobs topic with a publisher on it.
type fixture struct {
	store *idempotency.Store
	pub   *kafkaclient.TopicWriter
	topic string
	id    string
	hash  []byte
	seen  time.Time
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	testenv.Integration(t, "Kafka and PostgreSQL")
	_, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	crashed, err := idempotency.New(idempotency.Config{Owner: "crashed", Lease: time.Millisecond}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.New(idempotency.Config{Owner: "reaper"}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.NewTopic(t, 2)
	pub, err := testenv.Kafka().TopicWriter(kafkaclient.WriterConfig{Topic: name, Limits: map[string]int{name: topic.MaxMessageBytes}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })

	j := job.Job{Version: 1, MessageID: "stuck.1@example.com", From: "a@example.com", To: []string{"b@example.test"}, Subject: "s", Text: "t"}
	f := fixture{store: store, pub: pub, topic: name, id: j.MessageID, hash: j.Hash(),
		seen: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
	// The crashed owner failed attempt 1 and crashed during attempt 2.
	cs, err := crashed.Claim(t.Context(), []idempotency.ClaimRequest{{
		MessageID: f.id, PayloadHash: f.hash, Attempt: 1, Payload: []byte(`{"the":"value"}`), Key: []byte(f.id),
		TraceHeaders: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		FirstSeen:    f.seen,
	}})
	if err != nil || cs[0].Result != idempotency.Claimed {
		t.Fatalf("claim = %+v, %v", cs, err)
	}
	if lost, err := crashed.Record(t.Context(), []idempotency.Fate{{MessageID: f.id, Version: cs[0].Version,
		Status: idempotency.StatusRetrying, Attempt: 2}}); err != nil || len(lost) != 0 {
		t.Fatalf("record retrying = %v, %v", lost, err)
	}
	cs, err = crashed.Claim(t.Context(), []idempotency.ClaimRequest{{MessageID: f.id, PayloadHash: f.hash, Attempt: 2}})
	if err != nil || cs[0].Result != idempotency.Claimed || cs[0].Attempt != 2 {
		t.Fatalf("claim of attempt 2 = %+v, %v", cs, err)
	}
	return f
}

// readAll returns every record of name, reading each partition up to its end
// offset.
func readAll(t *testing.T, name string) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	infos, err := topic.Describe(ctx, testenv.Kafka(), name)
	if err != nil {
		t.Fatal(err)
	}
	var out []kafka.Message
	for _, p := range infos[0].Partitions {
		if p.EndOffset == p.StartOffset {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: testenv.KafkaBrokers(), Topic: name, Partition: p.ID, MaxWait: 100 * time.Millisecond})
		for range p.EndOffset - p.StartOffset {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("read %s/%d: %v", name, p.ID, err)
			}
			out = append(out, m)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// waitStuck polls until the row's expired lease is visible to Stuck.
func waitStuck(t *testing.T, s *idempotency.Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := s.Stuck(t.Context(), 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(st) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the crashed owner's row never became stuck")
		}
	}
}

func TestReaperRepublishesAndHandsBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	waitStuck(t, f.store)
	reg := prometheus.NewRegistry()
	r, err := reaper.New(reaper.Config{Grace: time.Nanosecond, JobsTopic: f.topic}, f.store, f.pub, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	n, err := r.Once(t.Context())
	if err != nil || n != 1 {
		t.Fatalf("Once() = %d, %v; want 1 handed back", n, err)
	}
	msgs := readAll(t, f.topic)
	if len(msgs) != 1 {
		t.Fatalf("topic has %d records, want 1", len(msgs))
	}
	m := msgs[0]
	first, ok := jobheader.FirstSeen(m.Headers)
	c := jobheader.Carrier(m.Headers)
	if string(m.Key) != f.id || string(m.Value) != `{"the":"value"}` || jobheader.Attempt(m.Headers) != 2 ||
		!ok || !first.Equal(f.seen) || c.Get("traceparent") == "" {
		t.Errorf("re-published record: key %q value %q headers %v", m.Key, m.Value, m.Headers)
	}
	row, err := f.store.Get(t.Context(), f.id)
	if err != nil {
		t.Fatal(err)
	}
	if row.Status != idempotency.StatusRetrying || row.Attempt != 2 || row.LeaseOwner != "" {
		t.Errorf("row after reaping = %+v, want retrying at attempt 2", row)
	}
	if got := counterValue(t, reg, "postline_reaper_republished_total"); got != 1 {
		t.Errorf("republished_total = %v, want 1", got)
	}
	// The re-published copy claims the row; nothing is stuck any more.
	cs, err := f.store.Claim(t.Context(), []idempotency.ClaimRequest{{MessageID: f.id, PayloadHash: f.hash, Attempt: jobheader.Attempt(m.Headers)}})
	if err != nil || cs[0].Result != idempotency.Claimed {
		t.Errorf("claim of the re-published copy = %+v, %v", cs, err)
	}
	if n, err := r.Once(t.Context()); n != 0 || err != nil {
		t.Errorf("second pass = %d, %v; want nothing to do", n, err)
	}
}

// barrierStore lets every reaper read the stuck rows before any of them
// publishes, so that they all race for the same row.
type barrierStore struct {
	*idempotency.Store
	wg *sync.WaitGroup
}

func (b barrierStore) Stuck(ctx context.Context, grace time.Duration, limit int) ([]idempotency.Stuck, error) {
	st, err := b.Store.Stuck(ctx, grace, limit)
	b.wg.Done()
	b.wg.Wait()
	return st, err
}

func TestConcurrentReapersHandBackOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	waitStuck(t, f.store)
	const reapers = 2
	var wg sync.WaitGroup
	wg.Add(reapers)
	handedBack := make([]int, reapers)
	g, ctx := errgroup.WithContext(t.Context())
	for i := range reapers {
		r, err := reaper.New(reaper.Config{Grace: time.Nanosecond, Batch: 10}, barrierStore{f.store, &wg}, f.pub, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		g.Go(func() (err error) {
			handedBack[i], err = r.Once(ctx)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if handedBack[0]+handedBack[1] != 1 {
		t.Errorf("reapers handed back %v, want exactly one hand-back in all", handedBack)
	}
	// Both published (the loser's copy is deduped by the claim).
	if msgs := readAll(t, f.topic); len(msgs) != reapers {
		t.Errorf("topic has %d records, want %d (one per reaper)", len(msgs), reapers)
	}
	row, err := f.store.Get(t.Context(), f.id)
	if err != nil {
		t.Fatal(err)
	}
	// Versions: inserted 1, retrying 2, re-claimed 3, handed back 4.
	if row.Status != idempotency.StatusRetrying || row.Version != 4 {
		t.Errorf("row = %+v, want retrying at version 4 (handed back once)", row)
	}
	reqs := []idempotency.ClaimRequest{{MessageID: f.id, PayloadHash: f.hash, Attempt: 2}, {MessageID: f.id, PayloadHash: f.hash, Attempt: 2}}
	cs, err := f.store.Claim(t.Context(), reqs)
	if err != nil || cs[0].Result != idempotency.Claimed || cs[1].Result != idempotency.Duplicate {
		t.Errorf("claims of the two copies = %+v, %v; want claimed then duplicate", cs, err)
	}
}

// counterValue returns the value of the unlabelled counter name in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// TestReaperRepublishesStalledReplays covers a dead-letter replay whose
// publish failed after the row was reset: the row is pending with nothing on
// its way. Past ReplayGrace the reaper publishes the stored record again at
// attempt 1 and restarts the grace, so the next pass leaves it alone; the
// copy claims the row.
func TestReaperRepublishesStalledReplays(t *testing.T) {
	t.Parallel()
	testenv.Integration(t, "Kafka and PostgreSQL")
	_, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.New(idempotency.Config{Owner: "worker"}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.NewTopic(t, 1)
	pub, err := testenv.Kafka().TopicWriter(kafkaclient.WriterConfig{Topic: name, Limits: map[string]int{name: topic.MaxMessageBytes}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })

	j := job.Job{Version: 1, MessageID: "replay.1@example.com", From: "a@example.com", To: []string{"b@example.test"}, Subject: "s", Text: "t"}
	payload := []byte(`{"replayed":"value"}`)
	if cs, err := store.Claim(t.Context(), []idempotency.ClaimRequest{{MessageID: j.MessageID, PayloadHash: j.Hash(), Attempt: 1, Payload: payload}}); err != nil || cs[0].Result != idempotency.Claimed {
		t.Fatalf("claim = %+v, %v", cs, err)
	}
	// The job died, and a replay reset its row an hour ago; its publish failed.
	if _, err := pool.Exec(t.Context(), `UPDATE postline_messages SET status = 'dead', lease_owner = NULL WHERE message_id = $1`, j.MessageID); err != nil {
		t.Fatal(err)
	}
	if reset, err := store.ResetForReplay(t.Context(), []idempotency.Reset{{MessageID: j.MessageID, PayloadHash: j.Hash(), Payload: payload}}); err != nil || len(reset) != 1 {
		t.Fatalf("reset for replay = %v, %v", reset, err)
	}
	r, err := reaper.New(reaper.Config{JobsTopic: name}, store, pub, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.Once(t.Context()); n != 0 || err != nil {
		t.Fatalf("Once within the replay grace = %d, %v; want nothing to do", n, err)
	}
	if _, err := pool.Exec(t.Context(), `UPDATE postline_messages SET replayed_at = now() - interval '1 hour' WHERE message_id = $1`, j.MessageID); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Once(t.Context()); n != 1 || err != nil {
		t.Fatalf("Once past the replay grace = %d, %v; want 1", n, err)
	}
	msgs := readAll(t, name)
	if len(msgs) != 1 || string(msgs[0].Value) != string(payload) || jobheader.Attempt(msgs[0].Headers) != 1 {
		t.Fatalf("topic holds %d records (first %+v), want the stored payload once at attempt 1", len(msgs), msgs)
	}
	if n, err := r.Once(t.Context()); n != 0 || err != nil {
		t.Errorf("the pass after re-publishing = %d, %v; want nothing to do (grace restarted)", n, err)
	}
	cs, err := store.Claim(t.Context(), []idempotency.ClaimRequest{{MessageID: j.MessageID, PayloadHash: j.Hash(), Attempt: jobheader.Attempt(msgs[0].Headers)}})
	if err != nil || cs[0].Result != idempotency.Claimed {
		t.Errorf("claim of the re-published copy = %+v, %v", cs, err)
	}
}
