// Package circuit owns the per-relay circuit breakers of the SMTP relays
// and their health (healthy, degraded, unavailable), shared by every worker
// replica through the postline_circuits table, so the fleet backs off a
// failing relay together.
//
// Throttling is not an outage. A relay that says slow down (421/450 4.7.x,
// rate texts) is still accepting mail; the send control paces for it
// (internal/adaptive), and its Throttle reports never count here. The
// breaker is for relays that are down or refuse everything: refused or lost
// connections, timeouts, auth, "service not available".
//
// The rules are a pure function, Next, over a Circuit on a virtual clock:
//
//	closed    --a fault, no window running-------------------------------> closed, a window of Window begins (1 fault)
//	closed    --FailureThreshold faults in the window while its successes
//	            are under SuccessFloor of its sends (auth: at once)--------> open, cooldown = BaseCooldown
//	open      --open_until passed, a worker claims the probe--------------> half_open (probe owner, probe deadline)
//	half_open --the probe owner reports success (or a throttle)-----------> closed, window cleared, cooldown = BaseCooldown
//	half_open --the probe owner reports a fault---------------------------> open, cooldown x Growth (x TimeoutGrowth
//	                                                                          for a timeout), at most MaxCooldown
//	half_open --probe deadline passed without a report--------------------> the probe may be claimed again
//
// The counts are fleet-wide: every worker's faults and successes go to the
// same row, so one worker's faults never open a relay that another worker
// is sending through. Successes count only inside a window (those from
// before a relay's first fault say nothing about whether it is down now),
// and workers batch them: at most one write per FlushInterval per worker
// while a window runs, plus the batch carried by each fault. Throttles
// while closed, reports while open, and reports in half_open from workers
// other than the probe owner are ignored, so they neither extend the
// cooldown nor close the circuit.
//
// Breakers applies Next to the shared rows: every change is one transaction
// that locks the row (SELECT ... FOR UPDATE), applies Next with the database
// clock and writes the result, so concurrent reports never lose an update and
// exactly one worker wins a probe. Each worker answers Allow from a local
// cache refreshed every RefreshInterval (one query for all relays) and
// after its own writes; the hot path (a success or a throttle while closed
// and no window runs) does no I/O at all.
//
// The package does not classify errors (internal/failure does), choose
// relays or pause consumption: the delivery pipeline asks Allow, reports
// results, and waits on Changed when AnyAllowed is false. The table's DDL
// lives in internal/schema.
package circuit
