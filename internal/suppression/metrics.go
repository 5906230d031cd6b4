package suppression

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/metricreg"
)

// Operation names, the values of the op label.
const (
	opCheck  = "check"
	opAdd    = "add"
	opRemove = "remove"
	opList   = "list"
	opExport = "export"
	opPurge  = "purge"
	opLift   = "lift"
)

var ops = []string{opCheck, opAdd, opRemove, opList, opExport, opPurge, opLift}

type metrics struct {
	checks    prometheus.Counter
	hits      *prometheus.CounterVec
	dbErrors  *prometheus.CounterVec
	roundTrip *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "postline", "suppression"
	m := &metrics{
		checks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "checks_total",
			Help: "Keys (tenant, stream, address) checked against the suppression lists.",
		}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "hits_total",
			Help: "Checked keys found suppressed, by the reason of the entry that suppressed them.",
		}, []string{"reason"}),
		dbErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "db_errors_total",
			Help: "Failed suppression list round trips, by operation.",
		}, []string{"op"}),
		roundTrip: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "round_trip_seconds",
			Help:    "Duration of suppression list round trips (one per call), by operation.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5ms to ~4s
		}, []string{"op"}),
	}
	if reg != nil {
		var err error
		if m.checks, err = metricreg.Shared(reg, m.checks); err != nil {
			return nil, err
		}
		if m.hits, err = metricreg.Shared(reg, m.hits); err != nil {
			return nil, err
		}
		if m.dbErrors, err = metricreg.Shared(reg, m.dbErrors); err != nil {
			return nil, err
		}
		if m.roundTrip, err = metricreg.Shared(reg, m.roundTrip); err != nil {
			return nil, err
		}
	}
	// Export every series from the start, so rates and alerts see zeros.
	for _, r := range Reasons() {
		m.hits.WithLabelValues(string(r))
	}
	for _, op := range ops {
		m.dbErrors.WithLabelValues(op)
	}
	return m, nil
}
