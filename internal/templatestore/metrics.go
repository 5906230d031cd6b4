package templatestore

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/metricreg"
)

// Operation names, the values of the op label.
const (
	opPush          = "push"
	opGet           = "get"
	opLatest        = "latest"
	opList          = "list"
	opVersions      = "versions"
	opSetLabel      = "set_label"
	opClearLabel    = "clear_label"
	opRollback      = "rollback"
	opLabels        = "labels"
	opChanges       = "changes"
	opLabelsVersion = "labels_version"
	opActivate      = "activate"
	opHistory       = "history"
)

var ops = []string{opPush, opGet, opLatest, opList, opVersions, opSetLabel, opClearLabel, opRollback,
	opLabels, opChanges, opLabelsVersion, opActivate, opHistory}

type metrics struct {
	roundTrips *prometheus.CounterVec
	dbErrors   *prometheus.CounterVec
	roundTrip  *prometheus.HistogramVec
	pushes     *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "postline", "templatestore"
	m := &metrics{
		roundTrips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "round_trips_total",
			Help: "Database round trips, by operation.",
		}, []string{"op"}),
		dbErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "db_errors_total",
			Help: "Failed database round trips, by operation (refusals such as a missing version count too).",
		}, []string{"op"}),
		roundTrip: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "round_trip_seconds",
			Help:    "Duration of database round trips, by operation.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5ms to ~4s
		}, []string{"op"}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "pushes_total",
			Help: "Pushed drafts, by result (created: a new version; unchanged: same content as the latest).",
		}, []string{"result"}),
	}
	if reg != nil {
		var err error
		if m.roundTrips, err = metricreg.Shared(reg, m.roundTrips); err != nil {
			return nil, fmt.Errorf("templatestore: register metrics: %w", err)
		}
		if m.dbErrors, err = metricreg.Shared(reg, m.dbErrors); err != nil {
			return nil, fmt.Errorf("templatestore: register metrics: %w", err)
		}
		if m.roundTrip, err = metricreg.Shared(reg, m.roundTrip); err != nil {
			return nil, fmt.Errorf("templatestore: register metrics: %w", err)
		}
		if m.pushes, err = metricreg.Shared(reg, m.pushes); err != nil {
			return nil, fmt.Errorf("templatestore: register metrics: %w", err)
		}
	}
	// Export every series from the start, so rates and alerts see zeros.
	for _, op := range ops {
		m.roundTrips.WithLabelValues(op)
		m.dbErrors.WithLabelValues(op)
	}
	for _, r := range []string{"created", "unchanged"} {
		m.pushes.WithLabelValues(r)
	}
	return m, nil
}
