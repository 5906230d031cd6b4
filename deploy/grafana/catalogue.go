package grafana

// Metric is one metric a Postline process exports, as the metrics table of
// docs/metrics.md documents it.
type Metric struct {
	Name   string
	Type   MetricType
	Labels []string // in the table's order; job and instance come from Prometheus
	// Process is the process, or pair of processes, whose /metrics serve
	// it: the section of docs/metrics.md the metric is listed under.
	Process Process
}

// MetricType is a Prometheus metric type.
type MetricType string

// The metric types Postline exports.
const (
	Counter   MetricType = "counter"
	Gauge     MetricType = "gauge"
	Histogram MetricType = "histogram"
)

// Process names what serves a metric; each is the title of a section of
// docs/metrics.md.
type Process string

// The processes, in the order docs/metrics.md lists them.
const (
	// WorkerAndScheduler is the worker and the retry scheduler, which the
	// end-to-end tests run together; the scheduler's own metrics are named
	// postline_scheduler_*.
	WorkerAndScheduler Process = "worker and retry-scheduler"
	// BounceReceiver takes in bounces, complaints and provider webhooks.
	BounceReceiver Process = "bounce-receiver"
	// WebhookDispatcher posts events to the customers' endpoints.
	WebhookDispatcher Process = "webhook-dispatcher"
)

// Processes lists every Process in the order of docs/metrics.md.
var Processes = []Process{WorkerAndScheduler, BounceReceiver, WebhookDispatcher}

// metricDef is a catalogue entry before its Process is set.
type metricDef struct {
	name   string
	typ    MetricType
	labels []string
}

// Catalogue returns every postline_* metric the dashboards may use. A test
// keeps it equal to the metrics tables of docs/metrics.md, so a panel cannot
// reference a metric nobody exports or documents.
func Catalogue() []Metric {
	var all []Metric
	for _, group := range []struct {
		process Process
		metrics []metricDef
	}{
		{WorkerAndScheduler, workerAndSchedulerMetrics()},
		{BounceReceiver, bounceReceiverMetrics()},
		{WebhookDispatcher, webhookDispatcherMetrics()},
	} {
		for _, m := range group.metrics {
			all = append(all, Metric{Name: m.name, Type: m.typ, Labels: m.labels, Process: group.process})
		}
	}
	return all
}

// workerAndSchedulerMetrics are the metrics of the worker and the retry
// scheduler.
func workerAndSchedulerMetrics() []metricDef {
	return []metricDef{
		{"postline_consumer_messages_total", Counter, []string{"topic"}},
		{"postline_consumer_commits_total", Counter, []string{"result"}},
		{"postline_consumer_committed_offset", Gauge, []string{"topic", "partition"}},
		{"postline_consumer_in_flight", Gauge, nil},
		{"postline_consumer_in_flight_bytes", Gauge, nil},
		{"postline_consumer_budget_waits_total", Counter, nil},
		{"postline_consumer_rebalances_total", Counter, nil},
		{"postline_consumer_assigned_partitions", Gauge, nil},
		{"postline_consumer_paused", Gauge, nil},
		{"postline_consumer_group_lag", Gauge, []string{"topic", "partition"}},
		{"postline_consumer_oldest_waiting_seconds", Gauge, []string{"topic"}},
		{"postline_consumer_group_members", Gauge, nil},
		{"postline_consumer_lag_refresh_errors_total", Counter, nil},
		{"postline_delivery_records_total", Counter, []string{"outcome"}},
		{"postline_delivery_attempts_total", Counter, []string{"provider", "result"}},
		{"postline_delivery_send_duration_seconds", Histogram, []string{"result"}},
		{"postline_delivery_publish_to_accept_seconds", Histogram, nil},
		{"postline_delivery_fast_retries_total", Counter, nil},
		{"postline_delivery_backoff_delay_seconds", Histogram, []string{"class", "reason"}},
		{"postline_delivery_reentries_total", Counter, []string{"cause"}},
		{"postline_delivery_releases_total", Counter, nil},
		{"postline_delivery_paused", Gauge, nil},
		{"postline_delivery_dependency_errors_total", Counter, []string{"op"}},
		{"postline_delivery_in_flight", Gauge, nil},
		{"postline_delivery_panics_total", Counter, []string{"stage"}},
		{"postline_delivery_suppressed_recipients_total", Counter, nil},
		{"postline_delivery_recipient_refusals_total", Counter, []string{"provider", "bounce_type"}},
		{"postline_events_published_total", Counter, []string{"type"}},
		{"postline_outcome_unconfirmed_total", Counter, nil},
		{"postline_suppression_checks_total", Counter, nil},
		{"postline_suppression_hits_total", Counter, []string{"reason"}},
		{"postline_suppression_db_errors_total", Counter, []string{"op"}},
		{"postline_suppression_round_trip_seconds", Histogram, []string{"op"}},
		{"postline_idempotency_claims_total", Counter, []string{"result"}},
		{"postline_idempotency_cas_conflicts_total", Counter, nil},
		{"postline_idempotency_db_errors_total", Counter, []string{"op"}},
		{"postline_idempotency_round_trip_seconds", Histogram, []string{"op"}},
		{"postline_idempotency_lease_extensions_total", Counter, nil},
		{"postline_sender_dials_total", Counter, []string{"provider", "result"}},
		{"postline_sender_send_duration_seconds", Histogram, []string{"provider", "result"}},
		{"postline_sender_connections_open", Gauge, []string{"provider"}},
		{"postline_sender_ambiguous_data_end_total", Counter, []string{"provider"}},
		{"postline_sender_chained_envelopes_total", Counter, []string{"provider"}},
		{"postline_sender_dkim_total", Counter, []string{"result"}},
		{"postline_delivery_render_failures_total", Counter, nil},
		{"postline_compose_renders_total", Counter, []string{"template", "result"}},
		{"postline_compose_render_seconds", Histogram, nil},
		{"postline_compose_cache_size", Gauge, nil},
		{"postline_templatestore_round_trips_total", Counter, []string{"op"}},
		{"postline_templatestore_db_errors_total", Counter, []string{"op"}},
		{"postline_templatestore_round_trip_seconds", Histogram, []string{"op"}},
		{"postline_templatestore_pushes_total", Counter, []string{"result"}},
		{"postline_templatestore_watcher_reloads_total", Counter, nil},
		{"postline_templatestore_watcher_poll_errors_total", Counter, nil},
		{"postline_circuit_state", Gauge, []string{"provider", "state"}},
		{"postline_circuit_health", Gauge, []string{"provider", "health"}},
		{"postline_circuit_transitions_total", Counter, []string{"provider", "to"}},
		{"postline_circuit_probes_total", Counter, []string{"provider", "result"}},
		{"postline_circuit_db_errors_total", Counter, []string{"op"}},
		{"postline_retry_records_total", Counter, []string{"tier"}},
		{"postline_deadletter_records_total", Counter, []string{"reason"}},
		{"postline_deadletter_shortened_total", Counter, nil},
		{"postline_reaper_republished_total", Counter, nil},
		{"postline_reaper_releases_total", Counter, []string{"result"}},
		{"postline_reaper_takeovers_total", Counter, nil},
		{"postline_reaper_purged_total", Counter, nil},
		{"postline_reaper_suppressions_purged_total", Counter, nil},
		{"postline_reaper_pass_errors_total", Counter, nil},
		{"postline_relay_state_failures_total", Counter, []string{"op"}},
		{"postline_scheduler_lateness_seconds", Histogram, []string{"tier"}},
		{"postline_scheduler_reinjected_total", Counter, []string{"tier"}},
		{"postline_scheduler_waiting", Gauge, []string{"tier"}},
		{"postline_scheduler_invalid_not_before_total", Counter, nil},
		{"postline_scheduler_produce_errors_total", Counter, nil},
		{"postline_scheduler_rejected_total", Counter, nil},
		{"postline_adaptive_lag", Gauge, nil},
		{"postline_adaptive_success_ratio", Gauge, []string{"provider"}},
		{"postline_adaptive_success_ratio_overall", Gauge, nil},
		{"postline_adaptive_concurrency_limit", Gauge, []string{"provider"}},
		{"postline_adaptive_send_rate", Gauge, []string{"provider"}},
		{"postline_adaptive_fleet_rate", Gauge, []string{"provider"}},
		{"postline_adaptive_budget_tokens", Gauge, []string{"priority"}},
		{"postline_adaptive_budget_waits_total", Counter, []string{"priority"}},
		{"postline_adaptive_decreases_total", Counter, []string{"provider", "controller"}},
		{"postline_adaptive_pressure_factor", Gauge, nil},
	}
}

// bounceReceiverMetrics are the metrics of the bounce-receiver: its SMTP
// server for returned mail and feedback reports, the provider webhooks, the
// outcome store that applies what both read, and the one-click
// unsubscribes.
func bounceReceiverMetrics() []metricDef {
	return []metricDef{
		{"postline_inbound_messages_total", Counter, []string{"result"}},
		{"postline_inbound_reports_total", Counter, []string{"kind", "source"}},
		{"postline_inbound_recipients_total", Counter, []string{"result"}},
		{"postline_inbound_parse_seconds", Histogram, nil},
		{"postline_inbound_messages_cut_total", Counter, nil},
		{"postline_admission_open", Gauge, []string{"limit"}},
		{"postline_admission_refused_total", Counter, []string{"limit", "reason"}},
		{"postline_providerhook_requests_total", Counter, []string{"provider", "result"}},
		{"postline_providerhook_reports_total", Counter, []string{"provider", "kind"}},
		{"postline_outcome_reports_total", Counter, []string{"source", "kind", "result"}},
		{"postline_outcome_transitions_total", Counter, []string{"type", "bounce_type"}},
		{"postline_outcome_suppressions_total", Counter, []string{"reason"}},
		{"postline_outcome_confirmations_total", Counter, []string{"confirmation"}},
		{"postline_outcome_outbox_drained_total", Counter, nil},
		{"postline_unsubscribe_requests_total", Counter, []string{"channel", "result"}},
	}
}

// webhookDispatcherMetrics are the metrics of the webhook-dispatcher.
func webhookDispatcherMetrics() []metricDef {
	return []metricDef{
		{"postline_webhook_deliveries_total", Counter, []string{"endpoint", "result"}},
		{"postline_webhook_delivery_seconds", Histogram, []string{"endpoint", "result"}},
		{"postline_webhook_attempts_total", Counter, []string{"endpoint", "result"}},
		{"postline_webhook_request_seconds", Histogram, []string{"endpoint"}},
		{"postline_webhook_queued_total", Counter, []string{"endpoint"}},
		{"postline_webhook_dead_letters_total", Counter, []string{"endpoint", "reason"}},
		{"postline_webhook_endpoints_disabled_total", Counter, []string{"endpoint"}},
		{"postline_webhook_undecodable_total", Counter, []string{"endpoint"}},
		{"postline_webhook_duplicates_total", Counter, []string{"endpoint"}},
		{"postline_webhook_backlog", Gauge, []string{"endpoint"}},
		{"postline_webhook_oldest_pending_age_seconds", Gauge, []string{"endpoint"}},
		{"postline_webhook_endpoint_failing", Gauge, []string{"endpoint"}},
		{"postline_webhook_endpoint_disabled", Gauge, []string{"endpoint"}},
	}
}

// ProcessOf returns the Process that serves a series name: a catalogued
// metric, or the _bucket, _sum or _count series of a catalogued histogram.
// Tests that run only some processes use it to pick the queries they can
// prove.
func ProcessOf(series string) (Process, bool) {
	for _, m := range Catalogue() {
		if m.Name == series {
			return m.Process, true
		}
		if m.Type != Histogram {
			continue
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if series == m.Name+suffix {
				return m.Process, true
			}
		}
	}
	return "", false
}
