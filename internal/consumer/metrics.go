package consumer

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/metricreg"
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
	set := metricreg.NewExclusiveSet(reg, metricsSubsystem)
	m := &metrics{
		messages:           set.CounterVec("messages_total", "Messages fetched and handed to the caller.", "topic"),
		commits:            set.CounterVec("commits_total", "Offset commit requests by result (ok, error).", "result"),
		committedOffset:    set.GaugeVec("committed_offset", "Last offset this member committed per owned partition (the next offset to read).", "topic", "partition"),
		inFlight:           set.Gauge("in_flight", "Messages handed out (or about to be) and not yet marked done."),
		inFlightBytes:      set.Gauge("in_flight_bytes", "Bytes (key, value and headers) of the messages handed out (or about to be) and not yet marked done; bounded by the in-flight byte budget."),
		budgetWaits:        set.Counter("budget_waits_total", "Times a partition's fetcher waited because its share of the in-flight byte budget was spent."),
		rebalances:         set.Counter("rebalances_total", "Consumer group generations this member has joined."),
		assignedPartitions: set.Gauge("assigned_partitions", "Partitions owned in the current generation."),
		paused:             set.Gauge("paused", "1 while the consumer is paused (hands out no messages), else 0."),
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("register consumer metrics: %w", err)
	}
	// Make both results visible from the start so rate() over them works.
	m.commits.WithLabelValues(commitOK)
	m.commits.WithLabelValues(commitError)
	return m, nil
}
