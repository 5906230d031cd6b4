package grafana

// Metric is one metric Postline's worker or retry scheduler exports, as the
// README's metrics table documents it.
type Metric struct {
	Name   string
	Type   MetricType
	Labels []string // in README order; job and instance come from Prometheus
}

// MetricType is a Prometheus metric type.
type MetricType string

// The metric types Postline exports.
const (
	Counter   MetricType = "counter"
	Gauge     MetricType = "gauge"
	Histogram MetricType = "histogram"
)

// Catalogue returns every postline_* metric the dashboards may use. A test
// keeps it equal to the README's metrics table, so a panel cannot reference
// a metric nobody exports or documents.
func Catalogue() []Metric {
	return []Metric{
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
		{"postline_idempotency_claims_total", Counter, []string{"result"}},
		{"postline_idempotency_cas_conflicts_total", Counter, nil},
		{"postline_idempotency_db_errors_total", Counter, []string{"op"}},
		{"postline_idempotency_round_trip_seconds", Histogram, []string{"op"}},
		{"postline_idempotency_lease_extensions_total", Counter, nil},
		{"postline_sender_dials_total", Counter, []string{"provider", "result"}},
		{"postline_sender_send_duration_seconds", Histogram, []string{"provider", "result"}},
		{"postline_sender_connections_open", Gauge, []string{"provider"}},
		{"postline_sender_ambiguous_data_end_total", Counter, []string{"provider"}},
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
