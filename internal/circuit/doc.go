// Package circuit owns the per-provider circuit breakers of the SMTP relays
// and their health (healthy, degraded, unavailable), shared by every worker
// replica through the postline_circuits table, so the fleet backs off a
// failing provider together.
//
// The rules are a pure function, Next, over a Circuit on a virtual clock:
//
//	closed    --FailureThreshold consecutive provider faults (auth: one)--> open, cooldown = BaseCooldown
//	open      --open_until passed, a worker claims the probe--------------> half_open (probe owner, probe deadline)
//	half_open --the probe owner reports success---------------------------> closed, failures 0, cooldown = BaseCooldown
//	half_open --the probe owner reports a failure-------------------------> open, cooldown x Growth (x TimeoutGrowth
//	                                                                          for a timeout), at most MaxCooldown
//	half_open --probe deadline passed without a report--------------------> the probe may be claimed again
//
// A success in closed resets the failure count; reports while open, and
// reports in half_open from workers other than the probe owner, are
// stragglers and ignored, so they neither extend the cooldown nor close the
// circuit.
//
// Breakers applies Next to the shared rows: every change is one transaction
// that locks the row (SELECT ... FOR UPDATE), applies Next with the database
// clock and writes the result, so concurrent reports never lose an update and
// exactly one worker wins a probe. Each worker answers Allow from a local
// cache refreshed every RefreshInterval (one query for all providers) and
// after its own writes; the hot path (a success while closed and healthy)
// does no I/O at all.
//
// The package does not classify errors (internal/failure does), choose
// providers or pause consumption: the delivery pipeline asks Allow, reports
// outcomes, and waits on Changed when AnyAllowed is false. The table's DDL
// lives in internal/schema.
package circuit
