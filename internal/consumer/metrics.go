package consumer

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	metricsNamespace = "postline"
	metricsSubsystem = "consumer"
)

// Values of the result label of commits_total.
const (
	commitOK    = "ok"
	commitError = "error"
)

type metrics struct {
	messages           *prometheus.CounterVec
	commits            *prometheus.CounterVec
	committedOffset    *prometheus.GaugeVec
	inFlight           prometheus.Gauge
	inFlightBytes      prometheus.Gauge
	budgetWaits        prometheus.Counter
	rebalances         prometheus.Counter
	assignedPartitions prometheus.Gauge
	paused             prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "messages_total",
			Help: "Messages fetched and handed to the caller.",
		}, []string{"topic"}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "commits_total",
			Help: "Offset commit requests by result (ok, error).",
		}, []string{"result"}),
		committedOffset: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "committed_offset",
			Help: "Last offset this member committed per owned partition (the next offset to read).",
		}, []string{"topic", "partition"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "in_flight",
			Help: "Messages handed out (or about to be) and not yet marked done.",
		}),
		inFlightBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "in_flight_bytes",
			Help: "Bytes (key, value and headers) of the messages handed out (or about to be) and not yet marked done; bounded by the in-flight byte budget.",
		}),
		budgetWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "budget_waits_total",
			Help: "Times a partition's fetcher waited because its share of the in-flight byte budget was spent.",
		}),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "rebalances_total",
			Help: "Consumer group generations this member has joined.",
		}),
		assignedPartitions: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "assigned_partitions",
			Help: "Partitions owned in the current generation.",
		}),
		paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Subsystem: metricsSubsystem,
			Name: "paused",
			Help: "1 while the consumer is paused (hands out no messages), else 0.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.messages, m.commits, m.committedOffset, m.inFlight, m.inFlightBytes, m.budgetWaits, m.rebalances, m.assignedPartitions, m.paused} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register consumer metrics: %w", err)
		}
	}
	// Make both results visible from the start so rate() over them works.
	m.commits.WithLabelValues(commitOK)
	m.commits.WithLabelValues(commitError)
	return m, nil
}
