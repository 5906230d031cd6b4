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
	// Appliers sharing a registry share the collectors.
	set := metricreg.NewSet(reg, "outcome")
	m := &metrics{
		reports:       set.CounterVec("reports_total", "Delivery reports and complaints taken in, by source (dsn, arf, unstructured, ses, mailgun), kind and result: applied, forged (a token that does not verify: dropped), unknown, stale, delayed.", "source", "kind", "result"),
		transitions:   set.CounterVec("transitions_total", "Recipients a report moved on, by event type (delivered, bounced, complained) and bounce type (hard, soft, policy; empty for others).", "type", "bounce_type"),
		suppressed:    set.CounterVec("suppressions_total", "Addresses a report put on a suppression list, by reason (hard_bounce, complaint).", "reason"),
		confirmations: set.CounterVec("confirmations_total", "Mail settled by a report once every recipient was resolved, by confirmation (confirmed, cancelled).", "confirmation"),
		drained:       set.Counter("outbox_drained_total", "Transitions the outbox drain published because the applier that won them did not (it stopped, or publishing failed)."),
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("outcome: register metrics: %w", err)
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
