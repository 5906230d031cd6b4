package metricreg

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RoundTrips measures a store's database round trips by operation: how long
// each took (round_trip_seconds{op}) and which failed (db_errors_total{op}).
// The PostgreSQL stores share it so that they count failures by one rule.
type RoundTrips struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

// RoundTrips registers a store's round-trip metrics in s, with the help
// texts given, and exports the error series of every op from the start so
// that rates and alerts see zeros. Durations are bucketed from 0.5 ms to
// about 4 s.
func (s *Set) RoundTrips(durationHelp, errorsHelp string, ops []string) RoundTrips {
	r := RoundTrips{
		errors:   s.CounterVec("db_errors_total", errorsHelp, "op"),
		duration: s.HistogramVec("round_trip_seconds", durationHelp, prometheus.ExponentialBuckets(0.0005, 2, 14), "op"),
	}
	for _, op := range ops {
		r.errors.WithLabelValues(op)
	}
	return r
}

// Observe records one round trip of op begun at start and counts its
// failure, unless the failure is ctx ending: shutdown is not a database
// error.
func (r RoundTrips) Observe(ctx context.Context, op string, start time.Time, err error) {
	r.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil && ctx.Err() == nil {
		r.errors.WithLabelValues(op).Inc()
	}
}
