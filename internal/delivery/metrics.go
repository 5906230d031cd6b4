package delivery

import (
	"fmt"
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/metricreg"
	"github.com/postline/postline/job"
)

// The dependency calls the pipeline makes again with backoff, the op label of
// postline_delivery_dependency_errors_total.
const (
	opClaim            = "claim"
	opRecord           = "record"
	opRecordRejected   = "record_rejected"
	opNoteConflicts    = "note_conflicts"
	opDeadLetter       = "dead_letter"
	opRetryPublish     = "retry_publish"
	opCircuitReport    = "circuit_report"
	opRecipients       = "recipients"
	opSuppressionCheck = "suppression_check"
	opSuppress         = "suppress"
	opEvents           = "events"
)

type metrics struct {
	records          *prometheus.CounterVec
	reentries        *prometheus.CounterVec
	dependencyErrors *prometheus.CounterVec
	sendSeconds      *prometheus.HistogramVec
	publishToAccept  prometheus.Histogram
	inFlight         prometheus.Gauge
	attempts         *prometheus.CounterVec
	resends          prometheus.Counter
	backoffDelay     *prometheus.HistogramVec
	handBacks        prometheus.Counter
	paused           prometheus.Gauge
	decreases        *prometheus.CounterVec
	budgetWaits      *prometheus.CounterVec
	panics           *prometheus.CounterVec
	suppressed       prometheus.Counter
	renderFailures   prometheus.Counter
	rcptRefusals     *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	set := metricreg.NewExclusiveSet(reg, "delivery")
	adaptiveSet := set.In("adaptive")
	m := &metrics{
		records: set.CounterVec("records_total",
			"Records finished by the pipeline, by outcome: sent, failed, dead, retried (to a delay tier), duplicate, stale, conflict, rejected.", "outcome"),
		reentries: set.CounterVec("reentries_total",
			"Records parked and fed back into the pipeline, by cause: busy (leased elsewhere), release (handed back: no relay available), throttled (a short throttle waited out in the worker instead of a delay tier).", "cause"),
		dependencyErrors: set.CounterVec("dependency_errors_total",
			"Failed store or dead-letter calls, made again with backoff, by operation.", "op"),
		sendSeconds: set.HistogramVec("send_duration_seconds",
			"Time of one send attempt, by result: sent or the failure class.", prometheus.ExponentialBuckets(0.0005, 2, 16), "result"),
		publishToAccept: set.Histogram("publish_to_accept_seconds",
			"Time from a job's first publication to the relay accepting it.", prometheus.ExponentialBuckets(0.005, 2, 18)),
		inFlight: set.Gauge("in_flight", "Records taken from the consumer and not yet finished."),
		attempts: set.CounterVec("attempts_total",
			"Send attempts by relay and result: sent or the failure class (transient, throttled, permanent, auth, unknown).", "provider", "result"),
		resends: set.Counter("fast_retries_total", "In-attempt resends of transient failures (blips) before a delay tier."),
		backoffDelay: set.HistogramVec("backoff_delay_seconds",
			"Computed wait before the next attempt (the policy's delay, raised by an empty retry budget; before rounding up to a tier), by failure class and the policy's rule.",
			prometheus.ExponentialBuckets(0.125, 2, 18), "class", "reason"),
		handBacks: set.Counter("releases_total",
			"Claimed jobs handed back without charging an attempt because no relay could take them."),
		paused: set.Gauge("paused", "1 while consumption is paused because every relay's circuit is open."),
		decreases: adaptiveSet.CounterVec("decreases_total",
			"Cuts of a relay's send control on throttling, by relay and controller: concurrency (too many connections) or rate (too many messages).", "provider", "controller"),
		budgetWaits: adaptiveSet.CounterVec("budget_waits_total",
			"Retries that found their priority's retry budget empty and wait for its refill.", "priority"),
		panics: set.CounterVec("panics_total",
			"Panics recovered while handling one record, by stage (decoding, sending); each record is dead-lettered as internal_error.", "stage"),
		renderFailures: set.Counter("render_failures_total",
			"Template jobs no version of their template could render, dead-lettered as render_failed."),
		suppressed: set.Counter("suppressed_recipients_total",
			"Recipients dropped from an envelope at claim because they are on a suppression list."),
		rcptRefusals: set.CounterVec("recipient_refusals_total",
			"Recipients a relay refused for good at RCPT while the transaction went on, by relay and bounce type (hard, soft, policy).", "provider", "bounce_type"),
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("delivery: register metrics: %w", err)
	}
	// Export every known series from the start, so rates, dashboards and
	// alerts see zeros instead of nothing before the first event. The
	// values are the ones pipeline.go and send.go pass.
	for _, label := range []string{"sent", "failed", "dead", "retried", "duplicate", "stale", "conflict", "rejected"} {
		m.records.WithLabelValues(label)
	}
	for _, stage := range []string{"decoding", "sending"} {
		m.panics.WithLabelValues(stage)
	}
	for _, cause := range []string{reentryBusy, reentryHandBack, reentryThrottled} {
		m.reentries.WithLabelValues(cause)
	}
	for _, op := range []string{opClaim, opRecord, opRecordRejected, opNoteConflicts, opDeadLetter, opRetryPublish, opCircuitReport,
		opRecipients, opSuppressionCheck, opSuppress, opEvents} {
		m.dependencyErrors.WithLabelValues(op)
	}
	return m, nil
}

// initSeries exports the counters' series that depend on the configuration
// from the start, like newMetrics does for the others: attempts by result
// and send-control cuts per relay, retry budget waits per priority.
func (p *Pipeline) initSeries() {
	for _, relay := range p.relays {
		for _, result := range []string{"sent", string(failure.Transient), string(failure.Throttled), string(failure.Permanent),
			string(failure.Auth), string(failure.Unknown)} {
			p.metrics.attempts.WithLabelValues(relay.Name, result)
		}
		if relay.control != nil {
			for _, controller := range []string{adaptive.ControllerConcurrency, adaptive.ControllerRate} {
				p.metrics.decreases.WithLabelValues(relay.Name, controller)
			}
		}
	}
	if p.budgets != nil {
		for _, prio := range []job.Priority{job.PriorityUrgent, job.PriorityNormal, job.PriorityBulk} {
			p.metrics.budgetWaits.WithLabelValues(string(prio))
		}
	}
}

// registerAdaptiveMetrics exports the retry policy's inputs and the send
// controls' state, read at scrape time.
func (p *Pipeline) registerAdaptiveMetrics(reg prometheus.Registerer) error {
	const ns, sub = "postline", "adaptive"
	gauge := func(name, help string, labels prometheus.Labels, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help, ConstLabels: labels}, f)
	}
	cs := []prometheus.Collector{
		gauge("lag", "The whole consumer group's lag of the jobs topic in records, as the retry policy last saw it.", nil,
			func() float64 { return float64(p.lag()) }),
		gauge("success_ratio_overall", "Rolling success ratio of send attempts over all relays (1 with too few attempts to judge).", nil,
			func() float64 { r, _ := p.window.Overall(p.cfg.NowFunc()); return r }),
	}
	if p.pressure != nil {
		cs = append(cs, gauge("pressure_factor", "Factor in [0.1,1] by which Go runtime pressure (GC pauses, scheduler latency) scales send concurrency.", nil,
			p.pressure.Factor))
	}
	if p.budgets != nil {
		for _, prio := range []job.Priority{job.PriorityUrgent, job.PriorityNormal, job.PriorityBulk} {
			cs = append(cs, gauge("budget_tokens", "Retry budget tokens left per priority (negative: retries already booked ahead of the refill).",
				prometheus.Labels{"priority": string(prio)}, func() float64 { return p.budgets.Tokens(p.cfg.NowFunc(), prio) }))
		}
	}
	for _, relay := range p.relays {
		labels := prometheus.Labels{"provider": relay.Name}
		cs = append(cs, gauge("success_ratio", "Rolling success ratio of send attempts per relay (1 with too few attempts to judge).", labels,
			func() float64 { r, _ := p.window.Rate(p.cfg.NowFunc(), relay.Name); return r }))
		cs = append(cs, gauge("concurrency_limit", "Sends allowed in flight to the relay now: the adaptive limit times the pressure factor, or the pool size without send control.", labels,
			func() float64 {
				relay.mu.Lock()
				defer relay.mu.Unlock()
				return float64(relay.limit())
			}))
		if relay.control == nil {
			continue
		}
		cs = append(cs, gauge("send_rate", "Learned send rate to the relay in sends per second; 0 while the relay has not refused a send for its rate (unpaced).", labels,
			func() float64 { return finite(relay.control.Rate()) }))
		if relay.FleetRate > 0 {
			cs = append(cs, gauge("fleet_rate", "This worker's share of the relay's fleet-wide rate in sends per second.", labels,
				func() float64 { return finite(relay.control.FleetShare()) }))
		}
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("delivery: register metrics: %w", err)
		}
	}
	return nil
}

// finite maps +Inf (no limit) to 0, which dashboards show as "none".
func finite(v float64) float64 {
	if math.IsInf(v, 0) {
		return 0
	}
	return v
}
