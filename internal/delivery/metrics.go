package delivery

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	outcomes         *prometheus.CounterVec
	reentries        *prometheus.CounterVec
	dependencyErrors *prometheus.CounterVec
	sendSeconds      *prometheus.HistogramVec
	publishToAccept  prometheus.Histogram
	inFlight         prometheus.Gauge
	attempts         *prometheus.CounterVec
	fastRetries      prometheus.Counter
	backoffDelay     *prometheus.HistogramVec
	releases         prometheus.Counter
	paused           prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "postline", "delivery"
	m := &metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "records_total",
			Help: "Records finished by the pipeline, by outcome: sent, failed, dead, retried (to a delay tier), duplicate, stale, conflict, rejected.",
		}, []string{"outcome"}),
		reentries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "reentries_total",
			Help: "Records parked and fed back into the pipeline, by cause: busy (leased elsewhere), release (no provider available).",
		}, []string{"cause"}),
		dependencyErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "dependency_errors_total",
			Help: "Failed store or dead-letter calls that the pipeline retried, by operation.",
		}, []string{"op"}),
		sendSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "send_duration_seconds",
			Help:    "Time of one send attempt, by result: sent or the failure class.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"result"}),
		publishToAccept: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "publish_to_accept_seconds",
			Help:    "Time from a job's first publication to the relay accepting it.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 18),
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "in_flight",
			Help: "Records taken from the consumer and not yet finished.",
		}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "attempts_total",
			Help: "Send attempts by provider and result: sent or the failure class (transient, throttled, permanent, auth, unknown).",
		}, []string{"provider", "result"}),
		fastRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "fast_retries_total",
			Help: "In-process retries of transient failures before a delay tier.",
		}),
		backoffDelay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "backoff_delay_seconds",
			Help:    "Computed wait before the next attempt, by failure class (before rounding up to a tier).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 16),
		}, []string{"class"}),
		releases: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "releases_total",
			Help: "Claimed jobs handed back without charging an attempt because no provider could take them.",
		}),
		paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "paused",
			Help: "1 while consumption is paused because every provider's circuit is open.",
		}),
	}
	for _, c := range []prometheus.Collector{m.outcomes, m.reentries, m.dependencyErrors, m.sendSeconds, m.publishToAccept, m.inFlight,
		m.attempts, m.fastRetries, m.backoffDelay, m.releases, m.paused} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("delivery: register metrics: %w", err)
		}
	}
	return m, nil
}
