package idempotency

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Operation names, the values of the op label.
const (
	opClaim          = "claim"
	opRecord         = "record"
	opRecordRejected = "record_rejected"
	opNoteConflicts  = "note_conflicts"
	opExtendLease    = "extend_lease"
	opGet            = "get"
	opCountByStatus  = "count_by_status"
	opPing           = "ping"
	opStuck          = "stuck"
	opRelease        = "release"
	opResetForReplay = "reset_for_replay"
	opStalledReplays = "stalled_replays"
	opTouchReplays   = "touch_replays"
	opPurge          = "purge"
	opRecipients     = "recipients"
	opResolve        = "resolve"
	opUnconfirmed    = "unconfirmed"
	opOutbox         = "outbox"
)

var ops = []string{opClaim, opRecord, opRecordRejected, opNoteConflicts, opExtendLease, opGet, opCountByStatus, opPing,
	opStuck, opRelease, opResetForReplay, opStalledReplays, opTouchReplays, opPurge, opRecipients, opResolve, opUnconfirmed,
	opOutbox}

type metrics struct {
	claims       *prometheus.CounterVec
	casConflicts prometheus.Counter
	extensions   prometheus.Counter
	dbErrors     *prometheus.CounterVec
	roundTrip    *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "postline", "idempotency"
	m := &metrics{
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "claims_total",
			Help: "Claim results per message, by result (claimed, duplicate, conflict, busy, stale).",
		}, []string{"result"}),
		casConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "cas_conflicts_total",
			Help: "Row updates whose compare-and-set on version was lost because the row changed under the writer.",
		}),
		extensions: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "lease_extensions_total",
			Help: "Leases extended (one per row per extension) while their claimed jobs wait for a relay or are sent.",
		}),
		dbErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "db_errors_total",
			Help: "Failed database round trips, by operation.",
		}, []string{"op"}),
		roundTrip: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "round_trip_seconds",
			Help:    "Duration of database round trips (one per batch), by operation.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5ms to ~4s
		}, []string{"op"}),
	}
	if reg != nil {
		var err error
		if m.claims, err = register(reg, m.claims); err != nil {
			return nil, err
		}
		if m.casConflicts, err = register(reg, m.casConflicts); err != nil {
			return nil, err
		}
		if m.extensions, err = register(reg, m.extensions); err != nil {
			return nil, err
		}
		if m.dbErrors, err = register(reg, m.dbErrors); err != nil {
			return nil, err
		}
		if m.roundTrip, err = register(reg, m.roundTrip); err != nil {
			return nil, err
		}
	}
	// Export every series from the start, so rates and alerts see zeros.
	for r := Claimed; r <= Stale; r++ {
		m.claims.WithLabelValues(r.String())
	}
	for _, op := range ops {
		m.dbErrors.WithLabelValues(op)
	}
	return m, nil
}

// register registers c, or returns the equal collector already registered
// (two stores in one process share their metrics).
func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(T); ok {
			return existing, nil
		}
	}
	return c, err
}
