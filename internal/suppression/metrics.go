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
	checks prometheus.Counter
	hits   *prometheus.CounterVec
	db     metricreg.RoundTrips
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	set := metricreg.NewSet(reg, "suppression")
	m := &metrics{
		checks: set.Counter("checks_total", "Keys (tenant, stream, address) checked against the suppression lists."),
		hits:   set.CounterVec("hits_total", "Checked keys found suppressed, by the reason of the entry that suppressed them.", "reason"),
		db: set.RoundTrips("Duration of suppression list round trips (one per call), by operation.",
			"Failed suppression list round trips, by operation.", ops),
	}
	if err := set.Err(); err != nil {
		return nil, err
	}
	// Export every series from the start, so rates and alerts see zeros.
	for _, r := range Reasons() {
		m.hits.WithLabelValues(string(r))
	}
	return m, nil
}
