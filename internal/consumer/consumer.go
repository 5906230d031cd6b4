package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postline/postline/internal/backoff"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

// Backoff after a failed attempt to join the group: it starts at
// joinBackoffMin, doubles per consecutive failure and stops at joinBackoffMax.
const (
	joinBackoffMin = 500 * time.Millisecond
	joinBackoffMax = 10 * time.Second
	// fetchBackoff is the pause after a fetch error before fetching again.
	fetchBackoff = time.Second
	// readerQueueCapacity bounds the messages a partition reader prefetches
	// ahead of the byte budget (MaxInFlightBytes): kept small, because with
	// large mails it is memory no budget sees.
	readerQueueCapacity = 8
)

// Message is one record fetched from Kafka. Pass it back to MarkDone when it
// is finished.
type Message struct {
	Topic     string
	Partition int
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []kafka.Header
	Time      time.Time

	part *partition // the generation's tracker handle; nil for hand-made messages
	size int64      // bytes charged to the partition's budget
}

// Consumer reads one or more topics as a member of a consumer group. Create
// it with New, start it with Run.
type Consumer struct {
	cfg     Config
	topics  []string
	logger  *slog.Logger
	metrics *metrics
	out     chan Message
	started atomic.Bool

	// Pause gate. gateMu serialises Pause and Resume; pauseMu guards the
	// fields below it: fetchers hold it for reading while they hand out a
	// message, so Pause returns only after every hand-off has finished.
	gateMu   sync.Mutex
	pauseMu  sync.RWMutex
	paused   bool
	pauseCh  chan struct{} // closed when a pause begins; replaced on Resume
	resumeCh chan struct{} // closed when a pause ends; replaced on Pause

	mu  sync.Mutex
	cur *generation // the generation holding partitions, nil between generations

	wg sync.WaitGroup // fetchers and committers of every generation
}

// generation is this member's view of one group generation.
type generation struct {
	gen      *kafka.Generation
	parts    []*partition // sorted by partition ID
	byID     map[topicPartition]*partition
	left     atomic.Int32  // fetchers still running
	fetched  chan struct{} // closed when every fetcher has stopped and drained
	finished chan struct{} // closed after the final commit
}

// topicPartition names a partition across topics.
type topicPartition struct {
	topic string
	id    int
}

// partition is the state of one owned partition within one generation.
type partition struct {
	topic string
	id    int
	start int64         // offset the assignment starts at (may be kafka.FirstOffset/LastOffset)
	slots chan struct{} // one token per message fetched and not done: back-pressure

	mu     sync.Mutex
	tr     *tracker
	closed bool          // generation ended: MarkDone is ignored
	idle   chan struct{} // closed when pending reaches zero, while draining

	// The partition's share of MaxInFlightBytes: bytes of the messages
	// fetched and not done, and a channel closed (and replaced) when some
	// are done while the fetcher waits for room.
	bytes, byteLimit int64
	freed            chan struct{}

	committed int64 // last committed offset, -1 for none; committer only
}

// New returns a Consumer for cfg (after cfg.WithDefaults()). Metrics register
// on reg; a nil reg leaves them unregistered.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Consumer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		return nil, errors.New("consumer: logger is nil")
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	topics := slices.Clone(cfg.topicList())
	cfg.Topics = topics
	if len(topics) == 1 {
		logger = logger.With("topic", topics[0])
	} else {
		logger = logger.With("topics", topics)
	}
	return &Consumer{
		cfg:      cfg,
		topics:   topics,
		logger:   logger.With("group", cfg.GroupID),
		metrics:  m,
		out:      make(chan Message),
		pauseCh:  make(chan struct{}),
		resumeCh: closedChan(),
	}, nil
}

func closedChan() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// Pause stops handing out messages: once it returns, Messages() delivers
// nothing until Resume. Messages already handed out stay in flight and may
// be marked done; offsets are still committed, and the group membership and
// its heartbeats stay up, so a pause does not cause a rebalance. Fetchers
// keep at most one fetched message each (plus the partition reader's
// prefetch) while paused. Pause is idempotent and safe for concurrent use,
// before or during Run.
func (c *Consumer) Pause() {
	c.gateMu.Lock()
	defer c.gateMu.Unlock()
	c.pauseMu.RLock()
	already := c.paused
	c.pauseMu.RUnlock()
	if already {
		return
	}
	// Wake fetchers blocked handing out a message first, so that taking the
	// write lock below does not wait on a reader of Messages().
	close(c.pauseCh)
	c.pauseMu.Lock()
	c.paused = true
	c.resumeCh = make(chan struct{})
	c.pauseMu.Unlock()
	c.metrics.paused.Set(1)
	c.logger.Info("consumer paused")
}

// Resume undoes Pause: fetchers hand out messages again. It is idempotent
// and safe for concurrent use.
func (c *Consumer) Resume() {
	c.gateMu.Lock()
	defer c.gateMu.Unlock()
	// Check first under the read lock: while running, fetchers hold it as
	// long as a hand-off blocks, so an idempotent Resume must not wait for
	// the write lock. While paused they hold it only briefly.
	c.pauseMu.RLock()
	running := !c.paused
	c.pauseMu.RUnlock()
	if running {
		return
	}
	c.pauseMu.Lock()
	c.paused = false
	c.pauseCh = make(chan struct{})
	close(c.resumeCh)
	c.pauseMu.Unlock()
	c.metrics.paused.Set(0)
	c.logger.Info("consumer resumed")
}

// Paused reports whether the consumer is paused.
func (c *Consumer) Paused() bool {
	c.pauseMu.RLock()
	defer c.pauseMu.RUnlock()
	return c.paused
}

// handOut sends m on Messages(), waiting while the consumer is paused. It
// returns false, without sending, when ctx ends first.
func (c *Consumer) handOut(ctx context.Context, m Message) bool {
	for {
		c.pauseMu.RLock()
		if c.paused {
			resumed := c.resumeCh
			c.pauseMu.RUnlock()
			select {
			case <-resumed:
				continue
			case <-ctx.Done():
				return false
			}
		}
		pausing := c.pauseCh
		select {
		case c.out <- m:
			c.pauseMu.RUnlock()
			return true
		case <-pausing:
			c.pauseMu.RUnlock()
		case <-ctx.Done():
			c.pauseMu.RUnlock()
			return false
		}
	}
}

// Messages returns the channel on which fetched messages arrive, in offset
// order per partition. It is closed when Run returns.
func (c *Consumer) Messages() <-chan Message {
	return c.out
}

// MarkDone records that m is finished (its outcome is durably recorded). Safe
// for concurrent use, in any order. The consumer commits offsets; callers
// never do. Messages of an ended generation, unknown messages and repeated
// calls are ignored.
func (c *Consumer) MarkDone(m Message) {
	p := m.part
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.closed || !p.tr.Done(m.Offset) {
		p.mu.Unlock()
		return
	}
	if p.idle != nil && p.tr.Pending() == 0 {
		close(p.idle)
		p.idle = nil
	}
	p.bytes -= m.size
	if p.freed != nil { // the fetcher waits for room in the share
		close(p.freed)
		p.freed = nil
	}
	p.mu.Unlock()
	c.metrics.inFlight.Dec()
	c.metrics.inFlightBytes.Sub(float64(m.size))
	select {
	case <-p.slots:
	default: // unreachable: the fetcher took a slot before registering m
	}
}

// giveBytes returns n bytes of a message that was never handed out.
func (c *Consumer) giveBytes(p *partition, n int64) {
	p.mu.Lock()
	p.bytes -= n
	p.mu.Unlock()
	c.metrics.inFlightBytes.Sub(float64(n))
}

// recordBytes is what a fetched record costs the byte budget.
func recordBytes(m kafka.Message) int64 {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// takeBytes charges n bytes to p's share of the budget, waiting while the
// share is spent; a partition with nothing in flight may always take one
// record, however large, so that no record can stop its partition. It
// reports false when ctx ended first.
func (c *Consumer) takeBytes(ctx context.Context, p *partition, n int64) bool {
	for {
		p.mu.Lock()
		if p.bytes == 0 || p.bytes+n <= p.byteLimit {
			p.bytes += n
			p.mu.Unlock()
			c.metrics.inFlightBytes.Add(float64(n))
			return true
		}
		if p.freed == nil {
			p.freed = make(chan struct{})
		}
		freed := p.freed
		p.mu.Unlock()
		c.metrics.budgetWaits.Inc()
		select {
		case <-freed:
		case <-ctx.Done():
			return false
		}
	}
}

// Run joins the group and fetches until ctx is cancelled; then stops
// fetching, waits up to DrainTimeout for in-flight messages, commits, leaves
// the group and returns nil (or the error that stopped it). Callers keep
// processing Messages() and calling MarkDone until Run returns. An
// unreachable coordinator does not stop Run: it tries again with backoff until
// ctx is cancelled. Run may be called once.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return errors.New("consumer: Run called more than once")
	}
	defer close(c.out)

	kafkaLog := c.logger.With("component", "kafka-go")
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                c.cfg.GroupID,
		Brokers:           c.cfg.Kafka.Brokers(),
		Dialer:            c.cfg.Kafka.Dialer("group"),
		Topics:            c.topics,
		HeartbeatInterval: c.cfg.HeartbeatInterval,
		SessionTimeout:    c.cfg.SessionTimeout,
		RebalanceTimeout:  c.cfg.RebalanceTimeout,
		JoinGroupBackoff:  joinBackoffMin,
		StartOffset:       c.cfg.StartOffset,
		Logger:            debugLogger(kafkaLog),
		ErrorLogger:       debugLogger(kafkaLog),
	})
	if err != nil {
		return fmt.Errorf("consumer group %s: %w", c.cfg.GroupID, err)
	}

	var last *generation
	failures := 0
	for {
		gen, err := cg.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, kafka.RebalanceInProgress) {
				// The coordinator paces the next join attempt itself.
				c.logger.Debug("consumer group rebalance in progress", "err", err)
				continue
			}
			failures++
			delay := joinBackoff(failures)
			c.logger.Warn("join consumer group failed; trying again",
				"err", err, "attempt", failures, "wait", delay)
			if backoff.Sleep(ctx, delay) != nil {
				break
			}
			continue
		}
		failures = 0
		last = c.startGeneration(ctx, gen)
	}

	// Shutdown: the live generation's fetchers saw ctx and are draining while
	// the generation (and its heartbeat) stays up. Once its final commit is
	// made, Close ends the generation and leaves the group.
	if last != nil {
		<-last.finished
	}
	if err := cg.Close(); err != nil {
		c.logger.Warn("close consumer group", "err", err)
	}
	c.wg.Wait()
	c.logger.Info("consumer stopped")
	return nil
}

// Assigned returns the partitions currently owned (sorted), for readiness and
// tests. With several topics it lists the partitions of every topic, sorted
// by topic and then partition, so a number may repeat: use AssignedTopics.
func (c *Consumer) Assigned() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return nil
	}
	ids := make([]int, 0, len(c.cur.parts))
	for _, p := range c.cur.parts {
		ids = append(ids, p.id)
	}
	return ids
}

// AssignedTopics returns the partitions currently owned per topic (each
// sorted); topics without an owned partition are absent. It returns nil
// between generations.
func (c *Consumer) AssignedTopics() map[string][]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return nil
	}
	out := make(map[string][]int)
	for _, p := range c.cur.parts {
		out[p.topic] = append(out[p.topic], p.id)
	}
	return out
}

// Joined reports whether the consumer currently holds a generation (for
// /readyz).
func (c *Consumer) Joined() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur != nil
}

// startGeneration starts the fetchers and the committer of gen and returns at
// once; they run until the generation ends.
func (c *Consumer) startGeneration(runCtx context.Context, gen *kafka.Generation) *generation {
	g := &generation{
		gen:      gen,
		byID:     make(map[topicPartition]*partition),
		fetched:  make(chan struct{}),
		finished: make(chan struct{}),
	}
	for _, topic := range c.topics {
		for _, a := range gen.Assignments[topic] {
			p := &partition{
				topic:     topic,
				id:        a.ID,
				start:     a.Offset,
				slots:     make(chan struct{}, c.cfg.MaxInFlightPerPartition),
				tr:        newTracker(),
				committed: -1,
			}
			if a.Offset >= 0 {
				p.committed = a.Offset
			}
			g.parts = append(g.parts, p)
			g.byID[topicPartition{topic, a.ID}] = p
		}
	}
	slices.SortFunc(g.parts, func(a, b *partition) int {
		return cmp.Or(strings.Compare(a.topic, b.topic), a.id-b.id)
	})
	// Each partition may hold an equal share of the byte budget, so that
	// one partition full of records parked for later (a long delay tier)
	// cannot starve the others.
	for _, p := range g.parts {
		p.byteLimit = max(c.cfg.MaxInFlightBytes/int64(len(g.parts)), 1)
	}
	g.left.Store(int32(len(g.parts)))
	if len(g.parts) == 0 {
		close(g.fetched)
	}

	c.mu.Lock()
	c.cur = g
	c.mu.Unlock()
	c.metrics.rebalances.Inc()
	c.metrics.assignedPartitions.Set(float64(len(g.parts)))
	c.logger.Info("joined consumer group generation",
		"generation", gen.ID, "member_id", gen.MemberID, "partitions", partitionList(g.parts, len(c.topics) > 1))

	c.wg.Add(1 + len(g.parts))
	gen.Start(func(genCtx context.Context) {
		defer c.wg.Done()
		c.commitLoop(runCtx, genCtx, g)
	})
	for _, p := range g.parts {
		gen.Start(func(genCtx context.Context) {
			defer c.wg.Done()
			c.fetchPartition(runCtx, genCtx, g, p)
		})
	}
	return g
}

// fetchPartition fetches p until the generation ends or runCtx is cancelled,
// then drains p, and returns only once the generation has ended: returning
// earlier would end the generation and make the group rejoin during
// shutdown.
func (c *Consumer) fetchPartition(runCtx, genCtx context.Context, g *generation, p *partition) {
	defer func() { <-genCtx.Done() }()
	log := c.logger.With("partition", p.id, "generation", g.gen.ID)
	if len(c.topics) > 1 {
		log = log.With("topic", p.topic)
	}
	if genCtx.Err() == nil && runCtx.Err() == nil {
		c.fetchLoop(runCtx, genCtx, p, log)
	}
	c.drain(p, log)
	if g.left.Add(-1) == 0 {
		close(g.fetched)
	}
}

func (c *Consumer) fetchLoop(runCtx, genCtx context.Context, p *partition, log *slog.Logger) {
	ctx, cancel := context.WithCancel(runCtx)
	defer cancel()
	stop := context.AfterFunc(genCtx, cancel)
	defer stop()

	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:         c.cfg.Kafka.Brokers(),
		Dialer:          c.cfg.Kafka.Dialer("fetch"),
		Topic:           p.topic,
		Partition:       p.id,
		MinBytes:        c.cfg.MinBytes,
		MaxBytes:        c.cfg.MaxBytes,
		MaxWait:         c.cfg.MaxWait,
		QueueCapacity:   min(readerQueueCapacity, c.cfg.MaxInFlightPerPartition),
		ReadLagInterval: -1,
		ErrorLogger:     debugLogger(log.With("component", "kafka-go")),
	})
	defer func() {
		if err := r.Close(); err != nil {
			log.Warn("close partition reader", "err", err)
		}
	}()
	if err := r.SetOffset(p.start); err != nil {
		log.Error("set partition reader offset", "offset", p.start, "err", err)
		return
	}

	for {
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		km, err := r.FetchMessage(ctx)
		if err != nil {
			<-p.slots
			if ctx.Err() != nil {
				return
			}
			log.Warn("fetch failed; trying again", "err", err, "wait", fetchBackoff)
			if backoff.Sleep(ctx, fetchBackoff) != nil {
				return
			}
			continue
		}
		size := recordBytes(km)
		if !c.takeBytes(ctx, p, size) {
			<-p.slots
			return
		}
		p.mu.Lock()
		ok := p.tr.Register(km.Offset)
		p.mu.Unlock()
		if !ok {
			c.giveBytes(p, size)
			<-p.slots
			log.Warn("fetched offset not above the previous one; skipped", "offset", km.Offset)
			continue
		}
		c.metrics.inFlight.Inc()
		m := Message{
			Topic:     km.Topic,
			Partition: km.Partition,
			Offset:    km.Offset,
			Key:       km.Key,
			Value:     km.Value,
			Headers:   km.Headers,
			Time:      km.Time,
			part:      p,
			size:      size,
		}
		if !c.handOut(ctx, m) {
			// Never handed out, so nobody will mark it done: forget it so the
			// commit point stops before it.
			p.mu.Lock()
			p.tr.Unregister(km.Offset)
			p.mu.Unlock()
			c.metrics.inFlight.Dec()
			c.giveBytes(p, size)
			<-p.slots
			return
		}
		c.metrics.messages.WithLabelValues(p.topic).Inc()
	}
}

// drain waits up to DrainTimeout for p's in-flight messages to be marked done.
func (c *Consumer) drain(p *partition, log *slog.Logger) {
	p.mu.Lock()
	if p.tr.Pending() == 0 {
		p.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	p.idle = idle
	p.mu.Unlock()

	t := time.NewTimer(c.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
		p.mu.Lock()
		n := p.tr.Pending()
		p.mu.Unlock()
		log.Warn("drain timed out; in-flight messages will be redelivered",
			"in_flight", n, "drain_timeout", c.cfg.DrainTimeout)
	}
}

// commitLoop commits g every CommitInterval while it runs and while its
// partitions drain, makes the final commit, then ends g for MarkDone.
func (c *Consumer) commitLoop(runCtx, genCtx context.Context, g *generation) {
	defer func() { <-genCtx.Done() }()
	t := time.NewTicker(c.cfg.CommitInterval)
	defer t.Stop()
	failed := false
running:
	for {
		select {
		case <-t.C:
			c.commit(g, &failed)
		case <-genCtx.Done():
			break running
		case <-runCtx.Done():
			break running
		}
	}
	for draining := true; draining; {
		select {
		case <-t.C:
			c.commit(g, &failed)
		case <-g.fetched:
			draining = false
		}
	}
	c.commit(g, &failed)
	c.endGeneration(g)
}

// commit commits, for every partition of g, the tracker's commit point when
// it is past the last committed offset. failed makes only the first failure
// of a generation a warning: after a rebalance every commit of the old
// generation fails the same way.
func (c *Consumer) commit(g *generation, failed *bool) {
	offsets := make(map[string]map[int]int64)
	for _, p := range g.parts {
		p.mu.Lock()
		off, ok := p.tr.CommitPoint()
		p.mu.Unlock()
		if ok && off > p.committed {
			if offsets[p.topic] == nil {
				offsets[p.topic] = make(map[int]int64)
			}
			offsets[p.topic][p.id] = off
		}
	}
	if len(offsets) == 0 {
		return
	}
	err := g.gen.CommitOffsets(offsets)
	if err != nil {
		c.metrics.commits.WithLabelValues(commitError).Inc()
		level := slog.LevelWarn
		if *failed {
			level = slog.LevelDebug
		}
		*failed = true
		c.logger.Log(context.Background(), level, "commit offsets failed",
			"generation", g.gen.ID, "offsets", offsets, "err", err)
		return
	}
	c.metrics.commits.WithLabelValues(commitOK).Inc()
	for topic, parts := range offsets {
		for id, off := range parts {
			g.byID[topicPartition{topic, id}].committed = off
			c.metrics.committedOffset.WithLabelValues(topic, strconv.Itoa(id)).Set(float64(off))
		}
	}
}

// endGeneration makes MarkDone ignore g's messages and drops g's state.
func (c *Consumer) endGeneration(g *generation) {
	abandoned := 0
	for _, p := range g.parts {
		p.mu.Lock()
		p.closed = true
		n := p.tr.Pending()
		c.metrics.inFlightBytes.Sub(float64(p.bytes))
		p.mu.Unlock()
		abandoned += n
		c.metrics.inFlight.Sub(float64(n))
		c.metrics.committedOffset.DeleteLabelValues(p.topic, strconv.Itoa(p.id))
	}
	c.mu.Lock()
	if c.cur == g {
		c.cur = nil
		c.metrics.assignedPartitions.Set(0)
	}
	c.mu.Unlock()
	close(g.finished)
	c.logger.Info("consumer group generation ended", "generation", g.gen.ID, "abandoned", abandoned)
}

// partitionList describes parts for a log line: partition numbers, or
// "topic/partition" when several topics are consumed.
func partitionList(parts []*partition, withTopic bool) any {
	if !withTopic {
		ids := make([]int, len(parts))
		for i, p := range parts {
			ids[i] = p.id
		}
		return ids
	}
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = p.topic + "/" + strconv.Itoa(p.id)
	}
	return out
}

// joinBackoff returns the pause after the n-th consecutive failure (n >= 1).
func joinBackoff(n int) time.Duration {
	d := joinBackoffMin
	for i := 1; i < n && d < joinBackoffMax; i++ {
		d *= 2
	}
	return min(d, joinBackoffMax)
}

// debugLogger adapts kafka-go's printf logging to slog at debug level: what
// matters is logged by this package at the right level.
func debugLogger(l *slog.Logger) kafka.LoggerFunc {
	return func(format string, args ...any) {
		if l.Enabled(context.Background(), slog.LevelDebug) {
			l.Debug(fmt.Sprintf(format, args...))
		}
	}
}
