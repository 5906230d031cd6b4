package idempotency

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/metricreg"
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
	opHandBack       = "release"
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
	opStuck, opHandBack, opResetForReplay, opStalledReplays, opTouchReplays, opPurge, opRecipients, opResolve, opUnconfirmed,
	opOutbox}

type metrics struct {
	claims       *prometheus.CounterVec
	casConflicts prometheus.Counter
	extensions   prometheus.Counter
	dbErrors     *prometheus.CounterVec
	roundTrip    *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	set := metricreg.NewSet(reg, "idempotency")
	m := &metrics{
		claims:       set.CounterVec("claims_total", "Claim results per message, by result (claimed, duplicate, conflict, busy, stale).", "result"),
		casConflicts: set.Counter("cas_conflicts_total", "Row updates whose compare-and-set on version was lost because the row changed under the writer."),
		extensions:   set.Counter("lease_extensions_total", "Leases extended (one per row per extension) while their claimed jobs wait for a relay or are sent."),
		dbErrors:     set.CounterVec("db_errors_total", "Failed database round trips, by operation.", "op"),
		roundTrip:    set.HistogramVec("round_trip_seconds", "Duration of database round trips (one per batch), by operation.", prometheus.ExponentialBuckets(0.0005, 2, 14), "op"), // 0.5ms to ~4s
	}
	if err := set.Err(); err != nil {
		return nil, err
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
