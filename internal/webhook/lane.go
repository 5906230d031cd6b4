package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/errgroup"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/consumer"
)

// purgeBatch bounds the dead letters one state pass deletes.
const purgeBatch = 1000

// Bounds of a claim, and of unclaiming one at shutdown.
const (
	claimTimeout   = 10 * time.Second
	unclaimTimeout = 2 * time.Second
)

// lane delivers the events to one endpoint. It reads the events topic
// with a consumer group of its own, so how far it has come depends on its
// endpoint alone, and makes each event's first attempt at once. An event
// the endpoint does not take waits in the durable queue for its next
// attempt, and the record is finished once it is delivered, queued or
// dead-lettered: a down endpoint keeps its consumer moving, and its
// backlog lives in PostgreSQL, not in the topic or in memory.
//
// While the endpoint is failing (FailingAfter attempts in a row failed),
// new events go to the queue without an attempt and the queue is probed
// one event at a time; the first success makes every queued event due at
// once, so a recovered endpoint catches up without waiting out each
// event's schedule.
type lane struct {
	d      *Dispatcher
	ep     Endpoint
	url    string
	signer *Signer
	logger *slog.Logger
	src    source
	store  store
	seen   *lru.Cache[string, struct{}] // IDs finished lately (delivered, queued, dead): copies are not sent again
	sem    chan struct{}                // one per POST in flight: Concurrency
	wake   chan struct{}                // the redelivery loop has work

	consecutive atomic.Int64 // attempts in a row that failed
	recovered   atomic.Bool  // a success ended a failing spell: pull the queue forward
	disabled    atomic.Bool
	storeFailed atomic.Bool // the last write to the queue or the dead-letter topic failed

	healthMu sync.Mutex
	health   Health // since the last flush

	// Copies of an event whose first attempt is in flight are finished
	// with it, without a POST of their own.
	inflightMu sync.Mutex
	inflight   map[string][]consumer.Message

	backlog atomic.Pointer[Backlog] // as last counted, for the metrics
	wg      sync.WaitGroup          // attempts in flight
}

func newLane(d *Dispatcher, ep Endpoint, src source, st store) (*lane, error) {
	signer, err := NewSigner(string(ep.Secret))
	if err != nil { // Validate checked it
		return nil, fmt.Errorf("webhook: endpoint %q: %w", ep.ID, err)
	}
	seen, err := lru.New[string, struct{}](d.cfg.DedupeWindow)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	ep.Types, ep.Tenants = slices.Clone(ep.Types), slices.Clone(ep.Tenants)
	l := &lane{
		d: d, ep: ep, url: ep.URL.String(), signer: signer, src: src, store: st, seen: seen,
		logger: d.logger.With("endpoint", ep.ID, "url", ep.LogURL()),
		sem:    make(chan struct{}, d.cfg.Concurrency),
		wake:   make(chan struct{}, 1),

		inflight: make(map[string][]consumer.Message),
	}
	l.backlog.Store(&Backlog{})
	return l, nil
}

func (l *lane) failing() bool { return l.consecutive.Load() >= int64(l.d.cfg.FailingAfter) }

// run runs the lane until ctx ends and its consumer has drained.
func (l *lane) run(ctx context.Context) error {
	// Attempts, queue writes and dead letters outlive ctx until the
	// consumer has drained and made its final commit.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	l.refresh(ctx)
	var g errgroup.Group
	g.Go(func() error {
		defer stopWork()
		return l.src.Run(ctx)
	})
	g.Go(func() error {
		for m := range l.src.Messages() {
			l.take(ctx, work, m)
		}
		return nil
	})
	g.Go(func() error {
		l.redeliveryLoop(ctx, work)
		return nil
	})
	g.Go(func() error {
		t := time.NewTicker(l.d.cfg.StateInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				l.refresh(ctx)
			}
		}
	})
	err := g.Wait()
	l.wg.Wait()
	flush, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	l.flushHealth(flush)
	return err
}

// take handles one record of the events topic.
func (l *lane) take(stop, work context.Context, m consumer.Message) {
	if stop.Err() != nil {
		return
	}
	now := l.d.cfg.NowFunc()
	ev, err := event.Decode(m.Value)
	if err != nil {
		l.d.metrics.undecodable.WithLabelValues(l.ep.ID).Inc()
		p := Pending{Endpoint: l.ep.ID, Payload: m.Value, Topic: m.Topic, Partition: m.Partition, Offset: m.Offset,
			LastError: err.Error()}
		l.logger.Warn("record on the events topic is not an event; dead-lettering it",
			"topic", m.Topic, "partition", m.Partition, "offset", m.Offset, "err", err)
		if l.publishLetter(stop, work, p, &m, ReasonUndecodable) {
			l.src.MarkDone(m)
		}
		return
	}
	if !l.ep.Matches(&ev) {
		l.src.MarkDone(m)
		return
	}
	if l.seen.Contains(ev.ID) {
		l.d.metrics.duplicates.WithLabelValues(l.ep.ID).Inc()
		l.src.MarkDone(m)
		return
	}
	p := Pending{
		Endpoint: l.ep.ID, EventID: ev.ID, Type: ev.Type, Tenant: ev.Tenant, EventAt: ev.At, Payload: m.Value,
		Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, FirstAt: now, NextAt: now,
	}
	// A copy of an event whose first attempt is in flight finishes with it,
	// whatever the lane would do with a new event now. (take runs on the
	// lane's one intake goroutine: no other copy comes in between.)
	l.inflightMu.Lock()
	if copies, ok := l.inflight[ev.ID]; ok {
		l.inflight[ev.ID] = append(copies, m)
		l.inflightMu.Unlock()
		l.d.metrics.duplicates.WithLabelValues(l.ep.ID).Inc()
		return
	}
	l.inflightMu.Unlock()
	switch {
	case l.disabled.Load():
		p.LastError = "endpoint disabled"
		if l.bury(stop, work, p, &m, ReasonDisabled) {
			l.src.MarkDone(m)
		}
		return
	case l.failing():
		if l.enqueue(stop, work, p) {
			l.src.MarkDone(m)
		}
		return
	}
	l.inflightMu.Lock()
	l.inflight[ev.ID] = nil
	l.inflightMu.Unlock()
	select {
	case l.sem <- struct{}{}:
	case <-stop.Done():
		l.takeCopies(ev.ID)
		return
	}
	l.wg.Go(func() {
		defer func() { <-l.sem }()
		a := l.d.post(work, l, p.EventID, p.Payload)
		if work.Err() != nil {
			l.takeCopies(ev.ID)
			return // cut off by shutdown: unfinished, sent again by the next owner
		}
		p.Attempts = 1
		finished := l.settle(stop, work, p, &m, a, false)
		copies := l.takeCopies(ev.ID)
		if finished {
			l.src.MarkDone(m)
			for _, c := range copies {
				l.src.MarkDone(c)
			}
		}
	})
}

// takeCopies ends the first attempt of event id and returns the copies
// that came meanwhile.
func (l *lane) takeCopies(id string) []consumer.Message {
	l.inflightMu.Lock()
	defer l.inflightMu.Unlock()
	copies := l.inflight[id]
	delete(l.inflight, id)
	return copies
}

// redeliveryLoop claims the queue's due events and attempts them, as many at
// once as there are free slots, or one at a time while the endpoint is
// failing.
func (l *lane) redeliveryLoop(stop, work context.Context) {
	idle := time.NewTimer(0)
	defer idle.Stop()
	for {
		select {
		case <-stop.Done():
			return
		case <-idle.C:
		case <-l.wake:
		}
		for l.redeliverOnce(stop, work) > 0 && stop.Err() == nil {
		}
		idle.Reset(l.d.cfg.PollInterval)
	}
}

// redeliverOnce claims and starts the attempts of one batch of due events and
// returns how many it claimed.
func (l *lane) redeliverOnce(stop, work context.Context) int {
	now := l.d.cfg.NowFunc()
	if l.recovered.Swap(false) {
		var n int64
		if !storeWithBackoff(stop, l.logger, &l.storeFailed, "pull forward", func() (err error) {
			n, err = l.store.PullForward(work, l.ep.ID, now)
			return err
		}) {
			return 0
		}
		if n > 0 {
			l.logger.Info("endpoint answers again; its queued events are due now", "queued", n)
		}
	}
	if l.disabled.Load() {
		return 0
	}
	limit := l.d.cfg.Concurrency
	if l.failing() {
		limit = 1
	}
	select {
	case l.sem <- struct{}{}:
	case <-stop.Done():
		return 0
	}
	slots := 1
	for slots < limit {
		select {
		case l.sem <- struct{}{}:
			slots++
			continue
		default:
		}
		break
	}
	var rows []Pending
	var err error
	if stop.Err() == nil {
		// Not cut off by a shutdown: a claim whose reply is lost holds its
		// rows until the lease runs out.
		claim, cancel := context.WithTimeout(context.WithoutCancel(work), claimTimeout)
		rows, err = l.store.Claim(claim, l.ep.ID, l.d.cfg.NowFunc(), l.ep.Timeout+l.d.cfg.ClaimMargin, slots)
		cancel()
		l.storeFailed.Store(err != nil)
	}
	if err != nil {
		l.logger.Error("claiming due webhook redeliveries failed", "err", err)
		rows = nil
	}
	for range slots - len(rows) {
		<-l.sem
	}
	for _, p := range rows {
		l.wg.Go(func() {
			defer func() { <-l.sem }()
			a := l.d.post(work, l, p.EventID, p.Payload)
			if work.Err() != nil {
				l.unclaim(p)
				return
			}
			p.Attempts++
			l.settle(stop, work, p, nil, a, true)
		})
	}
	return len(rows)
}

// unclaim gives up the claim of p, whose attempt a shutdown cut off, so
// that the next dispatcher need not wait out the lease. A failure is only
// logged: the lease then runs out as after a crash.
func (l *lane) unclaim(p Pending) {
	ctx, cancel := context.WithTimeout(context.Background(), unclaimTimeout)
	defer cancel()
	if err := l.store.Unclaim(ctx, l.ep.ID, p.EventID, l.d.cfg.NowFunc()); err != nil {
		l.logger.Warn("unclaiming a cut-off webhook redelivery failed; it comes due when its claim expires", "err", err)
	}
}

// settle records attempt a of p (queued: p has a row in the queue) and
// reports whether p is finished durably: delivered, queued for its next
// attempt or dead-lettered.
func (l *lane) settle(stop, work context.Context, p Pending, m *consumer.Message, a attempt, queued bool) bool {
	now := l.d.cfg.NowFunc()
	l.note(a, now)
	if a.ok() {
		if queued && !storeWithBackoff(stop, l.logger, &l.storeFailed, "queue write", func() error {
			return l.store.Delivered(work, l.ep.ID, p.EventID)
		}) {
			return false
		}
		l.seen.Add(p.EventID, struct{}{})
		l.finished(p, resultDelivered, now)
		return true
	}
	p.LastStatus, p.LastError = a.status, a.detail
	if a.status == http.StatusGone {
		return l.bury(stop, work, p, m, ReasonGone)
	}
	next, ok := l.d.cfg.Schedule.Next(p.Attempts, p.FirstAt, now, a.retryAfter, rand.Float64)
	if !ok {
		return l.bury(stop, work, p, m, ReasonHorizon)
	}
	p.NextAt = next
	l.logger.Debug("webhook attempt failed; queued for another", "event_id", p.EventID, "attempt", p.Attempts,
		"status", a.status, "detail", a.detail, "next_attempt_at", next)
	if queued {
		return storeWithBackoff(stop, l.logger, &l.storeFailed, "queue write", func() error { return l.store.Reschedule(work, p) })
	}
	return l.enqueue(stop, work, p)
}

// enqueue puts p in the queue.
func (l *lane) enqueue(stop, work context.Context, p Pending) bool {
	if !storeWithBackoff(stop, l.logger, &l.storeFailed, "queue write", func() error { return l.store.Enqueue(work, p) }) {
		return false
	}
	l.seen.Add(p.EventID, struct{}{}) // the queue has it now
	l.d.metrics.queued.WithLabelValues(l.ep.ID).Inc()
	return true
}

// bury dead-letters p: on the dead-letter topic, and in the queue, where
// postctl webhooks replay finds it.
func (l *lane) bury(stop, work context.Context, p Pending, m *consumer.Message, reason string) bool {
	if !l.publishLetter(stop, work, p, m, reason) {
		return false
	}
	now := l.d.cfg.NowFunc()
	if !storeWithBackoff(stop, l.logger, &l.storeFailed, "queue write", func() error { return l.store.Bury(work, p, reason, now) }) {
		return false
	}
	if p.EventID != "" {
		l.seen.Add(p.EventID, struct{}{})
	}
	l.d.metrics.deadLetters.WithLabelValues(l.ep.ID, reason).Inc()
	l.logger.Warn("webhook dead-lettered", "event_id", p.EventID, "event_type", p.Type,
		"reason", reason, "attempts", p.Attempts, "last_status", p.LastStatus, "detail", p.LastError)
	l.finished(p, resultDeadLettered, now)
	return true
}

// publishLetter writes p's dead letter to the topic.
func (l *lane) publishLetter(stop, work context.Context, p Pending, m *consumer.Message, reason string) bool {
	dl := letter(p, m, reason)
	return storeWithBackoff(stop, l.logger, &l.storeFailed, "dead letter", func() error {
		return l.d.cfg.DeadLetters.Publish(work, dl)
	})
}

func (l *lane) finished(p Pending, result string, now time.Time) {
	l.d.metrics.deliveries.WithLabelValues(l.ep.ID, result).Inc()
	l.d.metrics.delivery.WithLabelValues(l.ep.ID, result).Observe(max(now.Sub(p.FirstAt), 0).Seconds())
}

// note counts a in the endpoint's health.
func (l *lane) note(a attempt, now time.Time) {
	l.healthMu.Lock()
	defer l.healthMu.Unlock()
	h := &l.health
	if a.ok() {
		h.LastSuccess, h.FirstFailure = now, time.Time{}
		if l.consecutive.Swap(0) >= int64(l.d.cfg.FailingAfter) {
			l.recovered.Store(true)
			select {
			case l.wake <- struct{}{}:
			default:
			}
		}
		return
	}
	if l.consecutive.Add(1) == int64(l.d.cfg.FailingAfter) {
		l.logger.Warn("endpoint is failing: new events are queued and it is probed one event at a time",
			"attempts_failed", l.d.cfg.FailingAfter, "last_status", a.status, "detail", a.detail)
	}
	if h.FirstFailure.IsZero() {
		h.FirstFailure = now
	}
	h.LastFailure, h.LastStatus, h.LastError = now, a.status, a.detail
}

// flushHealth writes the health noted since the last flush.
func (l *lane) flushHealth(ctx context.Context) {
	l.healthMu.Lock()
	h := l.health
	l.health = Health{}
	l.healthMu.Unlock()
	if h == (Health{}) {
		return
	}
	if err := l.store.RecordHealth(ctx, l.ep.ID, h); err != nil {
		l.logger.Error("recording the endpoint's health failed", "err", err)
		l.healthMu.Lock()
		l.health = mergeHealth(h, l.health)
		l.healthMu.Unlock()
	}
}

// mergeHealth is older followed by newer.
func mergeHealth(older, newer Health) Health {
	out := older
	if !newer.LastSuccess.IsZero() {
		out.LastSuccess, out.FirstFailure = newer.LastSuccess, newer.FirstFailure
	} else if out.FirstFailure.IsZero() {
		out.FirstFailure = newer.FirstFailure
	}
	if !newer.LastFailure.IsZero() {
		out.LastFailure, out.LastStatus, out.LastError = newer.LastFailure, newer.LastStatus, newer.LastError
	}
	return out
}

// refresh writes the noted health, reads the endpoint's shared state
// (disabled by an operator or another replica?), disables an endpoint
// that failed every attempt for DisableAfter, counts the backlog for the
// metrics and purges old dead letters. Failures are logged; the next pass
// tries again.
func (l *lane) refresh(ctx context.Context) {
	l.flushHealth(ctx)
	now := l.d.cfg.NowFunc()
	st, err := l.store.State(ctx, l.ep.ID)
	if err != nil {
		l.logger.Error("reading the endpoint's state failed", "err", err)
		return
	}
	if !st.Disabled() && !st.FailingSince.IsZero() && now.Sub(st.FailingSince) >= l.d.cfg.DisableAfter {
		won, err := l.store.DisableIfFailingSince(ctx, l.ep.ID, now.Add(-l.d.cfg.DisableAfter), now)
		if err != nil {
			l.logger.Error("disabling the endpoint failed", "err", err)
		} else if won {
			l.d.metrics.disabledTotal.WithLabelValues(l.ep.ID).Inc()
			l.logger.Error("endpoint disabled: it failed every attempt for too long; events for it are dead-lettered until postctl webhooks enable",
				"failing_since", st.FailingSince, "disable_after", l.d.cfg.DisableAfter)
		}
		st.DisabledAt = now
	}
	if was := l.disabled.Swap(st.Disabled()); was && !st.Disabled() {
		l.consecutive.Store(0)
		l.logger.Info("endpoint enabled")
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	if b, err := l.store.Backlog(ctx, l.ep.ID); err != nil {
		l.logger.Error("counting the endpoint's backlog failed", "err", err)
	} else {
		l.backlog.Store(&b)
	}
	if _, err := l.store.PurgeDead(ctx, l.ep.ID, now.Add(-l.d.cfg.DeadRetention), purgeBatch); err != nil {
		l.logger.Error("purging old webhook dead letters failed", "err", err)
	}
}
