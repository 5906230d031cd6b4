package webhook

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
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
	deliveries  *prometheus.CounterVec
	delivery    *prometheus.HistogramVec
	attempts    *prometheus.CounterVec
	request     *prometheus.HistogramVec
	deadLetters *prometheus.CounterVec
	undecodable prometheus.Counter
	duplicates  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, d *Dispatcher) (*metrics, error) {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: name, Help: help}
	}
	m := &metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts(opts("deliveries_total",
			"Events finished per endpoint: delivered (a 2xx reply) or dead_lettered (410 Gone, attempts or age used up).")),
			[]string{"endpoint", "result"}),
		delivery: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "delivery_seconds",
			Help:    "Time from queueing an event for an endpoint to its end (delivered or dead-lettered), retries included.",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 14), // 10ms to about 4h
		}, []string{"endpoint", "result"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts(opts("attempts_total",
			"POSTs to endpoints, by the status class of the reply (2xx, 3xx, 4xx, 5xx) or timeout or error (no reply).")),
			[]string{"endpoint", "result"}),
		request: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "request_seconds",
			Help:    "Duration of one POST to an endpoint, failed ones included.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 15), // 5ms to about 80s
		}, []string{"endpoint"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts(opts("dead_letters_total",
			"Events written to the webhook dead-letter topic because an endpoint gave up on them.")),
			[]string{"endpoint"}),
		undecodable: prometheus.NewCounter(prometheus.CounterOpts(opts("undecodable_total",
			"Records of the events topic that are not valid events; they go to the dead-letter topic."))),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts(opts("duplicates_total",
			"Copies of events being sent or sent lately to every matching endpoint, not sent again."))),
	}
	// Export every endpoint's series from the start, so rates and alerts
	// see zeros.
	for _, es := range d.endpoints {
		for _, r := range []string{resultDelivered, resultDeadLettered} {
			m.deliveries.WithLabelValues(es.ep.ID, r)
		}
		for _, r := range attemptResults {
			m.attempts.WithLabelValues(es.ep.ID, r)
		}
		m.deadLetters.WithLabelValues(es.ep.ID)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.deliveries, m.delivery, m.attempts, m.request, m.deadLetters,
		m.undecodable, m.duplicates, backlogCollector{d}} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("webhook: register metrics: %w", err)
		}
	}
	return m, nil
}

var (
	backlogDesc = prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "backlog"),
		"Events queued for an endpoint and not finished: waiting, being sent or waiting for a retry.", []string{"endpoint"}, nil)
	oldestDesc = prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "oldest_pending_age_seconds"),
		"Age of the oldest unfinished event of an endpoint's backlog, since it was queued; 0 when the backlog is empty.", []string{"endpoint"}, nil)
)

// backlogCollector reads each endpoint's backlog when scraped.
type backlogCollector struct{ d *Dispatcher }

func (c backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- backlogDesc
	ch <- oldestDesc
}

func (c backlogCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.d.cfg.NowFunc()
	for _, es := range c.d.endpoints {
		n, oldest := es.backlog()
		age := 0.0
		if n > 0 {
			age = max(now.Sub(oldest), 0).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(n), es.ep.ID)
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age, es.ep.ID)
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
