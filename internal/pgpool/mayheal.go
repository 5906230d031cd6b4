package pgpool

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// MayHeal reports whether a Postgres call that failed with err may
// succeed if made again unchanged: the server restarting or failing over,
// a dropped connection, a serialization failure or deadlock, a server out
// of connections or memory. It is false for what only a change of code or
// configuration mends: refused credentials, a missing table or column, a
// value out of range, a violated constraint. A cancelled context may not
// heal: the caller is stopping. Errors without a SQLSTATE (network
// errors, timeouts) may heal.
func MayHeal(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return true
	}
	switch pe.Code[:2] {
	case "08", // connection exception
		"53", // insufficient resources
		"57", // operator intervention: admin shutdown, crash shutdown, cannot connect now
		"58": // system error (I/O)
		return true
	case "40": // transaction rollback: serialization failure, deadlock
		return true
	}
	return pe.Code == "55P03" // lock not available
}
