// Package metricreg owns the one rule every component follows when it
// registers its Prometheus collectors: a collector already registered under
// the same description is shared, not an error. Components built twice in one
// process (two relays, two appliers, a test that builds several) then count
// into the same series instead of failing at start. It also owns the
// round-trip metrics the PostgreSQL stores share (RoundTrips), so that they
// count a failure by one rule.
package metricreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Shared registers c with reg and returns it, or returns the collector of the
// same type already registered in its place. A nil reg registers nothing and
// returns c. Any other registration error (a clashing description, a
// collector of another type under the name) is returned with c.
func Shared[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}
