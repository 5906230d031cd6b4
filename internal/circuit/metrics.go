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

func newMetrics(reg prometheus.Registerer, providers []string) (*metrics, error) {
	const ns, sub = "postline", "circuit"
	m := &metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "state",
			Help: "Circuit state per provider as this worker sees it: 1 on the current state (closed, open, half_open), 0 on the others.",
		}, []string{"provider", "state"}),
		health: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "health",
			Help: "Provider health as this worker sees it: 1 on the current health (healthy, degraded, unavailable), 0 on the others.",
		}, []string{"provider", "health"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "transitions_total",
			Help: "Circuit state changes this worker wrote, by provider and new state; summed over the fleet, every change once.",
		}, []string{"provider", "to"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "probes_total",
			Help: "Half-open probes of this worker, by provider and result (claimed, expired = claimed from an owner that never reported, success, failure).",
		}, []string{"provider", "result"}),
		dbErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "db_errors_total",
			Help: "Failed database round trips on postline_circuits, by operation (ensure, refresh, report, claim).",
		}, []string{"op"}),
	}
	if reg != nil {
		var err error
		if m.state, err = metricreg.Shared(reg, m.state); err != nil {
			return nil, err
		}
		if m.health, err = metricreg.Shared(reg, m.health); err != nil {
			return nil, err
		}
		if m.transitions, err = metricreg.Shared(reg, m.transitions); err != nil {
			return nil, err
		}
		if m.probes, err = metricreg.Shared(reg, m.probes); err != nil {
			return nil, err
		}
		if m.dbErrors, err = metricreg.Shared(reg, m.dbErrors); err != nil {
			return nil, err
		}
	}
	// Export every series from the start, so rates and alerts see zeros.
	for _, p := range providers {
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

// show sets the state and health gauges of provider.
func (m *metrics) show(provider string, s State, h Health) {
	for _, st := range states {
		m.state.WithLabelValues(provider, st.String()).Set(b2f(st == s))
	}
	for _, hh := range healths {
		m.health.WithLabelValues(provider, hh.String()).Set(b2f(hh == h))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
