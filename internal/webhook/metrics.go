package webhook

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/metricreg"
)

const (
	metricsNamespace = "postline"
	metricsSubsystem = "webhook"
)

// Values of the result label of deliveries_total and delivery_seconds.
const (
	resultDelivered    = "delivered"
	resultDeadLettered = "dead_lettered"
)

// Values of the result label of attempts_total: the status class of the
// reply, or why there was none.
const (
	attempt2xx     = "2xx"
	attempt3xx     = "3xx"
	attempt4xx     = "4xx"
	attempt5xx     = "5xx"
	attemptTimeout = "timeout"
	attemptError   = "error" // no reply: refused, reset, TLS, DNS
)

var attemptResults = []string{attempt2xx, attempt3xx, attempt4xx, attempt5xx, attemptTimeout, attemptError}

type metrics struct {
	deliveries    *prometheus.CounterVec
	delivery      *prometheus.HistogramVec
	attempts      *prometheus.CounterVec
	request       *prometheus.HistogramVec
	queued        *prometheus.CounterVec
	deadLetters   *prometheus.CounterVec
	disabledTotal *prometheus.CounterVec
	undecodable   *prometheus.CounterVec
	duplicates    *prometheus.CounterVec
}

// deadLetterReasons are the reason label's values of dead_letters_total.
var deadLetterReasons = []string{ReasonGone, ReasonHorizon, ReasonDisabled, ReasonUndecodable}

func newMetrics(reg prometheus.Registerer, d *Dispatcher) (*metrics, error) {
	set := metricreg.NewExclusiveSet(reg, metricsSubsystem)
	m := &metrics{
		deliveries: set.CounterVec("deliveries_total",
			"Events finished per endpoint: delivered (a 2xx reply) or dead_lettered (410 Gone, the redelivery horizon passed, endpoint disabled, not an event).",
			"endpoint", "result"),
		delivery: set.HistogramVec("delivery_seconds",
			"Time from an event's first attempt (or its queueing) for an endpoint to its end (delivered or dead-lettered), redeliveries included.",
			prometheus.ExponentialBuckets(0.01, 3, 16), // 10ms to about 40h
			"endpoint", "result"),
		attempts: set.CounterVec("attempts_total",
			"POSTs to endpoints, by the status class of the reply (2xx, 3xx, 4xx, 5xx) or timeout or error (no reply).",
			"endpoint", "result"),
		request: set.HistogramVec("request_seconds", "Duration of one POST to an endpoint, failed ones included.",
			prometheus.ExponentialBuckets(0.005, 2, 15), // 5ms to about 80s
			"endpoint"),
		queued: set.CounterVec("queued_total",
			"Events an endpoint did not take at once (or that came while it was failing), written to its durable queue for a later attempt.",
			"endpoint"),
		deadLetters: set.CounterVec("dead_letters_total",
			"Events an endpoint gave up on, written to the webhook dead-letter topic and kept in the queue for replay, by reason.",
			"endpoint", "reason"),
		disabledTotal: set.CounterVec("endpoints_disabled_total",
			"Endpoints this dispatcher disabled because they failed every attempt for the disable period.", "endpoint"),
		undecodable: set.CounterVec("undecodable_total",
			"Records of the events topic that are not valid events; they go to the dead-letter topic, once per endpoint.", "endpoint"),
		duplicates: set.CounterVec("duplicates_total", "Copies of events an endpoint got lately, not sent again.", "endpoint"),
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("webhook: register metrics: %w", err)
	}
	// Export every endpoint's series from the start, so rates and alerts
	// see zeros.
	for _, l := range d.lanes {
		id := l.ep.ID
		for _, r := range []string{resultDelivered, resultDeadLettered} {
			m.deliveries.WithLabelValues(id, r)
		}
		for _, r := range attemptResults {
			m.attempts.WithLabelValues(id, r)
		}
		for _, r := range deadLetterReasons {
			m.deadLetters.WithLabelValues(id, r)
		}
		m.queued.WithLabelValues(id)
		m.disabledTotal.WithLabelValues(id)
		m.undecodable.WithLabelValues(id)
		m.duplicates.WithLabelValues(id)
	}
	if reg == nil {
		return m, nil
	}
	if err := reg.Register(laneCollector{d}); err != nil {
		return nil, fmt.Errorf("webhook: register metrics: %w", err)
	}
	return m, nil
}

var (
	backlogDesc = prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "backlog"),
		"Events in an endpoint's durable queue waiting for another attempt, as last counted (every state interval).", []string{"endpoint"}, nil)
	oldestDesc = prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "oldest_pending_age_seconds"),
		"Age of the oldest event in an endpoint's durable queue, since its first attempt; 0 when the queue is empty.", []string{"endpoint"}, nil)
	failingDesc = prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "endpoint_failing"),
		"1 while this dispatcher counts the endpoint as failing (its last attempts all failed), else 0.", []string{"endpoint"}, nil)
	disabledDesc = prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "endpoint_disabled"),
		"1 while the endpoint is disabled (its events are dead-lettered), else 0.", []string{"endpoint"}, nil)
)

// laneCollector reads each lane's state when scraped.
type laneCollector struct{ d *Dispatcher }

func (c laneCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- backlogDesc
	ch <- oldestDesc
	ch <- failingDesc
	ch <- disabledDesc
}

func (c laneCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.d.cfg.NowFunc()
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, l := range c.d.lanes {
		b := l.backlog.Load()
		age := 0.0
		if b.Pending > 0 && !b.OldestPending.IsZero() {
			age = max(now.Sub(b.OldestPending), 0).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(b.Pending), l.ep.ID)
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age, l.ep.ID)
		ch <- prometheus.MustNewConstMetric(failingDesc, prometheus.GaugeValue, flag(l.failing()), l.ep.ID)
		ch <- prometheus.MustNewConstMetric(disabledDesc, prometheus.GaugeValue, flag(l.disabled.Load()), l.ep.ID)
	}
}

// statusResult maps a reply's status to the attempts_total result.
func statusResult(code int) string {
	switch {
	case code >= 200 && code < 300:
		return attempt2xx
	case code >= 300 && code < 400:
		return attempt3xx
	case code >= 400 && code < 500:
		return attempt4xx
	}
	return attempt5xx
}
