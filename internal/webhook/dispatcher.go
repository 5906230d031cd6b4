package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/backoff"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/jobheader"
)

// Headers of a webhook dead letter, next to those package deadletter sets
// (the reason in jobheader.KeyDLQReason, the attempts in jobheader.KeyAttempt,
// the original topic, partition and offset, the time).
const (
	// HeaderDLQEndpoint is the id of the endpoint that gave up on the
	// event.
	HeaderDLQEndpoint = "postline-webhook-endpoint"
	// HeaderDLQLastStatus is the HTTP status of the last attempt, 0 when it
	// got no reply (timeout, refused, TLS).
	HeaderDLQLastStatus = "postline-webhook-last-status"
	// HeaderDLQEventID is the event's ID (the webhook-id that was sent).
	HeaderDLQEventID = "postline-webhook-event-id"
)

// Reasons of a webhook dead letter (jobheader.KeyDLQReason and the queue's
// dead letters).
const (
	// ReasonGone: the endpoint answered 410 Gone: it wants no more events.
	ReasonGone = "gone"
	// ReasonHorizon: an attempt made at or past the redelivery horizon failed.
	ReasonHorizon = "horizon"
	// ReasonDisabled: the endpoint was disabled when the event came.
	ReasonDisabled = "endpoint_disabled"
	// ReasonUndecodable: the record on the events topic is not a valid
	// event; the endpoint did not get it.
	ReasonUndecodable = "undecodable"
)

// dlqClass is the failure class of every webhook dead letter.
const dlqClass = "webhook"

// userAgent is sent with every POST.
const userAgent = "Postline-Webhooks/1"

// maxReplyBytes is how much of a reply's body is read (and discarded) so
// the connection can be reused.
const maxReplyBytes = 64 << 10

// Backoff of a failed write to PostgreSQL or the dead-letter topic: the
// event stays unfinished meanwhile, nothing is dropped.
const (
	storeBackoffMin = 200 * time.Millisecond
	storeBackoffMax = 5 * time.Second
)

// source is what a lane needs of its consumer; *consumer.Consumer is one.
type source interface {
	Run(ctx context.Context) error
	Messages() <-chan consumer.Message
	MarkDone(m consumer.Message)
	Joined() bool
}

// store is the durable queue a lane keeps its redeliveries and dead letters in;
// *Queue is one.
type store interface {
	Enqueue(ctx context.Context, p Pending) error
	Claim(ctx context.Context, endpoint string, now time.Time, lease time.Duration, limit int) ([]Pending, error)
	Delivered(ctx context.Context, endpoint, eventID string) error
	Reschedule(ctx context.Context, p Pending) error
	Unclaim(ctx context.Context, endpoint, eventID string, now time.Time) error
	Bury(ctx context.Context, p Pending, reason string, at time.Time) error
	PullForward(ctx context.Context, endpoint string, now time.Time) (int64, error)
	PurgeDead(ctx context.Context, endpoint string, cutoff time.Time, limit int) (int64, error)
	RecordHealth(ctx context.Context, endpoint string, h Health) error
	State(ctx context.Context, endpoint string) (EndpointState, error)
	DisableIfFailingSince(ctx context.Context, endpoint string, cutoff, now time.Time) (bool, error)
	Backlog(ctx context.Context, endpoint string) (Backlog, error)
}

var _ store = (*Queue)(nil)

// Dispatcher sends the events of the events topic to the endpoints, each
// endpoint in a lane of its own. Create it with New, start it with Run.
type Dispatcher struct {
	cfg     Config
	logger  *slog.Logger
	lanes   []*lane
	client  *http.Client
	metrics *metrics
}

// attempt is the outcome of one POST.
type attempt struct {
	status     int           // 0: no reply
	result     string        // attempts_total result
	detail     string        // what went wrong, for logs and dead letters; "" on success
	retryAfter time.Duration // the reply's Retry-After
}

func (a attempt) ok() bool { return a.status >= 200 && a.status < 300 }

// New returns a Dispatcher for cfg (after cfg.WithDefaults()). Its
// metrics, and its consumers', register on reg (nil: unregistered).
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Dispatcher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		return nil, errors.New("webhook: logger is nil")
	}
	sources := make([]source, len(cfg.Endpoints))
	for i, ep := range cfg.Endpoints {
		// The lanes' consumers export the same series, told apart by an
		// endpoint label.
		var laneReg prometheus.Registerer
		if reg != nil {
			laneReg = prometheus.WrapRegistererWith(prometheus.Labels{"endpoint": ep.ID}, reg)
		}
		c, err := consumer.New(cfg.consumerConfig(ep.ID), logger.With("endpoint", ep.ID), laneReg)
		if err != nil {
			return nil, err
		}
		sources[i] = c
	}
	return newDispatcher(cfg, logger, reg, cfg.Queue, sources)
}

// newDispatcher builds the dispatcher around one source per endpoint; cfg
// is validated.
func newDispatcher(cfg Config, logger *slog.Logger, reg prometheus.Registerer, st store, sources []source) (*Dispatcher, error) {
	d := &Dispatcher{
		cfg:    cfg,
		logger: logger.With("component", "webhook"),
		client: &http.Client{
			Transport: cfg.Transport,
			// A redirect is a failed attempt: following it would send the
			// signed event somewhere the operator did not configure.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	for i, ep := range cfg.Endpoints {
		l, err := newLane(d, ep, sources[i], st)
		if err != nil {
			return nil, err
		}
		d.lanes = append(d.lanes, l)
	}
	var err error
	if d.metrics, err = newMetrics(reg, d); err != nil {
		return nil, err
	}
	return d, nil
}

// Ready reports whether every lane holds a consumer-group generation and
// its last write to PostgreSQL or the dead-letter topic, if any, succeeded
// (for /readyz).
func (d *Dispatcher) Ready() bool {
	for _, l := range d.lanes {
		if !l.src.Joined() || l.storeFailed.Load() {
			return false
		}
	}
	return true
}

// Run dispatches until ctx is cancelled; then each lane stops fetching,
// lets the POSTs in flight finish within the consumer's DrainTimeout,
// commits what is finished, leaves its group and returns. Events not
// finished by then are sent again by the next owner of their partition;
// redeliveries wait in PostgreSQL. Run may be called once.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.logger.Info("webhook dispatcher starting", "endpoints", len(d.lanes), "topic", d.cfg.Topic, "group_prefix", d.cfg.GroupID)
	if len(d.lanes) == 0 {
		d.logger.Warn("no webhook endpoints: nothing to send until the endpoints file lists one")
		<-ctx.Done()
		return nil
	}
	var g errgroup.Group
	for _, l := range d.lanes {
		g.Go(func() error { return l.run(ctx) })
	}
	err := g.Wait()
	d.client.CloseIdleConnections()
	return err
}

// post makes one signed POST of an event to l's endpoint.
func (d *Dispatcher) post(work context.Context, l *lane, eventID string, body []byte) attempt {
	ctx, cancel := context.WithTimeout(work, l.ep.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url, bytes.NewReader(body))
	if err != nil {
		return attempt{result: attemptError, detail: "build request: " + describe(err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	start := d.cfg.NowFunc()
	if err := l.signer.Sign(req.Header, eventID, start, body); err != nil {
		return attempt{result: attemptError, detail: err.Error()}
	}
	a := d.roundTrip(req, l.ep.Timeout)
	d.metrics.request.WithLabelValues(l.ep.ID).Observe(time.Since(start).Seconds())
	d.metrics.attempts.WithLabelValues(l.ep.ID, a.result).Inc()
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
	if !a.ok() {
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

// letter is the dead letter of p for its endpoint.
func letter(p Pending, m *consumer.Message, reason string) deadletter.Letter {
	l := deadletter.Letter{
		Key: nil, Value: p.Payload, Topic: p.Topic, Partition: p.Partition, Offset: p.Offset,
		Reason: reason, Class: dlqClass, Error: p.LastError, Attempt: p.Attempts,
	}
	if m != nil {
		l.Key, l.Headers = m.Key, slices.Clone(m.Headers)
	} else if ev, err := event.Decode(p.Payload); err == nil {
		// A redelivery from the queue: the record's key was the Message-ID.
		l.Key = []byte(ev.MessageID)
	}
	l.Headers = jobheader.Set(l.Headers, HeaderDLQEndpoint, p.Endpoint)
	l.Headers = jobheader.Set(l.Headers, HeaderDLQLastStatus, strconv.Itoa(p.LastStatus))
	if p.EventID != "" {
		l.Headers = jobheader.Set(l.Headers, HeaderDLQEventID, p.EventID)
	}
	return l
}

// storeWithBackoff runs op until it succeeds (true) or stop ends (false),
// waiting longer after each failure; failed says whether the last try
// failed, for readiness.
func storeWithBackoff(stop context.Context, logger *slog.Logger, failed *atomic.Bool, what string, op func() error) bool {
	err := backoff.Policy{First: storeBackoffMin, Max: storeBackoffMax,
		OnWait: func(err error, _ int, wait time.Duration) {
			logger.Error("webhook "+what+" failed; trying again", "err", err, "wait", wait)
		}}.Do(stop, func() error {
		err := op()
		failed.Store(err != nil)
		return err
	})
	return err == nil
}
