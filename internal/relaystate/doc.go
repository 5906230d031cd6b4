// Package relaystate owns the shared per-worker relay state table,
// postline_relay_state: one row per worker and relay holding that worker's
// send control for the relay (concurrency limit, sends in flight, learned
// rate, share of a fleet rate, its cuts and the last one's reason), as the
// worker last published it.
//
// Workers Publish their rows every few seconds (one statement for all their
// relays), read the learned rates of the rest of the fleet (FleetRates) to
// seed their own pacers and share out the rate of a worker that leaves, and
// Prune the rows of workers that stopped
// publishing long ago, so the table holds the live fleet and the recently
// dead. Operators List it (postctl relays).
//
// It is an observability side channel: nothing sends or refuses mail on it,
// and its errors are for the caller to log, not to stop for. Relays are
// named by their configured name only; the table never holds a relay URL,
// which may carry a password.
//
// Times are the publishing worker's clock (updated_at, the last cut's time);
// List also returns the database's clock, so a reader on another host can
// judge a row's age without trusting its own. The table's DDL lives in
// internal/schema.
package relaystate
