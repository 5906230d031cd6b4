package webhook

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/job"
)

// Headers of a webhook dead letter, next to those package deadletter sets
// (the reason in job.HeaderDLQReason, the attempts in job.HeaderAttempt,
// the original topic, partition and offset, the time).
const (
	// HeaderDLQEndpoint is the id of the endpoint that gave up on the
	// event; absent on a record that is not an event.
	HeaderDLQEndpoint = "postline-webhook-endpoint"
	// HeaderDLQLastStatus is the HTTP status of the last attempt, 0 when it
	// got no reply (timeout, refused, TLS).
	HeaderDLQLastStatus = "postline-webhook-last-status"
	// HeaderDLQEventID is the event's ID (the webhook-id that was sent).
	HeaderDLQEventID = "postline-webhook-event-id"
)

// Reasons of a webhook dead letter (job.HeaderDLQReason).
const (
	// ReasonGone: the endpoint answered 410 Gone: it wants no more events.
	ReasonGone = "gone"
	// ReasonMaxAttempts: every allowed attempt failed.
	ReasonMaxAttempts = deadletter.ReasonMaxAttempts
	// ReasonMaxAge: the next attempt would come later than Config.MaxAge
	// after the event was queued.
	ReasonMaxAge = deadletter.ReasonMaxAge
	// ReasonUndecodable: the record on the events topic is not a valid
	// event; no endpoint got it.
	ReasonUndecodable = "undecodable"
)

// dlqClass is the failure class of every webhook dead letter.
const dlqClass = "webhook"

// userAgent is sent with every POST.
const userAgent = "Postline-Webhooks/1"

// maxReplyBytes is how much of a reply's body is read (and discarded) so
// the connection can be reused.
const maxReplyBytes = 64 << 10

// Backoff of a failed dead-letter write.
const (
	dlqBackoffMin = 200 * time.Millisecond
	dlqBackoffMax = 5 * time.Second
)

// source is what the dispatcher needs of its consumer; *consumer.Consumer
// is one.
type source interface {
	Run(ctx context.Context) error
	Messages() <-chan consumer.Message
	MarkDone(m consumer.Message)
	Joined() bool
}

// Dispatcher sends the events of the events topic to the endpoints. Create
// it with New, start it with Run.
type Dispatcher struct {
	cfg       Config
	logger    *slog.Logger
	src       source
	endpoints []*endpointState
	client    *http.Client
	backoff   backoff
	metrics   *metrics
	dlqFailed atomic.Bool // the last dead-letter write failed

	// Copies of one event (equal IDs) are sent once: mu guards the events
	// being sent, by ID, and the IDs of those recently finished.
	mu       sync.Mutex
	inflight map[string]*record
	seen     *lru.Cache[string, struct{}]

	wg sync.WaitGroup // deliveries
}

// endpointState is one endpoint's backlog.
type endpointState struct {
	ep     Endpoint
	url    string // the URL requests go to
	signer *Signer
	logger *slog.Logger
	slots  chan struct{} // one per event in the backlog: MaxPending
	sem    chan struct{} // one per POST in flight: Concurrency

	mu      sync.Mutex
	pending *list.List // of *delivery, in queueing order
}

// record is one record of the events topic being delivered.
type record struct {
	msg    consumer.Message
	ev     event.Event
	left   atomic.Int32       // endpoints that have not finished it
	copies []consumer.Message // later records of the same event; guarded by Dispatcher.mu
}

// delivery is one record on its way to one endpoint.
type delivery struct {
	rec    *record
	es     *endpointState
	queued time.Time
	elem   *list.Element
}

// attempt is the outcome of one POST.
type attempt struct {
	status     int           // 0: no reply
	result     string        // attempts_total result
	detail     string        // what went wrong, for logs and dead letters; "" on success
	retryAfter time.Duration // the reply's Retry-After
}

// New returns a Dispatcher for cfg (after cfg.WithDefaults()). Its
// metrics, and its consumer's, register on reg (nil: unregistered).
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Dispatcher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		return nil, errors.New("webhook: logger is nil")
	}
	cons, err := consumer.New(cfg.consumerConfig(), logger, reg)
	if err != nil {
		return nil, err
	}
	return newDispatcher(cfg, logger, reg, cons)
}

// newDispatcher builds the dispatcher around src; cfg is validated.
func newDispatcher(cfg Config, logger *slog.Logger, reg prometheus.Registerer, src source) (*Dispatcher, error) {
	seen, err := lru.New[string, struct{}](cfg.DedupeWindow)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	d := &Dispatcher{
		cfg:    cfg,
		logger: logger.With("component", "webhook"),
		src:    src,
		client: &http.Client{
			Transport: cfg.Transport,
			// A redirect is a failed attempt: following it would send the
			// signed event somewhere the operator did not configure.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		backoff:  backoff{base: cfg.RetryBase, max: cfg.RetryMaxDelay, jitter: randomJitter},
		inflight: make(map[string]*record),
		seen:     seen,
	}
	for _, ep := range cfg.Endpoints {
		signer, err := NewSigner(string(ep.Secret))
		if err != nil { // Validate checked it
			return nil, fmt.Errorf("webhook: endpoint %q: %w", ep.ID, err)
		}
		ep.Types, ep.Tenants = slices.Clone(ep.Types), slices.Clone(ep.Tenants)
		d.endpoints = append(d.endpoints, &endpointState{
			ep:      ep,
			url:     ep.URL.String(),
			signer:  signer,
			logger:  d.logger.With("endpoint", ep.ID, "url", ep.LogURL()),
			slots:   make(chan struct{}, cfg.MaxPending),
			sem:     make(chan struct{}, cfg.Concurrency),
			pending: list.New(),
		})
	}
	if d.metrics, err = newMetrics(reg, d); err != nil {
		return nil, err
	}
	return d, nil
}

func randomJitter(n time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	return rand.N(n + 1)
}

// Ready reports whether the dispatcher holds a consumer-group generation
// and its last dead-letter write, if any, succeeded (for /readyz).
func (d *Dispatcher) Ready() bool {
	return d.src.Joined() && !d.dlqFailed.Load()
}

// Run dispatches until ctx is cancelled; then it stops fetching, lets the
// POSTs in flight finish within the consumer's DrainTimeout, commits what
// is finished, leaves the group and returns. Events waiting for a retry at
// that point are left uncommitted: the next owner of their partition sends
// them again. Run may be called once.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.logger.Info("webhook dispatcher starting", "endpoints", len(d.endpoints), "topic", d.cfg.Topic, "group", d.cfg.GroupID)
	// Requests and dead-letter writes outlive ctx until the consumer has
	// drained and made its final commit.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	var g errgroup.Group
	g.Go(func() error {
		defer stopWork()
		return d.src.Run(ctx)
	})
	g.Go(func() error {
		for m := range d.src.Messages() {
			d.dispatch(ctx, work, m)
		}
		return nil
	})
	err := g.Wait()
	d.wg.Wait()
	d.client.CloseIdleConnections()
	return err
}

// dispatch queues m for every endpoint whose filters match, waiting while
// one's backlog is full. It returns early, leaving m unfinished, when stop
// ends.
func (d *Dispatcher) dispatch(stop, work context.Context, m consumer.Message) {
	if stop.Err() != nil {
		return
	}
	ev, err := event.Decode(m.Value)
	if err != nil {
		d.metrics.undecodable.Inc()
		d.logger.Warn("record on the events topic is not an event; dead-lettering it",
			"topic", m.Topic, "partition", m.Partition, "offset", m.Offset, "err", err)
		letter := d.letter(m, ReasonUndecodable, err.Error(), 0)
		if d.publish(stop, work, letter) {
			d.src.MarkDone(m)
		}
		return
	}
	var targets []*endpointState
	for _, es := range d.endpoints {
		if es.ep.Matches(&ev) {
			targets = append(targets, es)
		}
	}
	if len(targets) == 0 {
		d.src.MarkDone(m)
		return
	}
	// A copy of an event being sent is done when the first is; a copy of
	// one finished lately is done now.
	d.mu.Lock()
	if first := d.inflight[ev.ID]; first != nil {
		first.copies = append(first.copies, m)
		d.mu.Unlock()
		d.metrics.duplicates.Inc()
		return
	}
	if d.seen.Contains(ev.ID) {
		d.mu.Unlock()
		d.metrics.duplicates.Inc()
		d.src.MarkDone(m)
		return
	}
	rec := &record{msg: m, ev: ev}
	rec.left.Store(int32(len(targets)))
	d.inflight[ev.ID] = rec
	d.mu.Unlock()
	for _, es := range targets {
		select {
		case es.slots <- struct{}{}:
		case <-stop.Done():
			return
		}
		dl := es.queue(rec, d.cfg.NowFunc())
		d.wg.Go(func() { d.deliver(stop, work, dl) })
	}
}

// queue adds rec to the backlog; the caller holds a slot.
func (es *endpointState) queue(rec *record, now time.Time) *delivery {
	dl := &delivery{rec: rec, es: es, queued: now}
	es.mu.Lock()
	dl.elem = es.pending.PushBack(dl)
	es.mu.Unlock()
	return dl
}

// remove takes dl out of the backlog and frees its slot.
func (es *endpointState) remove(dl *delivery) {
	es.mu.Lock()
	es.pending.Remove(dl.elem)
	es.mu.Unlock()
	<-es.slots
}

// backlog returns the number of unfinished events and when the oldest was
// queued.
func (es *endpointState) backlog() (int, time.Time) {
	es.mu.Lock()
	defer es.mu.Unlock()
	if f := es.pending.Front(); f != nil {
		return es.pending.Len(), f.Value.(*delivery).queued
	}
	return 0, time.Time{}
}

// deliver POSTs dl until the endpoint takes it or gives up on it. When
// stop ends before then, dl is left unfinished.
func (d *Dispatcher) deliver(stop, work context.Context, dl *delivery) {
	es := dl.es
	for n := 1; ; n++ {
		select {
		case es.sem <- struct{}{}:
		case <-stop.Done():
			es.remove(dl)
			return
		}
		a := d.post(work, dl)
		<-es.sem
		switch {
		case a.status >= 200 && a.status < 300:
			d.finish(dl, resultDelivered)
			return
		case a.status == http.StatusGone:
			d.giveUp(stop, work, dl, ReasonGone, a, n)
			return
		case n >= d.cfg.MaxAttempts:
			d.giveUp(stop, work, dl, ReasonMaxAttempts, a, n)
			return
		}
		wait := d.backoff.delay(n, a.retryAfter)
		if d.cfg.NowFunc().Add(wait).Sub(dl.queued) > d.cfg.MaxAge {
			d.giveUp(stop, work, dl, ReasonMaxAge, a, n)
			return
		}
		es.logger.Debug("webhook attempt failed; retrying", "event_id", dl.rec.ev.ID, "attempt", n,
			"status", a.status, "detail", a.detail, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-stop.Done():
			t.Stop()
			es.remove(dl)
			return
		}
	}
}

// post makes one signed POST of dl's event.
func (d *Dispatcher) post(work context.Context, dl *delivery) attempt {
	es := dl.es
	ctx, cancel := context.WithTimeout(work, es.ep.Timeout)
	defer cancel()
	body := dl.rec.msg.Value
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, es.url, bytes.NewReader(body))
	if err != nil {
		return attempt{result: attemptError, detail: "build request: " + describe(err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	start := d.cfg.NowFunc()
	if err := es.signer.Sign(req.Header, dl.rec.ev.ID, start, body); err != nil {
		return attempt{result: attemptError, detail: err.Error()}
	}
	a := d.roundTrip(req, es.ep.Timeout)
	d.metrics.request.WithLabelValues(es.ep.ID).Observe(d.cfg.NowFunc().Sub(start).Seconds())
	d.metrics.attempts.WithLabelValues(es.ep.ID, a.result).Inc()
	return a
}

func (d *Dispatcher) roundTrip(req *http.Request, timeout time.Duration) attempt {
	resp, err := d.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			return attempt{result: attemptTimeout, detail: fmt.Sprintf("no reply within %s", timeout)}
		}
		return attempt{result: attemptError, detail: describe(err)}
	}
	_, rerr := io.Copy(io.Discard, io.LimitReader(resp.Body, maxReplyBytes))
	resp.Body.Close()
	a := attempt{status: resp.StatusCode, result: statusResult(resp.StatusCode)}
	if a.status < 200 || a.status >= 300 {
		a.detail = "HTTP " + strconv.Itoa(resp.StatusCode)
		a.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), d.cfg.NowFunc())
	} else if rerr != nil && !errors.Is(rerr, context.DeadlineExceeded) {
		// The status was sent; a reply body cut short does not undo it.
		d.logger.Debug("reading a webhook reply failed after its status", "err", describe(rerr))
	}
	return a
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// describe returns err's text without the request URL (url.Error quotes
// it, query included).
func describe(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// finish ends dl for its endpoint; once every endpoint has finished the
// record, it is marked done.
func (d *Dispatcher) finish(dl *delivery, result string) {
	es := dl.es
	d.metrics.deliveries.WithLabelValues(es.ep.ID, result).Inc()
	d.metrics.delivery.WithLabelValues(es.ep.ID, result).Observe(max(d.cfg.NowFunc().Sub(dl.queued), 0).Seconds())
	es.remove(dl)
	if dl.rec.left.Add(-1) != 0 {
		return
	}
	d.mu.Lock()
	delete(d.inflight, dl.rec.ev.ID)
	d.seen.Add(dl.rec.ev.ID, struct{}{})
	copies := dl.rec.copies
	d.mu.Unlock()
	d.src.MarkDone(dl.rec.msg)
	for _, c := range copies {
		d.src.MarkDone(c)
	}
}

// giveUp dead-letters dl for its endpoint and finishes it.
func (d *Dispatcher) giveUp(stop, work context.Context, dl *delivery, reason string, a attempt, attempts int) {
	es := dl.es
	letter := d.letter(dl.rec.msg, reason, a.detail, attempts)
	letter.Headers = job.SetHeader(letter.Headers, HeaderDLQEndpoint, es.ep.ID)
	letter.Headers = job.SetHeader(letter.Headers, HeaderDLQLastStatus, strconv.Itoa(a.status))
	letter.Headers = job.SetHeader(letter.Headers, HeaderDLQEventID, dl.rec.ev.ID)
	if !d.publish(stop, work, letter) {
		es.remove(dl)
		return
	}
	d.metrics.deadLetters.WithLabelValues(es.ep.ID).Inc()
	es.logger.Warn("webhook dead-lettered", "event_id", dl.rec.ev.ID, "event_type", dl.rec.ev.Type,
		"reason", reason, "attempts", attempts, "last_status", a.status, "detail", a.detail)
	d.finish(dl, resultDeadLettered)
}

// letter is the dead letter of m.
func (d *Dispatcher) letter(m consumer.Message, reason, detail string, attempts int) deadletter.Letter {
	return deadletter.Letter{
		Key: m.Key, Value: m.Value, Headers: slices.Clone(m.Headers),
		Topic: m.Topic, Partition: m.Partition, Offset: m.Offset,
		Reason: reason, Class: dlqClass, Error: detail, Attempt: attempts,
	}
}

// publish writes a dead letter, retrying until it is written (true) or
// stop ends (false).
func (d *Dispatcher) publish(stop, work context.Context, l deadletter.Letter) bool {
	wait := dlqBackoffMin
	for {
		err := d.cfg.DeadLetters.Publish(work, l)
		if err == nil {
			d.dlqFailed.Store(false)
			return true
		}
		d.dlqFailed.Store(true)
		d.logger.Error("writing a webhook dead letter failed; retrying", "reason", l.Reason,
			"topic", l.Topic, "partition", l.Partition, "offset", l.Offset, "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-stop.Done():
			t.Stop()
			return false
		}
		wait = min(2*wait, dlqBackoffMax)
	}
}
