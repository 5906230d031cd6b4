package consumer

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
)

// Integration tests: a real Kafka (scripts/stack.sh up), one topic and group
// per test. Besides the behaviour they name, they prove that kafka-go's old
// group protocol versions (JoinGroup v1, SyncGroup/Heartbeat/LeaveGroup v0,
// OffsetCommit v2, OffsetFetch v1) work against the broker we run.

func integrationConfig(topic string) Config {
	cfg := fastConfig(testenv.KafkaBrokers(), topic, testenv.UniqueName("group"))
	cfg.CommitInterval = 200 * time.Millisecond
	return cfg
}

// (1) One member consumes 1,000 messages from 4 partitions and finishes them
// out of order; stopping right after the last one arrives still drains the
// in-flight batch, and the final commit reaches the end of every partition.
func TestIntegrationConsumeOutOfOrderCommitsToEnd(t *testing.T) {
	testenv.Integration(t, "Kafka")
	verifyNoLeaks(t)
	const partitions, per, batch = 4, 250, 40 // batch divides partitions*per
	topic := testenv.NewTopic(t, partitions)
	brokers := testenv.KafkaBrokers()
	produce(t, brokers, topic, partitions, per)
	cfg := integrationConfig(topic)

	r := start(t, cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	var held []Message
	col := collect(r.Consumer, func(m Message) {
		held = append(held, m)
		if len(held) == batch {
			rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
			for _, h := range held {
				r.MarkDone(h)
			}
			held = held[:0]
		}
	})
	testkit.Eventually(t, 60*time.Second, "1,000 messages", func() bool { return col.distinct() == partitions*per })
	r.stop(t)
	col.wg.Wait()

	end := endOffsets(t, brokers, topic, partitions)
	if got := committedOffsets(t, brokers, topic, cfg.GroupID, partitions); !maps.Equal(got, end) {
		t.Fatalf("committed %v, want end offsets %v", got, end)
	}
	if want := map[int]int64{0: per, 1: per, 2: per, 3: per}; !maps.Equal(end, want) {
		t.Fatalf("end offsets %v, want %v", end, want)
	}
}

// (2) A message that is never finished holds its partition's commit point,
// and the next member of the group gets it again.
func TestIntegrationUnfinishedMessageIsNotCommitted(t *testing.T) {
	testenv.Integration(t, "Kafka")
	verifyNoLeaks(t)
	const partitions, per = 4, 50
	topic := testenv.NewTopic(t, partitions)
	brokers := testenv.KafkaBrokers()
	produce(t, brokers, topic, partitions, per)
	cfg := integrationConfig(topic)
	cfg.DrainTimeout = 500 * time.Millisecond

	r := start(t, cfg)
	col := collect(r.Consumer, func(m Message) {
		if m.Partition == 0 && m.Offset == 10 {
			return
		}
		r.MarkDone(m)
	})
	testkit.Eventually(t, 60*time.Second, "all messages", func() bool { return col.distinct() == partitions*per })
	r.stop(t)
	col.wg.Wait()
	want := map[int]int64{0: 10, 1: per, 2: per, 3: per}
	if got := committedOffsets(t, brokers, topic, cfg.GroupID, partitions); !maps.Equal(got, want) {
		t.Fatalf("committed %v, want %v", got, want)
	}

	r2 := start(t, cfg)
	var mu sync.Mutex
	var p0 []int64
	col2 := collect(r2.Consumer, func(m Message) {
		if m.Partition == 0 {
			mu.Lock()
			p0 = append(p0, m.Offset)
			mu.Unlock()
		} else {
			t.Errorf("partition %d offset %d redelivered; only partition 0 from 10 was due", m.Partition, m.Offset)
		}
		r2.MarkDone(m)
	})
	testkit.Eventually(t, 30*time.Second, "partition 0 from offset 10", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(p0) == per-10
	})
	r2.stop(t)
	col2.wg.Wait()
	if p0[0] != 10 {
		t.Fatalf("redelivery started at offset %d, want 10", p0[0])
	}
	if got := committedOffsets(t, brokers, topic, cfg.GroupID, partitions); got[0] != per {
		t.Fatalf("committed %v after redelivery, want partition 0 at %d", got, per)
	}
}

// (3) Two members share 4 partitions without overlap and lose nothing; when
// one stops, the other takes over every partition and commits to the end.
func TestIntegrationTwoMembersShareThenOneTakesOver(t *testing.T) {
	testenv.Integration(t, "Kafka")
	verifyNoLeaks(t)
	const partitions, per = 4, 250 // 1,000 before the members start, 1,000 while they run
	topic := testenv.NewTopic(t, partitions)
	brokers := testenv.KafkaBrokers()
	produce(t, brokers, topic, partitions, per)
	cfg := integrationConfig(topic)

	seen := newSeenSet()
	a := start(t, cfg)
	colA := collect(a.Consumer, func(m Message) { seen.add(m); a.MarkDone(m) })
	b := start(t, cfg)
	colB := collect(b.Consumer, func(m Message) { seen.add(m); b.MarkDone(m) })

	testkit.Eventually(t, 60*time.Second, "both members to hold disjoint halves of the partitions", func() bool {
		pa, pb := a.Assigned(), b.Assigned()
		if len(pa) == 0 || len(pb) == 0 {
			return false
		}
		union := slices.Sorted(slices.Values(append(slices.Clone(pa), pb...)))
		return slices.Equal(union, []int{0, 1, 2, 3}) // 4 distinct ids: disjoint and complete
	})
	produce(t, brokers, topic, partitions, per)
	testkit.Eventually(t, 60*time.Second, "2,000 distinct messages", func() bool { return seen.distinct() == 2*partitions*per })

	a.stop(t)
	colA.wg.Wait()
	testkit.Eventually(t, 60*time.Second, "b to own every partition", func() bool {
		return slices.Equal(b.Assigned(), []int{0, 1, 2, 3})
	})
	end := endOffsets(t, brokers, topic, partitions)
	testkit.Eventually(t, 30*time.Second, "commits to reach the end offsets", func() bool {
		return maps.Equal(committedOffsets(t, brokers, topic, cfg.GroupID, partitions), end)
	})
	b.stop(t)
	colB.wg.Wait()
	if got := committedOffsets(t, brokers, topic, cfg.GroupID, partitions); !maps.Equal(got, end) {
		t.Fatalf("committed %v, want end offsets %v", got, end)
	}
	if got := seen.distinct(); got != 2*partitions*per {
		t.Fatalf("%d distinct messages seen, want %d", got, 2*partitions*per)
	}
}

// (4) Committed offsets never go backwards while members come and go,
// messages keep arriving and some are in flight at every rebalance.
func TestIntegrationCommitsNeverGoBackwardsAcrossRebalances(t *testing.T) {
	testenv.Integration(t, "Kafka")
	verifyNoLeaks(t)
	const partitions = 4
	topic := testenv.NewTopic(t, partitions)
	brokers := testenv.KafkaBrokers()
	produce(t, brokers, topic, partitions, 100)
	cfg := integrationConfig(topic)
	cfg.CommitInterval = 50 * time.Millisecond
	cfg.MaxInFlightPerPartition = 10 // with the processing delay, keeps consumption slow enough to overlap rebalances

	ctx, stopBackground := context.WithCancel(context.Background())
	var background sync.WaitGroup
	defer func() { stopBackground(); background.Wait() }()

	// Keep producing until told to stop.
	produced := make(chan struct{})
	stopProducing := make(chan struct{})
	background.Add(1)
	go func() {
		defer background.Done()
		defer close(produced)
		w := newWriter(brokers, topic)
		defer w.close()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-stopProducing:
				return
			case <-tick.C:
				if err := w.write(ctx, partitions, 5, i); err != nil && ctx.Err() == nil {
					t.Errorf("produce: %v", err)
					return
				}
			}
		}
	}()

	// Sample the committed offsets until the test is done.
	var (
		samplesMu sync.Mutex
		samples   []map[int]int64
	)
	sampled := make(chan struct{})
	stopSampling := make(chan struct{})
	background.Add(1)
	go func() {
		defer background.Done()
		defer close(sampled)
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-stopSampling:
				return
			case <-tick.C:
				got, err := fetchCommitted(ctx, brokers, topic, cfg.GroupID, partitions)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("sample committed offsets: %v", err)
					}
					return
				}
				samplesMu.Lock()
				samples = append(samples, got)
				samplesMu.Unlock()
			}
		}
	}()

	seen := newSeenSet()
	// Each member finishes messages after a short random "processing" time,
	// out of order, so some are in flight whenever a rebalance starts.
	type member struct {
		*running
		col  *collector
		work *sync.WaitGroup
	}
	join := func(seed uint64) member {
		r := start(t, cfg)
		work := &sync.WaitGroup{}
		rng := rand.New(rand.NewPCG(seed, seed))
		var rngMu sync.Mutex
		col := collect(r.Consumer, func(m Message) {
			seen.add(m)
			rngMu.Lock()
			d := time.Duration(1+rng.IntN(20)) * time.Millisecond
			rngMu.Unlock()
			work.Add(1)
			time.AfterFunc(d, func() { defer work.Done(); r.MarkDone(m) }) // simulated processing
		})
		return member{r, col, work}
	}
	leave := func(m member) {
		m.stop(t)
		m.col.wg.Wait()
		m.work.Wait()
	}
	// cover reports whether the members' assignments are non-empty, disjoint
	// and cover every partition.
	cover := func(ms ...member) func() bool {
		return func() bool {
			var all []int
			for _, m := range ms {
				a := m.Assigned()
				if len(a) == 0 {
					return false
				}
				all = append(all, a...)
			}
			slices.Sort(all)
			return slices.Equal(all, []int{0, 1, 2, 3})
		}
	}
	moreProgress := func(what string) {
		t.Helper()
		n := seen.distinct() + 200
		testkit.Eventually(t, 60*time.Second, what, func() bool { return seen.distinct() >= n })
	}

	a := join(1)
	testkit.Eventually(t, 60*time.Second, "a to own every partition", cover(a))
	moreProgress("progress with a")
	b := join(2)
	testkit.Eventually(t, 60*time.Second, "a and b to share the partitions", cover(a, b))
	moreProgress("progress with a and b")
	c := join(3)
	testkit.Eventually(t, 60*time.Second, "a, b and c to share the partitions", cover(a, b, c))
	moreProgress("progress with a, b and c")
	leave(a)
	testkit.Eventually(t, 60*time.Second, "b and c to take over from a", cover(b, c))
	moreProgress("progress with b and c")
	leave(b)
	testkit.Eventually(t, 60*time.Second, "c to take over every partition", cover(c))
	moreProgress("progress with c")

	close(stopProducing)
	<-produced
	end := endOffsets(t, brokers, topic, partitions)
	var total int64
	for _, off := range end {
		total += off
	}
	testkit.Eventually(t, 60*time.Second, "commits to reach the end", func() bool {
		return maps.Equal(committedOffsets(t, brokers, topic, cfg.GroupID, partitions), end)
	})
	leave(c)
	close(stopSampling)
	<-sampled

	if got := int64(seen.distinct()); got != total {
		t.Errorf("%d distinct messages seen, want all %d produced", got, total)
	}
	samplesMu.Lock()
	defer samplesMu.Unlock()
	if len(samples) < 10 {
		t.Fatalf("only %d samples of the committed offsets", len(samples))
	}
	last := map[int]int64{}
	for i, s := range samples {
		for p, off := range s {
			if prev, ok := last[p]; ok && off < prev {
				t.Errorf("sample %d: partition %d committed offset went back from %d to %d", i, p, prev, off)
			}
			last[p] = off
		}
	}
	if !maps.Equal(last, end) {
		t.Errorf("last sample %v, want end offsets %v", last, end)
	}
	t.Logf("%d samples of committed offsets, all non-decreasing; %d messages, %d deliveries",
		len(samples), total, seen.deliveries())
}

// seenSet records the distinct messages seen by any member.
type seenSet struct {
	mu sync.Mutex
	m  map[[2]int64]int
}

func newSeenSet() *seenSet { return &seenSet{m: make(map[[2]int64]int)} }

func (s *seenSet) add(m Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[[2]int64{int64(m.Partition), m.Offset}]++
}

func (s *seenSet) deliveries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.m {
		n += c
	}
	return n
}

func (s *seenSet) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
