package grafana

import "strings"

// This file holds what the dashboards show. Each description says what the
// panel means, then what to do; the panel tables of docs/operations/dashboards.md
// are built from them, so keep them complete sentences.

// dashboardSpecs lists the dashboards in file order.
func dashboardSpecs() []dashboardSpec {
	return []dashboardSpec{overviewDashboard(), relaysDashboard(), outcomesDashboard()}
}

func overviewDashboard() dashboardSpec {
	return dashboardSpec{
		uid:   "postline-overview",
		title: "Postline overview",
		description: "Is mail flowing? Throughput, success, latency, backlog, failures and the fleet of " +
			"Postline workers. Relay details, limits and retries are on \"Postline relays & retries\".",
		tags: []string{"postline"},
		rows: []rowSpec{
			overviewDeliveryRow(),
			overviewBacklogRow(),
			overviewFailuresRow(),
			overviewFleetRow(),
			overviewTemplatesRow(),
		},
	}
}

func overviewDeliveryRow() rowSpec {
	return rowSpec{title: "Delivery", panels: []panelSpec{
		{
			title: "Throughput by result",
			description: "Records the workers finished per second, by outcome: sent, retried (to a delay tier), dead " +
				"(out of attempts, too old or invalid), failed (refused permanently), duplicate and stale " +
				"(already handled), conflict (Message-ID reused for another payload), rejected (not a valid " +
				"job). What to do: sent falling while retried or dead rise points at a relay: look at " +
				"success ratio and circuit state. Rejected or conflict above zero means a producer " +
				"publishes bad jobs: read the dead letters' reasons.",
			unit: unitPerSecond, stacked: true,
			targets: []target{{
				expr:   "sum by (outcome) (" + rate("postline_delivery_records_total") + ")",
				legend: "{{outcome}}",
			}},
		},
		{
			title: "Success ratio per provider",
			description: "Share of send attempts each relay accepted over the rate interval, and over all relays. " +
				"What to do: a relay below about 0.9 is failing or throttling: check its circuit and " +
				"attempts on the relays dashboard; all relays low points at the mail or the network.",
			unit: unitRatio,
			targets: []target{
				{
					expr: "sum by (provider) (" + rate("postline_delivery_attempts_total", `result="sent"`) + ")" +
						" / sum by (provider) (" + rate("postline_delivery_attempts_total") + ")",
					legend: "{{provider}}",
				},
				{
					expr: "sum(" + rate("postline_delivery_attempts_total", `result="sent"`) + ")" +
						" / sum(" + rate("postline_delivery_attempts_total") + ")",
					legend: "all relays",
				},
			},
		},
		{
			title: "Send latency p50/p99",
			description: "Time of one send attempt (dial excluded on a reused session), median and 99th percentile " +
				"over all relays. What to do: a p99 nearing the send timeout means a slow relay and falling " +
				"throughput; compare relays on \"Relay send latency\".",
			unit: unitSeconds,
			targets: []target{
				{expr: quantile("0.5", "postline_delivery_send_duration_seconds"), legend: "p50"},
				{expr: quantile("0.99", "postline_delivery_send_duration_seconds"), legend: "p99"},
			},
		},
		{
			title: "Concurrency limit and in flight",
			description: "Sends the adaptive limit allows in flight per relay, summed over the workers, and the " +
				"records inside the pipelines. What to do: in flight pinned at the limit while lag grows " +
				"means the relays bound throughput: raise their capacity or limits.",
			unit: unitCount,
			targets: []target{
				{expr: "sum by (provider) (" + sel("postline_adaptive_concurrency_limit") + ")", legend: "limit {{provider}}"},
				{expr: "sum(" + sel("postline_delivery_in_flight") + ")", legend: "in flight"},
			},
		},
	}}
}

func overviewBacklogRow() rowSpec {
	return rowSpec{title: "Backlog", panels: []panelSpec{
		{
			title: "Consumer lag per partition",
			description: "Records of each partition the group has not committed past, the maximum over workers (each " +
				"reports the whole group's lag). What to do: one partition far above the others means a hot " +
				"key or a stuck owner: check rebalances and its worker; all growing means the fleet is too " +
				"slow: see \"Age of the oldest waiting job\".",
			unit: unitCount, width: 8,
			targets: []target{{
				expr:   "max by (topic, partition) (" + sel("postline_consumer_group_lag") + ")",
				legend: "{{topic}}/{{partition}}",
			}},
		},
		{
			title: "Consumer lag total",
			description: "Records the group has not committed past, summed over each topic's partitions. What to do: " +
				"lag that keeps growing means jobs arrive faster than they are sent: add workers up to the " +
				"partition count if the relays have room, else the relay is the bottleneck.",
			unit: unitCount, width: 8,
			targets: []target{{
				expr:   "sum by (topic) (max by (topic, partition) (" + sel("postline_consumer_group_lag") + "))",
				legend: "{{topic}}",
			}},
		},
		{
			title: "Age of the oldest waiting job",
			description: "Oldest waiting: age of the oldest job the worker group has not finished (0 when caught " +
				"up). p99 publish to accept: first publication to relay acceptance, retries included. What " +
				"to do: an oldest-waiting age past the delivery SLO means late mail: scale workers or relay " +
				"capacity; a rising p99 while the oldest waiting job is young means retries make mail late: " +
				"look at retries and circuit state.",
			unit: unitSeconds, width: 8,
			targets: []target{
				{
					expr:   "max by (topic) (" + sel("postline_consumer_oldest_waiting_seconds") + ")",
					legend: "oldest waiting: {{topic}}",
				},
				{expr: quantile("0.99", "postline_delivery_publish_to_accept_seconds"), legend: "p99 publish to accept"},
			},
		},
	}}
}

func overviewFailuresRow() rowSpec {
	return rowSpec{title: "Failures", panels: []panelSpec{
		{
			title: "Retries per tier",
			description: "Retry copies written to each delay tier per second. What to do: a surge in the short tiers " +
				"is usually a blip; growth in the long tiers means jobs keep failing: check success ratio, " +
				"circuit state and dead letters.",
			unit: unitPerSecond, stacked: true, width: 8,
			targets: []target{{
				expr:   "sum by (tier) (" + rate("postline_retry_records_total") + ")",
				legend: "{{tier}}",
			}},
		},
		{
			title: "Dead letters by reason",
			description: "Records written to the dead-letter topic per second, by reason: smtp_permanent (a relay " +
				"refused the mail), max_attempts, max_age, message_id_conflict, or a validation reason. " +
				"What to do: permanent refusals and invalid jobs need the producer fixed; max_attempts or " +
				"max_age after an outage can be replayed with postctl once the relay is back.",
			unit: unitPerSecond, stacked: true, width: 8,
			targets: []target{{
				expr:   "sum by (reason) (" + rate("postline_deadletter_records_total") + ")",
				legend: "{{reason}}",
			}},
		},
		{
			title: "Duplicates and optimistic-lock conflicts",
			description: "Claims the idempotency store turned down, by result (duplicate: already sent; stale: an " +
				"older copy; busy: another worker holds the lease; conflict: same Message-ID, other " +
				"payload), and outcome writes that lost their compare-and-set. What to do: duplicates after " +
				"a rebalance or replay are harmless; persistent busy or lost compare-and-sets mean leases " +
				"expire before sends finish: raise the lease or look for slow relays; conflicts need the " +
				"producer fixed.",
			unit: unitPerSecond, width: 8,
			targets: []target{
				{
					expr:   "sum by (result) (" + rate("postline_idempotency_claims_total", `result=~"duplicate|stale|busy|conflict"`) + ")",
					legend: "claim {{result}}",
				},
				{expr: "sum(" + rate("postline_idempotency_cas_conflicts_total") + ")", legend: "lost compare-and-set"},
			},
		},
		{
			kind:  stateTimeline,
			title: "Circuit state per provider",
			description: "Each relay's circuit breaker, the worst state any worker reports: closed (sending), " +
				"half-open (probing) or open (no sends; jobs wait or fail over). What to do: open for more " +
				"than a few minutes means the relay is down or refuses us: check its status and " +
				"credentials; with every circuit open, consumption pauses and lag grows.",
			unit: unitNone, width: 24,
			targets: []target{{expr: circuitStateExpr(), legend: "{{provider}}"}},
		},
	}}
}

func overviewFleetRow() rowSpec {
	return rowSpec{title: "Fleet", panels: []panelSpec{
		{
			title: "Worker count",
			description: "Live members of the consumer group, and the scraped targets up, per job. What to do: fewer " +
				"members than workers run means some crash-loop or cannot reach Kafka; members beyond the " +
				"partition count sit idle; a target down cannot be scraped.",
			unit: unitCount,
			targets: []target{
				{expr: "max(" + sel("postline_consumer_group_members") + ")", legend: "consumer group members"},
				{expr: "count by (job) (" + sel("up") + " == 1)", legend: "{{job}} up"},
			},
		},
		{
			title: "Partitions per worker",
			description: "Partitions of mail.jobs each worker owns, and rebalances per second. What to do: frequent " +
				"rebalances stall consumption: look for restarts or missed heartbeats; a worker with no " +
				"partitions is idle.",
			unit: unitCount,
			targets: []target{
				{expr: "sum by (instance) (" + sel("postline_consumer_assigned_partitions") + ")", legend: "{{instance}}"},
				{expr: "sum(" + rate("postline_consumer_rebalances_total") + ")", legend: "rebalances/s"},
			},
		},
	}}
}

func overviewTemplatesRow() rowSpec {
	return rowSpec{title: "Templates", panels: []panelSpec{
		{
			title: "Template compositions by result",
			description: "Templated mails composed per second, by result: rendered (the version the labels chose), " +
				"fallback (a later version rendered because the chosen one failed), builtin (the built-in " +
				"template of that name rendered), failed (nothing rendered, or the store could not be " +
				"read). What to do: fallback or builtin above zero means a stored version fails to render " +
				"(the rows' template_why names it): end the canary or run postctl template rollback, then " +
				"fix and push it. Failed dead-letters mail as render_failed (replay once fixed) or, with " +
				"the store unreachable, retries it.",
			unit: unitPerSecond, stacked: true,
			targets: []target{{
				expr:   "sum by (result) (" + rate("postline_compose_renders_total") + ")",
				legend: "{{result}}",
			}},
		},
		{
			title: "Template compose time p50/p99",
			description: "Time to compose one templated mail (fetching an uncached version, compiling, checking the " +
				"data against its schema, rendering), median and 99th percentile. What to do: a p99 far " +
				"above the p50 means versions keep being fetched and compiled: many versions in use, or a " +
				"slow store (postline_templatestore_round_trip_seconds); a p50 rising with mail size means " +
				"heavier templates.",
			unit: unitSeconds,
			targets: []target{
				{expr: quantile("0.5", "postline_compose_render_seconds"), legend: "p50"},
				{expr: quantile("0.99", "postline_compose_render_seconds"), legend: "p99"},
			},
		},
	}}
}

func relaysDashboard() dashboardSpec {
	return dashboardSpec{
		uid:   "postline-relays",
		title: "Postline relays & retries",
		description: "Per-relay detail: attempts, latency, connections and circuits; the adaptive limits " +
			"(AIMD concurrency, learned rate, fleet share, retry budget, runtime pressure); retries, the " +
			"retry scheduler and the dependencies (Postgres, Kafka).",
		tags: []string{"postline"},
		rows: []rowSpec{
			relaysRelaysRow(),
			relaysConcurrencyLimitsRow(),
			relaysRetriesAndSchedulerRow(),
			relaysDependenciesRow(),
		},
	}
}

func relaysRelaysRow() rowSpec {
	return rowSpec{title: "Relays", panels: []panelSpec{
		{
			title: "Attempts by relay and result",
			description: "Send attempts per second per relay, by result: sent or the failure class. What to do: " +
				"throttled means slow down; auth, wrong credentials; permanent, the relay refuses the mail " +
				"itself; persistent transient, the relay is unhealthy.",
			unit: unitPerSecond, stacked: true,
			targets: []target{{
				expr:   "sum by (provider, result) (" + rate("postline_delivery_attempts_total") + ")",
				legend: "{{provider}} {{result}}",
			}},
		},
		{
			title: "Rolling success ratio (retry policy)",
			description: "The success ratio the retry policy decides with: 30 s rolling, per relay and overall, " +
				"averaged over the workers. What to do: when it falls the policy backs off harder; if it " +
				"stays low, check the relay and its circuit.",
			unit: unitRatio,
			targets: []target{
				{expr: "avg by (provider) (" + sel("postline_adaptive_success_ratio") + ")", legend: "{{provider}}"},
				{expr: "avg(" + sel("postline_adaptive_success_ratio_overall") + ")", legend: "all relays"},
			},
		},
		{
			title: "Relay send latency",
			description: "Time of one send per relay, dial included, median and 99th percentile. What to do: a relay " +
				"much slower than the others holds connections longer and lowers its useful concurrency; " +
				"ask its operator or move traffic with the relay priorities.",
			unit: unitSeconds,
			targets: []target{
				{expr: quantile("0.5", "postline_sender_send_duration_seconds", "provider"), legend: "p50 {{provider}}"},
				{expr: quantile("0.99", "postline_sender_send_duration_seconds", "provider"), legend: "p99 {{provider}}"},
			},
		},
		{
			title: "SMTP connections and dials",
			description: "Open SMTP connections per relay, and new connections per second by result. What to do: a " +
				"high dial rate with few open connections means sessions are dropped (relay limits or idle " +
				"timeouts); dial errors mean the relay is unreachable.",
			unit: unitCount,
			targets: []target{
				{expr: "sum by (provider) (" + sel("postline_sender_connections_open") + ")", legend: "open {{provider}}"},
				{expr: "sum by (provider, result) (" + rate("postline_sender_dials_total") + ")", legend: "dials/s {{provider}} {{result}}"},
			},
		},
		{
			title: "Circuit transitions and probes",
			description: "Circuit state changes per second by relay and new state, and half-open probes by result. " +
				"What to do: flapping means the relay fails intermittently: look at its attempts by result; " +
				"failed probes keep it open.",
			unit: unitPerSecond, width: 24,
			targets: []target{
				{expr: "sum by (provider, to) (" + rate("postline_circuit_transitions_total") + ")", legend: "{{provider}} to {{to}}"},
				{expr: "sum by (provider, result) (" + rate("postline_circuit_probes_total") + ")", legend: "{{provider}} probe {{result}}"},
			},
		},
	}}
}

func relaysConcurrencyLimitsRow() rowSpec {
	return rowSpec{title: "Concurrency limits", panels: []panelSpec{
		{
			title: "AIMD concurrency limit per relay",
			description: "Sends each relay may have in flight, summed over the workers: the AIMD limit times the " +
				"runtime pressure factor. What to do: stuck at its floor, the relay keeps throttling: lower " +
				"the load or ask for a higher quota; at its ceiling with lag growing, raise the configured " +
				"maximum.",
			unit: unitCount, width: 8,
			targets: []target{{
				expr:   "sum by (provider) (" + sel("postline_adaptive_concurrency_limit") + ")",
				legend: "{{provider}}",
			}},
		},
		{
			title: "Learned send rate per relay",
			description: "Sends per second the pacer learned each relay accepts, summed over the workers (0: " +
				"unpaced), next to the attempts made. What to do: attempts pressed against the learned rate " +
				"with lag growing means the relay's rate is the bottleneck; more workers will not help.",
			unit: unitPerSecond, width: 8,
			targets: []target{
				{expr: "sum by (provider) (" + sel("postline_adaptive_send_rate") + ")", legend: "learned {{provider}}"},
				{expr: "sum by (provider) (" + rate("postline_delivery_attempts_total") + ")", legend: "attempts {{provider}}"},
			},
		},
		{
			title: "Fleet rate share per relay",
			description: "Workers' shares of a relay's fleet rate (POSTLINE_SMTP_RATE), summed; no series without " +
				"one. What to do: the sum should equal the configured rate; far off, workers disagree on " +
				"the fleet size: check the worker count.",
			unit: unitPerSecond, width: 8,
			targets: []target{{
				expr:   "sum by (provider) (" + sel("postline_adaptive_fleet_rate") + ")",
				legend: "{{provider}}",
			}},
		},
		{
			title: "Throttling cuts",
			description: "Cuts per second of the concurrency limit or learned rate because a relay throttled us, by " +
				"relay and controller. What to do: steady cuts mean the relay's quota is below the load: " +
				"ask for more or add a relay.",
			unit: unitPerSecond, width: 8,
			targets: []target{{
				expr:   "sum by (provider, controller) (" + rate("postline_adaptive_decreases_total") + ")",
				legend: "{{provider}} {{controller}}",
			}},
		},
		{
			title: "Retry budget",
			description: "Retry budget tokens left per priority on the emptiest worker (negative: booked ahead), and " +
				"retries per second waiting for the refill. What to do: an empty budget caps retries to " +
				"protect the relays, bulk first; if urgent runs dry, fix the failing relay rather than " +
				"raise the budget.",
			unit: unitCount, width: 8,
			targets: []target{
				{expr: "min by (priority) (" + sel("postline_adaptive_budget_tokens") + ")", legend: "tokens {{priority}}"},
				{expr: "sum by (priority) (" + rate("postline_adaptive_budget_waits_total") + ")", legend: "waits/s {{priority}}"},
			},
		},
		{
			title: "Runtime pressure factor",
			description: "Per worker, the factor (0.1 to 1) by which runtime pressure scales the concurrency limits; " +
				"1 means none. What to do: below 1 for long means the worker lacks memory or CPU: give it " +
				"more or run more workers.",
			unit: unitRatio, width: 8,
			targets: []target{{
				expr:   "min by (instance) (" + sel("postline_adaptive_pressure_factor") + ")",
				legend: "{{instance}}",
			}},
		},
	}}
}

func relaysRetriesAndSchedulerRow() rowSpec {
	return rowSpec{title: "Retries and scheduler", panels: []panelSpec{
		{
			title: "Scheduler lateness",
			description: "How much later than planned (not-before plus jitter) the scheduler re-injected copies, " +
				"median and 99th percentile per tier. What to do: lateness beyond a few seconds means the " +
				"scheduler is behind: check its produce errors and lag, or run a second replica.",
			unit: unitSeconds,
			targets: []target{
				{expr: quantile("0.5", "postline_scheduler_lateness_seconds", "tier"), legend: "p50 {{tier}}"},
				{expr: quantile("0.99", "postline_scheduler_lateness_seconds", "tier"), legend: "p99 {{tier}}"},
			},
		},
		{
			title: "Scheduler waiting and re-injected",
			description: "Copies the scheduler holds until their time, per tier, and copies re-injected per second. " +
				"What to do: waiting grows in a relay outage and drains after; growing while re-injection " +
				"stays at zero means the scheduler cannot write to mail.jobs.",
			unit: unitCount,
			targets: []target{
				{expr: "sum by (tier) (" + sel("postline_scheduler_waiting") + ")", legend: "waiting {{tier}}"},
				{expr: "sum by (tier) (" + rate("postline_scheduler_reinjected_total") + ")", legend: "re-injected/s {{tier}}"},
			},
		},
		{
			title: "Backoff delay by class",
			description: "The wait the retry policy computed before the next attempt (before rounding up to a tier), " +
				"median and 99th percentile per failure class. What to do: throttled delays at their cap " +
				"mean the relay keeps refusing: check its quota.",
			unit: unitSeconds,
			targets: []target{
				{expr: quantile("0.5", "postline_delivery_backoff_delay_seconds", "class"), legend: "p50 {{class}}"},
				{expr: quantile("0.99", "postline_delivery_backoff_delay_seconds", "class"), legend: "p99 {{class}}"},
			},
		},
		{
			title: "Re-entries, releases and fast retries",
			description: "Records parked and fed back (busy: another worker holds the lease; release: no relay could " +
				"take it), claimed jobs handed back uncharged, and in-process resends of short blips, per " +
				"second. What to do: persistent releases mean every relay is closed or saturated: look at " +
				"circuit state and the concurrency limits.",
			unit: unitPerSecond,
			targets: []target{
				{expr: "sum by (cause) (" + rate("postline_delivery_reentries_total") + ")", legend: "re-entry {{cause}}"},
				{expr: "sum(" + rate("postline_delivery_releases_total") + ")", legend: "releases"},
				{expr: "sum(" + rate("postline_delivery_fast_retries_total") + ")", legend: "fast retries"},
			},
		},
	}}
}

func relaysDependenciesRow() rowSpec {
	return rowSpec{title: "Dependencies", panels: []panelSpec{
		{
			title: "Dependency errors",
			description: "Failed calls to the workers' dependencies per second: pipeline store, dead-letter, retry " +
				"and circuit calls (retried), idempotency and circuit Postgres calls, lag refreshes, reaper " +
				"passes, scheduler writes, offset commits. What to do: a sustained rate means Postgres or " +
				"Kafka is failing or unreachable: check them; jobs wait rather than get lost, so lag grows.",
			unit: unitPerSecond, width: 24,
			targets: []target{
				{expr: "sum by (op) (" + rate("postline_delivery_dependency_errors_total") + ")", legend: "pipeline {{op}}"},
				{expr: "sum by (op) (" + rate("postline_idempotency_db_errors_total") + ")", legend: "idempotency {{op}}"},
				{expr: "sum by (op) (" + rate("postline_circuit_db_errors_total") + ")", legend: "circuit {{op}}"},
				{expr: "sum(" + rate("postline_consumer_lag_refresh_errors_total") + ")", legend: "lag refresh"},
				{expr: "sum(" + rate("postline_reaper_pass_errors_total") + ")", legend: "reaper pass"},
				{expr: "sum(" + rate("postline_scheduler_produce_errors_total") + ")", legend: "scheduler produce"},
				{expr: "sum(" + rate("postline_scheduler_invalid_not_before_total") + ")", legend: "scheduler invalid not-before"},
				{expr: "sum(" + rate("postline_consumer_commits_total", `result="error"`) + ")", legend: "offset commit"},
			},
		},
		{
			title: "Postgres round trip",
			description: "Time of one idempotency store round trip per operation (a batch), median and 99th " +
				"percentile. What to do: a rising p99 slows every record: check Postgres load, locks and " +
				"connection limits.",
			unit: unitSeconds, width: 8,
			targets: []target{
				{expr: quantile("0.5", "postline_idempotency_round_trip_seconds", "op"), legend: "p50 {{op}}"},
				{expr: quantile("0.99", "postline_idempotency_round_trip_seconds", "op"), legend: "p99 {{op}}"},
			},
		},
		{
			title: "Reaper",
			description: "Stuck replayed jobs (claimed by a worker that died before recording) the reaper " +
				"re-published per second, and their rows handed back by result; other crashed claims Kafka " +
				"redelivers. What to do: a steady rate means workers die mid-send (OOM kills, hard " +
				"restarts): check their logs and shutdown grace period; lost means another worker took the " +
				"row first, harmless.",
			unit: unitPerSecond, width: 8,
			targets: []target{
				{expr: "sum(" + rate("postline_reaper_republished_total") + ")", legend: "re-published"},
				{expr: "sum by (result) (" + rate("postline_reaper_releases_total") + ")", legend: "release {{result}}"},
			},
		},
		{
			title: "Pauses and offsets",
			description: "Workers whose consumption is paused (by the consumer, or because every circuit is open), " +
				"and offset commits per second. What to do: paused with open circuits recovers when a relay " +
				"does; paused with closed circuits means the pipeline is full: look at the concurrency " +
				"limits.",
			unit: unitCount, width: 8,
			targets: []target{
				{expr: "sum(" + sel("postline_consumer_paused") + ")", legend: "consumer paused"},
				{expr: "sum(" + sel("postline_delivery_paused") + ")", legend: "pipeline paused"},
				{expr: "sum by (result) (" + rate("postline_consumer_commits_total") + ")", legend: "commits/s {{result}}"},
			},
		},
	}}
}

// Thresholds the outcomes dashboard draws; the alert rules use the same.
const (
	// Mailbox providers start filtering a sender whose complaint rate
	// passes 0.1 % and block it above 0.3 %.
	complaintRateWarning  = 0.001
	complaintRateCritical = 0.003
	hardBounceRateWarning = 0.05
	// webhookOldestPendingMax is how long an event may wait for its
	// endpoint before the backlog alert fires.
	webhookOldestPendingMax = 600
)

// reputationWindow is the window of the bounce and complaint rates: reports
// come minutes to hours after the relay accepted the mail, so a short window
// would divide one hour's reports by another minute's sends.
const reputationWindow = "1h"

// perAccepted divides a rate of recipient transitions, grouped by the given
// labels, by the rate of recipients the relays accepted over
// reputationWindow. The transitions come from the bounce-receiver and the
// acceptances from the workers, so both sides are fleet-wide: a job or
// instance filter would leave one side empty.
func perAccepted(numerator string, by ...string) string {
	accepted := "sum(" + fleetRateOver(reputationWindow, "postline_events_published_total", `type="accepted"`) + ")"
	if len(by) == 0 {
		return "sum(" + numerator + ") / " + accepted
	}
	grouping := strings.Join(by, ", ")
	return "sum by (" + grouping + ") (" + numerator + ") / ignoring(" + grouping + ") group_left " + accepted
}

func outcomesDashboard() dashboardSpec {
	return dashboardSpec{
		uid:   "postline-outcomes",
		title: "Postline outcomes",
		description: "What happened to mail after the relay took it: bounce and complaint rates, the reports " +
			"the bounce-receiver takes in, unconfirmed mail, suppression lists, and the webhooks that carry " +
			"the events to their endpoints.",
		tags: []string{"postline"},
		rows: []rowSpec{
			outcomesReputationRow(),
			outcomesReportsRow(),
			outcomesSuppressionRow(),
			outcomesWebhooksRow(),
		},
	}
}

func outcomesReputationRow() rowSpec {
	return rowSpec{title: "Reputation", panels: []panelSpec{
		{
			title: "Bounce rate by bounce type",
			description: "Recipients a report marked bounced over the last hour, per recipient accepted in that " +
				"hour, by bounce type: hard (no such address: suppressed), soft (temporary, given up on), " +
				"policy (content or reputation). Fleet-wide: the job and instance filters do not apply. The " +
				"dashed line is the hard-bounce alert's 5 %. What to do: hard bounces above a few percent " +
				"mean a stale or bought list: stop the stream or tenant sending it; policy bounces rising " +
				"at one mailbox provider: check the complaint rate and SPF, DKIM, DMARC.",
			unit:       unitRatio,
			thresholds: []threshold{{hardBounceRateWarning, "red"}},
			targets: []target{{
				expr:   perAccepted(fleetRateOver(reputationWindow, "postline_outcome_transitions_total", `type="bounced"`), "bounce_type"),
				legend: "{{bounce_type}}",
			}},
		},
		{
			title: "Complaint rate",
			description: "Recipients who reported the mail as unwanted over the last hour, per recipient accepted in " +
				"that hour, fleet-wide (the job and instance filters do not apply). Dashed lines: 0.1 %, " +
				"where mailbox providers start filtering, and 0.3 %, where they block; the complaint alert " +
				"fires at both. What to do: above 0.1 % find the stream or campaign drawing complaints and " +
				"pause it; the addresses are already suppressed.",
			unit:       unitRatio,
			thresholds: []threshold{{complaintRateWarning, "orange"}, {complaintRateCritical, "red"}},
			targets: []target{{
				expr:   perAccepted(fleetRateOver(reputationWindow, "postline_outcome_transitions_total", `type="complained"`)),
				legend: "complaint rate",
			}},
		},
		{
			title: "Recipient events published",
			description: "Events written to the events topic per second, by type: from the workers accepted, " +
				"deferred, failed, dead, suppressed, unconfirmed and bounced (refused at RCPT), from " +
				"reports delivered, bounced and complained. What to do: accepted at zero while mail is sent " +
				"means the workers cannot write events: check their logs and Kafka; webhooks and this " +
				"dashboard's rates read these events.",
			unit: unitPerSecond, stacked: true,
			targets: []target{{
				expr:   "sum by (type) (" + rate("postline_events_published_total") + ")",
				legend: "{{type}}",
			}},
		},
		{
			title: "Relay refusals at RCPT",
			description: "Recipients a relay refused for good at RCPT while the rest were sent, per second, by relay " +
				"and bounce type. What to do: hard refusals are bad addresses, suppressed per the rules; " +
				"policy refusals at one relay mean reputation or content trouble: compare the complaint " +
				"rate.",
			unit: unitPerSecond,
			targets: []target{{
				expr:   "sum by (provider, bounce_type) (" + rate("postline_delivery_recipient_refusals_total") + ")",
				legend: "{{provider}} {{bounce_type}}",
			}},
		},
	}}
}

func outcomesReportsRow() rowSpec {
	return rowSpec{title: "Reports", panels: []panelSpec{
		{
			title: "Reports by source and result",
			description: "Reports the bounce-receiver applied per second, by source (dsn, arf, unstructured, ses, " +
				"mailgun) and result: applied (a recipient moved on), forged (token did not verify: " +
				"dropped), unknown (no such recipient), early (before the send was recorded: refused, " +
				"offered again), stale (the recipient had moved past it), delayed (still being retried); " +
				"forged also drawn alone. What to do: forged reports that keep coming are fake bounces, " +
				"harmless while dropped; but check that workers and bounce-receivers share the return-path " +
				"keys, or genuine reports look forged.",
			unit: unitPerSecond,
			targets: []target{
				{
					expr:   "sum by (source, result) (" + rate("postline_outcome_reports_total") + ")",
					legend: "{{source}} {{result}}",
				},
				{
					expr:   "sum(" + rate("postline_outcome_reports_total", `result="forged"`) + ")",
					legend: "forged (all sources)",
				},
			},
		},
		{
			title: "Bounce server messages and recipients",
			description: "Messages the bounce-receiver's SMTP server read per second, by result (report, not_report, " +
				"unreadable, too_large, apply_error), and RCPT commands by result (bounce, feedback, " +
				"refused). What to do: apply_error means the outcome store failed and the sender will " +
				"retry: check Postgres and Kafka; refused recipients are mail to non-return-path addresses, " +
				"harmless.",
			unit: unitPerSecond,
			targets: []target{
				{expr: "sum by (result) (" + rate("postline_inbound_messages_total") + ")", legend: "messages {{result}}"},
				{expr: "sum by (result) (" + rate("postline_inbound_recipients_total") + ")", legend: "RCPT {{result}}"},
			},
		},
		{
			title: "Provider webhook requests",
			description: "Requests the provider webhooks (SES through SNS, Mailgun) answered per second, by provider " +
				"and result, and the reports they handed on by kind. What to do: bad_signature, expired or " +
				"cert_error mean the provider's signing setup and ours disagree (a rotated Mailgun key, a " +
				"changed SNS topic): fix it before the provider stops retrying; apply_error means the " +
				"outcome store failed.",
			unit: unitPerSecond,
			targets: []target{
				{expr: "sum by (provider, result) (" + rate("postline_providerhook_requests_total") + ")", legend: "{{provider}} {{result}}"},
				{expr: "sum by (provider, kind) (" + rate("postline_providerhook_reports_total") + ")", legend: "{{provider}} report {{kind}}"},
			},
		},
		{
			title: "Unconfirmed and settled mail",
			description: "Mail marked unconfirmed per second (its confirmation window passed with recipients " +
				"unresolved), and mail a report settled, by confirmation (confirmed, cancelled). What to " +
				"do: unconfirmed mail means reports stopped arriving: check that the bounce domain's MX " +
				"reaches the bounce-receiver and the relays return DSNs; a later report still resolves the " +
				"recipient.",
			unit: unitPerSecond,
			targets: []target{
				{expr: "sum(" + rate("postline_outcome_unconfirmed_total") + ")", legend: "marked unconfirmed"},
				{expr: "sum by (confirmation) (" + rate("postline_outcome_confirmations_total") + ")", legend: "{{confirmation}}"},
			},
		},
	}}
}

func outcomesSuppressionRow() rowSpec {
	return rowSpec{title: "Suppression", panels: []panelSpec{
		{
			title: "Suppressions added by reason",
			description: "Addresses reports suppressed per second, by reason (hard_bounce, complaint). What to do: a " +
				"burst of hard_bounce follows a stale list, of complaint an unwanted campaign: find its " +
				"sender; remove mistaken entries with postctl.",
			unit: unitPerSecond, stacked: true, width: 8,
			targets: []target{{
				expr:   "sum by (reason) (" + rate("postline_outcome_suppressions_total") + ")",
				legend: "{{reason}}",
			}},
		},
		{
			title: "Recipients suppressed at claim",
			description: "Recipients dropped from envelopes per second as suppressed, and the checks that found an " +
				"entry, by reason. What to do: a sudden rise means a producer mails a list that bounced or " +
				"complained before: tell its owner.",
			unit: unitPerSecond, width: 8,
			targets: []target{
				{expr: "sum(" + rate("postline_delivery_suppressed_recipients_total") + ")", legend: "suppressed at claim"},
				{expr: "sum by (reason) (" + rate("postline_suppression_hits_total") + ")", legend: "hits {{reason}}"},
			},
		},
		{
			title: "Suppression list round trip",
			description: "99th percentile of a suppression round trip to Postgres per operation, and failures per " +
				"second. What to do: a rising p99 slows every claim; errors mean Postgres is failing: check " +
				"its health and connection limits.",
			unit: unitSeconds, width: 8,
			targets: []target{
				{expr: quantile("0.99", "postline_suppression_round_trip_seconds", "op"), legend: "p99 {{op}}"},
				{expr: "sum by (op) (" + rate("postline_suppression_db_errors_total") + ")", legend: "errors/s {{op}}"},
			},
		},
	}}
}

func outcomesWebhooksRow() rowSpec {
	return rowSpec{title: "Webhooks", panels: []panelSpec{
		{
			title: "Webhook backlog per endpoint",
			description: "Events queued for each endpoint and not finished, summed over the dispatchers. What to do: " +
				"a backlog that keeps growing means the endpoint is down or too slow: look at its attempts " +
				"and oldest pending age.",
			unit: unitCount,
			targets: []target{{
				expr:   "max by (endpoint) (" + sel("postline_webhook_backlog") + ")",
				legend: "{{endpoint}}",
			}},
		},
		{
			title: "Oldest pending webhook event",
			description: "Age of the oldest unfinished event of each endpoint's backlog (0 when empty). The dashed " +
				"line is the backlog alert's 10 minutes. What to do: past 10 minutes the owner sees events " +
				"late: check the endpoint's replies on \"Webhook deliveries and attempts\" and tell its " +
				"owner; events past their age limit are dead-lettered.",
			unit:       unitSeconds,
			thresholds: []threshold{{webhookOldestPendingMax, "red"}},
			targets: []target{{
				expr:   "max by (endpoint) (" + sel("postline_webhook_oldest_pending_age_seconds") + ")",
				legend: "{{endpoint}}",
			}},
		},
		{
			title: "Webhook deliveries and attempts",
			description: "Events finished per second per endpoint, by result (delivered, dead_lettered), and POSTs " +
				"by reply class (2xx, 3xx, 4xx, 5xx) or timeout and error. What to do: 4xx is the endpoint " +
				"refusing us (often a wrong signing secret); 5xx, timeout and error mean it is down: the " +
				"dispatcher retries with backoff until the event's limits.",
			unit: unitPerSecond, width: 8,
			targets: []target{
				{expr: "sum by (endpoint, result) (" + rate("postline_webhook_deliveries_total") + ")", legend: "{{endpoint}} {{result}}"},
				{expr: "sum by (endpoint, result) (" + rate("postline_webhook_attempts_total") + ")", legend: "POST {{endpoint}} {{result}}"},
			},
		},
		{
			title: "Webhook dead letters",
			description: "Events written to the webhook dead-letter topic per second per endpoint (410 Gone, " +
				"attempts or age used up), and events-topic records that are not valid events. What to do: " +
				"dead letters are events the owner never received: fix the endpoint, then replay them. " +
				"Undecodable records mean something writes bad events to the events topic.",
			unit: unitPerSecond, width: 8,
			targets: []target{
				{expr: "sum by (endpoint) (" + rate("postline_webhook_dead_letters_total") + ")", legend: "{{endpoint}}"},
				{expr: "sum(" + rate("postline_webhook_undecodable_total") + ")", legend: "undecodable"},
			},
		},
		{
			title: "Webhook delivery time",
			description: "Time from queueing an event to its delivery, retries included, median and 99th percentile " +
				"per endpoint. What to do: a p99 of minutes means the endpoint fails and events wait for " +
				"retries: look at its attempts.",
			unit: unitSeconds, width: 8,
			targets: []target{
				{expr: quantileOf("0.5", "postline_webhook_delivery_seconds", []string{`result="delivered"`}, "endpoint"), legend: "p50 {{endpoint}}"},
				{expr: quantileOf("0.99", "postline_webhook_delivery_seconds", []string{`result="delivered"`}, "endpoint"), legend: "p99 {{endpoint}}"},
			},
		},
	}}
}

// circuitStateExpr encodes each relay's circuit as 0 closed, 1 half-open or
// 2 open (circuitStateMappings names them), taking the worst state any
// worker reports.
func circuitStateExpr() string {
	return "max by (provider) (" + sel("postline_circuit_state", `state="half_open"`) +
		" + ignoring(state) 2 * " + sel("postline_circuit_state", `state="open"`) + ")"
}
