package circuit

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/metricreg"
)

// Values of the probes_total result label.
const (
	probeClaimed = "claimed" // this worker won a probe
	probeExpired = "expired" // ... taking over one whose owner never reported
	probeSuccess = "success" // this worker's probe succeeded and closed the circuit
	probeFailure = "failure" // this worker's probe failed and reopened it
)

var probeResults = []string{probeClaimed, probeExpired, probeSuccess, probeFailure}

// Values of the db_errors_total op label.
const (
	opEnsure  = "ensure"
	opRefresh = "refresh"
	opReport  = "report"
	opClaim   = "claim"
)

var ops = []string{opEnsure, opRefresh, opReport, opClaim}

type metrics struct {
	state       *prometheus.GaugeVec
	health      *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	probes      *prometheus.CounterVec
	dbErrors    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, relays []string) (*metrics, error) {
	set := metricreg.NewSet(reg, "circuit")
	m := &metrics{
		state:       set.GaugeVec("state", "Circuit state per relay as this worker sees it: 1 on the current state (closed, open, half_open), 0 on the others.", "provider", "state"),
		health:      set.GaugeVec("health", "Relay health as this worker sees it: 1 on the current health (healthy, degraded, unavailable), 0 on the others.", "provider", "health"),
		transitions: set.CounterVec("transitions_total", "Circuit state changes this worker wrote, by relay and new state; summed over the fleet, every change once.", "provider", "to"),
		probes:      set.CounterVec("probes_total", "Half-open probes of this worker, by relay and result (claimed, expired = claimed from an owner that never reported, success, failure).", "provider", "result"),
		dbErrors:    set.CounterVec("db_errors_total", "Failed database round trips on postline_circuits, by operation (ensure, refresh, report, claim).", "op"),
	}
	if err := set.Err(); err != nil {
		return nil, err
	}
	// Export every series from the start, so rates and alerts see zeros.
	for _, p := range relays {
		for _, s := range states {
			m.state.WithLabelValues(p, s.String())
			m.transitions.WithLabelValues(p, s.String())
		}
		for _, h := range healths {
			m.health.WithLabelValues(p, h.String())
		}
		for _, r := range probeResults {
			m.probes.WithLabelValues(p, r)
		}
	}
	for _, op := range ops {
		m.dbErrors.WithLabelValues(op)
	}
	return m, nil
}

// show sets the state and health gauges of relay.
func (m *metrics) show(relay string, s State, h Health) {
	for _, st := range states {
		m.state.WithLabelValues(relay, st.String()).Set(b2f(st == s))
	}
	for _, hh := range healths {
		m.health.WithLabelValues(relay, hh.String()).Set(b2f(hh == h))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
