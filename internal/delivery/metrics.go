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
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "postline", "delivery"
	m := &metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "records_total",
			Help: "Records finished by the pipeline, by outcome: sent, failed, dead, duplicate, stale, conflict, rejected.",
		}, []string{"outcome"}),
		reentries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "reentries_total",
			Help: "Records parked and fed back into the pipeline, by cause: busy (leased elsewhere), retry (retryable send failure).",
		}, []string{"cause"}),
		dependencyErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "dependency_errors_total",
			Help: "Failed store or dead-letter calls that the pipeline retried, by operation.",
		}, []string{"op"}),
		sendSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "send_duration_seconds",
			Help:    "Time to hand one mail to the relay, by result: sent, permanent, retryable.",
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
	}
	for _, c := range []prometheus.Collector{m.outcomes, m.reentries, m.dependencyErrors, m.sendSeconds, m.publishToAccept, m.inFlight} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("delivery: register metrics: %w", err)
		}
	}
	return m, nil
}
