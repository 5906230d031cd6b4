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
	db         metricreg.RoundTrips
	pushes     *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	set := metricreg.NewSet(reg, "templatestore")
	m := &metrics{
		roundTrips: set.CounterVec("round_trips_total", "Database round trips, by operation.", "op"),
		db: set.RoundTrips("Duration of database round trips, by operation.",
			"Failed database round trips, by operation (refusals such as a missing version count too).", ops),
		pushes: set.CounterVec("pushes_total", "Pushed drafts, by result (created: a new version; unchanged: same content as the latest).", "result"),
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("templatestore: register metrics: %w", err)
	}
	// Export every series from the start, so rates and alerts see zeros.
	for _, op := range ops {
		m.roundTrips.WithLabelValues(op)
	}
	for _, r := range []string{"created", "unchanged"} {
		m.pushes.WithLabelValues(r)
	}
	return m, nil
}
