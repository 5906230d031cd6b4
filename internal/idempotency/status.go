package idempotency

import "slices"

// Status is the state of a message's row.
type Status string

// The statuses a row can be in. Sent, failed, dead and suppressed are
// terminal.
const (
	// StatusPending is a row created ahead of the first claim.
	StatusPending Status = "pending"
	// StatusSending is a row claimed by a worker under a lease.
	StatusSending Status = "sending"
	// StatusRetrying is a row handed back for a later attempt.
	StatusRetrying Status = "retrying"
	// StatusSent is a message accepted by a provider.
	StatusSent Status = "sent"
	// StatusFailed is a message rejected permanently.
	StatusFailed Status = "failed"
	// StatusDead is a message given up on: out of attempts, too old, or
	// rejected as bad input.
	StatusDead Status = "dead"
	// StatusSuppressed is a message never sent because every recipient
	// is on a suppression list.
	StatusSuppressed Status = "suppressed"
)

// Statuses lists every status, in lifecycle order.
var Statuses = []Status{StatusPending, StatusSending, StatusRetrying, StatusSent, StatusFailed, StatusDead, StatusSuppressed}

// Terminal reports whether no further transition is expected from s: the
// message must not be sent again.
func (s Status) Terminal() bool {
	switch s {
	case StatusSent, StatusFailed, StatusDead, StatusSuppressed:
		return true
	}
	return false
}

// Valid reports whether s is one of the known statuses.
func (s Status) Valid() bool { return slices.Contains(Statuses, s) }
