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
	opStatuses       = "statuses"
)

var ops = []string{opClaim, opRecord, opRecordRejected, opNoteConflicts, opExtendLease, opGet, opCountByStatus, opPing,
	opStuck, opHandBack, opResetForReplay, opStalledReplays, opTouchReplays, opPurge, opRecipients, opResolve, opUnconfirmed,
	opOutbox, opStatuses}

type metrics struct {
	claims       *prometheus.CounterVec
	casConflicts prometheus.Counter
	extensions   prometheus.Counter
	db           metricreg.RoundTrips
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	set := metricreg.NewSet(reg, "idempotency")
	m := &metrics{
		claims:       set.CounterVec("claims_total", "Claim results per message, by result (claimed, duplicate, conflict, busy, stale).", "result"),
		casConflicts: set.Counter("cas_conflicts_total", "Row updates whose compare-and-set on version was lost because the row changed under the writer."),
		extensions:   set.Counter("lease_extensions_total", "Leases extended (one per row per extension) while their claimed jobs wait for a relay or are sent."),
		db: set.RoundTrips("Duration of database round trips (one per batch), by operation.",
			"Failed database round trips, by operation.", ops),
	}
	if err := set.Err(); err != nil {
		return nil, err
	}
	// Export every series from the start, so rates and alerts see zeros.
	for r := Claimed; r <= Stale; r++ {
		m.claims.WithLabelValues(r.String())
	}
	return m, nil
}
