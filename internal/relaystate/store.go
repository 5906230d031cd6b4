package relaystate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/postline/postline/internal/adaptive"
)

// ErrInvalid marks a publication the table cannot hold: a bug of the
// caller, which publishing again unchanged does not mend.
var ErrInvalid = errors.New("invalid relay state")

// Cut is a decrease of one of a relay's send controllers.
type Cut struct {
	// Controller is what was cut, adaptive.ControllerConcurrency
	// ("concurrency") or adaptive.ControllerRate ("rate"); empty when the
	// relay was never cut.
	Controller string
	// Reason says why: the failure rule and the reply code that caused it.
	Reason string
	// At is when, on the worker's clock; zero when never cut.
	At time.Time
}

// Snapshot is one relay's send control as one worker sees it.
type Snapshot struct {
	// Relay is the relay's configured name (never its URL).
	Relay    string
	Priority int
	// Limit is the concurrency limit, InFlight the sends under way.
	Limit, InFlight int
	// Rate is the learned rate in sends/s, math.Inf(1) while unpaced.
	Rate float64
	// FleetShare is this worker's share of the relay's fleet-wide rate in
	// sends/s, math.Inf(1) when no fleet rate is configured; Members is
	// how many live workers share it.
	FleetShare float64
	Members    int
	// ConcurrencyCuts and RateCuts count the cuts of each controller since
	// the worker started.
	ConcurrencyCuts, RateCuts int
	// LastCut is the latest cut of either controller.
	LastCut Cut
}

// Paced reports whether the worker has learned a rate for the relay.
func (s Snapshot) Paced() bool { return !math.IsInf(s.Rate, 1) }

// Shared reports whether the relay has a fleet-wide rate to share.
func (s Snapshot) Shared() bool { return !math.IsInf(s.FleetShare, 1) }

// validate rejects what the table cannot hold; a NaN or negative rate is a
// bug of the caller, not "unpaced".
func (s Snapshot) validate() error {
	switch {
	case s.Relay == "":
		return errors.New("empty relay")
	case s.Limit < 0 || s.InFlight < 0 || s.Members < 0 || s.ConcurrencyCuts < 0 || s.RateCuts < 0:
		return fmt.Errorf("relay %s: negative count", s.Relay)
	case !(s.Rate >= 0):
		return fmt.Errorf("relay %s: rate %v: want >= 0 or +Inf (unpaced)", s.Relay, s.Rate)
	case !(s.FleetShare >= 0):
		return fmt.Errorf("relay %s: fleet share %v: want >= 0 or +Inf (none)", s.Relay, s.FleetShare)
	case (s.LastCut.Controller == "") != s.LastCut.At.IsZero():
		return fmt.Errorf("relay %s: last cut needs both a controller and a time", s.Relay)
	}
	return nil
}

// Row is a worker's published snapshot of one relay.
type Row struct {
	WorkerID string
	Snapshot
	// UpdatedAt is when the worker published it, on its clock.
	UpdatedAt time.Time
}

// Listing is the whole table.
type Listing struct {
	// At is the database's clock when it was read.
	At time.Time
	// Rows are ordered by relay, then worker.
	Rows []Row
}

// Store reads and writes postline_relay_state. It is safe for concurrent
// use.
type Store struct {
	pool *pgxpool.Pool
}

// New returns a store on pool; the table must exist (schema.Migrate).
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool}
}

const columns = `worker_id, provider, priority, concurrency_limit, in_flight, rate, fleet_share, members,
	concurrency_cuts, rate_cuts, last_cut_controller, last_cut_reason, last_cut_at, updated_at`

// Publish replaces workerID's rows with states, published at at, in one
// statement: a row per state is upserted, and the worker's rows of relays
// not in states are deleted (it no longer has them). A row is never set
// back to an older publication. An empty states deletes all of the worker's
// rows.
func (s *Store) Publish(ctx context.Context, workerID string, at time.Time, states []Snapshot) error {
	if workerID == "" {
		return fmt.Errorf("relaystate: publish: %w: empty worker ID", ErrInvalid)
	}
	if at.IsZero() {
		return fmt.Errorf("relaystate: publish: %w: zero time", ErrInvalid)
	}
	n := len(states)
	var (
		relays               = make([]string, n)
		priorities, limits   = make([]int32, n), make([]int32, n)
		inFlight, members    = make([]int32, n), make([]int32, n)
		rates, shares        = make([]*float64, n), make([]*float64, n)
		concCuts, rateCuts   = make([]int64, n), make([]int64, n)
		controllers, reasons = make([]*string, n), make([]*string, n)
		cutAts               = make([]*time.Time, n)
		seen                 = make(map[string]bool, n)
	)
	for i, st := range states {
		if err := st.validate(); err != nil {
			return fmt.Errorf("relaystate: publish: %w: %w", ErrInvalid, err)
		}
		if seen[st.Relay] {
			return fmt.Errorf("relaystate: publish: %w: relay %s twice", ErrInvalid, st.Relay)
		}
		seen[st.Relay] = true
		relays[i] = st.Relay
		priorities[i], limits[i], inFlight[i], members[i] = int32(st.Priority), int32(st.Limit), int32(st.InFlight), int32(st.Members)
		concCuts[i], rateCuts[i] = int64(st.ConcurrencyCuts), int64(st.RateCuts)
		if st.Paced() {
			rates[i] = &st.Rate
		}
		if st.Shared() {
			shares[i] = &st.FleetShare
		}
		if st.LastCut.Controller != "" {
			c, r, t := st.LastCut.Controller, st.LastCut.Reason, st.LastCut.At
			controllers[i], reasons[i], cutAts[i] = &c, &r, &t
		}
	}
	_, err := s.pool.Exec(ctx, `WITH gone AS (
			DELETE FROM postline_relay_state WHERE worker_id = $1 AND provider <> ALL($2::text[])
		)
		INSERT INTO postline_relay_state (`+columns+`)
		SELECT $1::text, s.*, $14::timestamptz FROM unnest($2::text[], $3::integer[], $4::integer[], $5::integer[],
			$6::double precision[], $7::double precision[], $8::integer[], $9::bigint[], $10::bigint[],
			$11::text[], $12::text[], $13::timestamptz[]) AS s
		ON CONFLICT (worker_id, provider) DO UPDATE SET
			priority = EXCLUDED.priority, concurrency_limit = EXCLUDED.concurrency_limit,
			in_flight = EXCLUDED.in_flight, rate = EXCLUDED.rate, fleet_share = EXCLUDED.fleet_share,
			members = EXCLUDED.members, concurrency_cuts = EXCLUDED.concurrency_cuts,
			rate_cuts = EXCLUDED.rate_cuts, last_cut_controller = EXCLUDED.last_cut_controller,
			last_cut_reason = EXCLUDED.last_cut_reason, last_cut_at = EXCLUDED.last_cut_at,
			updated_at = EXCLUDED.updated_at
		WHERE postline_relay_state.updated_at <= EXCLUDED.updated_at`,
		workerID, relays, priorities, limits, inFlight, rates, shares, members, concCuts, rateCuts,
		controllers, reasons, cutAts, at)
	if err != nil {
		return fmt.Errorf("relaystate: publish: %w", err)
	}
	return nil
}

// List reads every row, ordered by relay then worker, and the
// database's clock, in one round trip.
func (s *Store) List(ctx context.Context) (Listing, error) {
	var b pgx.Batch
	var out Listing
	b.Queue(`SELECT clock_timestamp()`).QueryRow(func(r pgx.Row) error { return r.Scan(&out.At) })
	b.Queue(`SELECT ` + columns + ` FROM postline_relay_state ORDER BY provider, worker_id`).Query(func(rows pgx.Rows) error {
		var err error
		out.Rows, err = pgx.CollectRows(rows, scanRow)
		return err
	})
	if err := s.pool.SendBatch(ctx, &b).Close(); err != nil {
		return Listing{}, fmt.Errorf("relaystate: list: %w", err)
	}
	return out, nil
}

func scanRow(r pgx.CollectableRow) (Row, error) {
	var (
		out                Row
		priority, limit    int32
		inFlight, members  int32
		concCuts, rateCuts int64
		rate, share        *float64
		controller, reason *string
		cutAt              *time.Time
	)
	if err := r.Scan(&out.WorkerID, &out.Relay, &priority, &limit, &inFlight, &rate, &share, &members,
		&concCuts, &rateCuts, &controller, &reason, &cutAt, &out.UpdatedAt); err != nil {
		return Row{}, err
	}
	out.Priority, out.Limit, out.InFlight, out.Members = int(priority), int(limit), int(inFlight), int(members)
	out.ConcurrencyCuts, out.RateCuts = int(concCuts), int(rateCuts)
	out.Rate, out.FleetShare = orInf(rate), orInf(share)
	if controller != nil {
		out.LastCut.Controller = *controller
	}
	if reason != nil {
		out.LastCut.Reason = *reason
	}
	if cutAt != nil {
		out.LastCut.At = *cutAt
	}
	return out, nil
}

// orInf is *p, or +Inf for NULL (unpaced, no fleet rate).
func orInf(p *float64) float64 {
	if p == nil {
		return math.Inf(1)
	}
	return *p
}

// FleetRates returns, per relay, the sum of the learned rates of the
// workers other than exceptWorker that published at or after freshAfter
// and are paced for it, and how many they are. A relay no such worker
// paces is absent.
func (s *Store) FleetRates(ctx context.Context, exceptWorker string, freshAfter time.Time) (map[string]adaptive.LearnedRates, error) {
	rows, err := s.pool.Query(ctx, `SELECT provider, sum(rate), count(*) FROM postline_relay_state
		WHERE worker_id <> $1 AND updated_at >= $2 AND rate IS NOT NULL
		GROUP BY provider`, exceptWorker, freshAfter)
	if err != nil {
		return nil, fmt.Errorf("relaystate: fleet rates: %w", err)
	}
	out := make(map[string]adaptive.LearnedRates)
	var (
		relay string
		r     adaptive.LearnedRates
	)
	if _, err := pgx.ForEachRow(rows, []any{&relay, &r.Sum, &r.Workers}, func() error {
		out[relay] = r
		return nil
	}); err != nil {
		return nil, fmt.Errorf("relaystate: fleet rates: %w", err)
	}
	return out, nil
}

// Prune deletes the rows published before before (workers that stopped
// publishing) and returns how many it deleted.
func (s *Store) Prune(ctx context.Context, before time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM postline_relay_state WHERE updated_at < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("relaystate: prune: %w", err)
	}
	return tag.RowsAffected(), nil
}
