package outcome

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/metricreg"
	"github.com/postline/postline/internal/report"
)

type metrics struct {
	reports       *prometheus.CounterVec
	transitions   *prometheus.CounterVec
	suppressed    *prometheus.CounterVec
	confirmations *prometheus.CounterVec
	drained       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "postline", "outcome"
	m := &metrics{
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "reports_total",
			Help: "Delivery reports and complaints taken in, by source (dsn, arf, unstructured, ses, mailgun), kind and result: applied, forged (a token that does not verify: dropped), unknown, stale, delayed.",
		}, []string{"source", "kind", "result"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "transitions_total",
			Help: "Recipients a report moved on, by event type (delivered, bounced, complained) and bounce type (hard, soft, policy; empty for others).",
		}, []string{"type", "bounce_type"}),
		suppressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "suppressions_total",
			Help: "Addresses a report put on a suppression list, by reason (hard_bounce, complaint).",
		}, []string{"reason"}),
		confirmations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "confirmations_total",
			Help: "Mail settled by a report once every recipient was resolved, by confirmation (confirmed, cancelled).",
		}, []string{"confirmation"}),
	}
	drained, err := metricreg.Shared(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Subsystem: sub, Name: "outbox_drained_total",
		Help: "Transitions the outbox drain published because the applier that won them did not (it stopped, or publishing failed).",
	}))
	if err != nil {
		return nil, fmt.Errorf("outcome: register metrics: %w", err)
	}
	m.drained = drained
	// Appliers sharing a registry share the collectors.
	for _, c := range []**prometheus.CounterVec{&m.reports, &m.transitions, &m.suppressed, &m.confirmations} {
		shared, err := metricreg.Shared(reg, *c)
		if err != nil {
			return nil, fmt.Errorf("outcome: register metrics: %w", err)
		}
		*c = shared
	}
	for _, src := range []string{report.SourceDSN, report.SourceARF, report.SourceSES, report.SourceMailgun} {
		m.reports.WithLabelValues(src, string(report.Bounced), ResultApplied)
		m.reports.WithLabelValues(src, string(report.Complained), ResultApplied)
		m.reports.WithLabelValues(src, string(report.Bounced), ResultForged)
	}
	for _, bt := range []string{event.BounceHard, event.BounceSoft, event.BouncePolicy} {
		m.transitions.WithLabelValues(string(event.Bounced), bt)
	}
	m.transitions.WithLabelValues(string(event.Delivered), "")
	m.transitions.WithLabelValues(string(event.Complained), "")
	for _, c := range []string{"confirmed", "cancelled"} {
		m.confirmations.WithLabelValues(c)
	}
	return m, nil
}
