package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/relaystate"
)

// defaultStaleAfter is when a worker's relay state counts as stale: three
// publications missed at the worker's default POSTLINE_RELAY_STATE_INTERVAL
// (2s).
const defaultStaleAfter = 6 * time.Second

// breakerRow is a relay's circuit breaker as stored in postline_circuits.
type breakerRow struct {
	Provider            string
	State               string // closed, open or half_open
	Failures            int
	OpenedAt, OpenUntil time.Time
	ProbeOwner          string
	ProbeUntil          time.Time
	LastClass           string
}

// breakerView is a relay's circuit breaker in the output of postctl relays.
type breakerView struct {
	State string `json:"state"`
	// Since is when the breaker opened; set while open or half-open (a
	// closed breaker does not keep when it closed).
	Since     *time.Time `json:"since,omitempty"`
	OpenUntil *time.Time `json:"open_until,omitempty"`
	// LastClass is the failure class of the last fault counted: why the
	// breaker opened while it is open or half-open.
	LastClass  string     `json:"last_class,omitempty"`
	Failures   int        `json:"failures"`
	ProbeOwner string     `json:"probe_owner,omitempty"`
	ProbeUntil *time.Time `json:"probe_until,omitempty"`
}

// cutView is a worker's last cut of a relay's send control.
type cutView struct {
	Controller string    `json:"controller"` // concurrency or rate
	Reason     string    `json:"reason"`
	At         time.Time `json:"at"`
}

// relayWorker is one worker's send control of a relay.
type relayWorker struct {
	WorkerID string `json:"worker_id"`
	Stale    bool   `json:"stale"`
	Priority int    `json:"priority"`
	Limit    int    `json:"limit"`
	InFlight int    `json:"in_flight"`
	// Rate is the learned rate in sends/s, null while unpaced; FleetShare
	// the worker's share of the relay's fleet rate, null when none is
	// configured.
	Rate            *float64  `json:"rate"`
	FleetShare      *float64  `json:"fleet_share"`
	Members         int       `json:"members"`
	ConcurrencyCuts int       `json:"concurrency_cuts"`
	RateCuts        int       `json:"rate_cuts"`
	LastCut         *cutView  `json:"last_cut,omitempty"`
	UpdatedAt       time.Time `json:"updated_at"`
	AgeSeconds      float64   `json:"age_seconds"`
}

// relayView is one relay in the output of postctl relays.
type relayView struct {
	Name string `json:"name"`
	// Breaker is null when the relay has no row in postline_circuits.
	Breaker *breakerView `json:"breaker"`
	// FleetRate sums the learned rates of the live paced workers; Live and
	// Paced count the live workers and those of them that are paced.
	FleetRate float64       `json:"fleet_rate"`
	Live      int           `json:"live_workers"`
	Paced     int           `json:"paced_workers"`
	Workers   []relayWorker `json:"workers"`
}

// relaysReport is the output of postctl relays.
type relaysReport struct {
	At                time.Time   `json:"at"`
	StaleAfterSeconds float64     `json:"stale_after_seconds"`
	Relays            []relayView `json:"relays"`
}

// newRelaysReport joins the breakers and the workers' relay states, read at
// the database time l.At: a worker that published more than staleAfter
// before is stale, shown but left out of the fleet's counts. Relays are in
// the order the workers try them (priority, then name); those no worker
// published come last.
func newRelaysReport(l relaystate.Listing, breakers []breakerRow, staleAfter time.Duration) relaysReport {
	rep := relaysReport{At: l.At.UTC(), StaleAfterSeconds: seconds(staleAfter), Relays: []relayView{}}
	byName := make(map[string]*relayView)
	view := func(name string) *relayView {
		if v, ok := byName[name]; ok {
			return v
		}
		v := &relayView{Name: name, Workers: []relayWorker{}}
		byName[name] = v
		return v
	}
	for _, b := range breakers {
		view(b.Provider).Breaker = newBreakerView(b)
	}
	for _, r := range l.Rows {
		v := view(r.Relay)
		age := l.At.Sub(r.UpdatedAt)
		w := relayWorker{
			WorkerID: r.WorkerID, Stale: age > staleAfter, Priority: r.Priority, Limit: r.Limit, InFlight: r.InFlight,
			Members: r.Members, ConcurrencyCuts: r.ConcurrencyCuts, RateCuts: r.RateCuts,
			UpdatedAt: r.UpdatedAt.UTC(), AgeSeconds: seconds(age),
		}
		if r.Paced() {
			w.Rate = &r.Rate
		}
		if r.Shared() {
			w.FleetShare = &r.FleetShare
		}
		if r.LastCut.Controller != "" {
			w.LastCut = &cutView{Controller: r.LastCut.Controller, Reason: r.LastCut.Reason, At: r.LastCut.At.UTC()}
		}
		if !w.Stale {
			v.Live++
			if w.Rate != nil {
				v.Paced++
				v.FleetRate += *w.Rate
			}
		}
		v.Workers = append(v.Workers, w)
	}
	for _, v := range byName {
		rep.Relays = append(rep.Relays, *v)
	}
	// The lowest priority a worker gives the relay: the first it tries.
	priority := func(v relayView) (int, bool) {
		if len(v.Workers) == 0 {
			return 0, false
		}
		return slices.MinFunc(v.Workers, func(a, b relayWorker) int { return cmp.Compare(a.Priority, b.Priority) }).Priority, true
	}
	slices.SortFunc(rep.Relays, func(a, b relayView) int {
		pa, oka := priority(a)
		pb, okb := priority(b)
		if oka != okb {
			if oka {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(pa, pb), strings.Compare(a.Name, b.Name))
	})
	return rep
}

func newBreakerView(b breakerRow) *breakerView {
	v := &breakerView{State: b.State, LastClass: b.LastClass, Failures: b.Failures}
	if b.State != "closed" {
		v.Since, v.OpenUntil = timePtr(b.OpenedAt), timePtr(b.OpenUntil)
	}
	if b.State == "half_open" {
		v.ProbeOwner, v.ProbeUntil = b.ProbeOwner, timePtr(b.ProbeUntil)
	}
	return v
}

// breakerLine describes a breaker for the text output, at the database
// time at.
func breakerLine(b *breakerView, at time.Time) string {
	if b == nil {
		return "breaker unknown (no row in postline_circuits)"
	}
	state := strings.ReplaceAll(b.State, "_", "-")
	var s strings.Builder
	s.WriteString("breaker " + state)
	if b.Since != nil {
		fmt.Fprintf(&s, " since %s (%s ago)", formatTime(*b.Since), formatAge(at.Sub(*b.Since)))
		if b.LastClass != "" {
			s.WriteString(", opened on " + oneLine(b.LastClass, 40))
		}
		if b.State == "open" && b.OpenUntil != nil {
			if left := b.OpenUntil.Sub(at); left > 0 {
				fmt.Fprintf(&s, ", probe in %s", formatAge(left))
			} else {
				s.WriteString(", probe due")
			}
		}
		if b.ProbeOwner != "" {
			s.WriteString(", probe by " + oneLine(b.ProbeOwner, 60))
		}
		return s.String()
	}
	if b.Failures > 0 {
		fmt.Fprintf(&s, ", %d %s counted", b.Failures, plural(b.Failures, "fault", "faults"))
	}
	if b.LastClass != "" {
		s.WriteString(", last fault " + oneLine(b.LastClass, 40))
	}
	return s.String()
}

// formatRate shows a rate in sends/s, or none when nil.
func formatRate(r *float64, none string) string {
	if r == nil {
		return none
	}
	return strconv.FormatFloat(*r, 'f', 1, 64) + "/s"
}

// relayHeader is the line above a relay's worker table.
func relayHeader(v relayView, at time.Time) string {
	fleet := "no live worker"
	switch {
	case v.Paced == 0 && v.Live > 0:
		fleet = fmt.Sprintf("fleet unpaced (%d live %s)", v.Live, plural(v.Live, "worker", "workers"))
	case v.Live > 0:
		fleet = fmt.Sprintf("fleet learned rate %s (%d of %d live %s paced)", formatRate(&v.FleetRate, ""),
			v.Paced, v.Live, plural(v.Live, "worker", "workers"))
	}
	return fmt.Sprintf("relay %s: %s; %s", oneLine(v.Name, 60), breakerLine(v.Breaker, at), fleet)
}

// relayWorkersTable is the text table of a relay's workers.
func relayWorkersTable(v relayView, at time.Time) (header []string, rows [][]string) {
	header = []string{"WORKER", "PRIORITY", "LIMIT", "IN_FLIGHT", "RATE", "FLEET_SHARE", "CUTS", "LAST_CUT", "UPDATED"}
	for _, w := range v.Workers {
		share := "none"
		if w.FleetShare != nil {
			share = fmt.Sprintf("%s of %d", formatRate(w.FleetShare, ""), w.Members)
		}
		last := "-"
		if c := w.LastCut; c != nil {
			last = fmt.Sprintf("%s %s ago: %s", c.Controller, formatAge(at.Sub(c.At)), oneLine(c.Reason, 60))
		}
		updated := formatAge(time.Duration(w.AgeSeconds*float64(time.Second))) + " ago"
		if w.Stale {
			updated += " (stale)"
		}
		rows = append(rows, []string{oneLine(w.WorkerID, 60), strconv.Itoa(w.Priority), strconv.Itoa(w.Limit),
			strconv.Itoa(w.InFlight), formatRate(w.Rate, "unpaced"), share,
			fmt.Sprintf("concurrency %d, rate %d", w.ConcurrencyCuts, w.RateCuts), last, updated})
	}
	return header, rows
}

// writeRelays writes the text output of postctl relays.
func writeRelays(g *globals, rep relaysReport) error {
	if len(rep.Relays) == 0 {
		_, err := fmt.Fprintln(g.stdout, "no relays: no worker has published its relay state, and postline_circuits is empty")
		return err
	}
	for i, v := range rep.Relays {
		if i > 0 {
			fmt.Fprintln(g.stdout)
		}
		fmt.Fprintln(g.stdout, relayHeader(v, rep.At))
		if len(v.Workers) == 0 {
			continue
		}
		header, rows := relayWorkersTable(v, rep.At)
		if err := writeTable(g.stdout, header, rows); err != nil {
			return err
		}
	}
	return nil
}

func newRelaysCmd(g *globals) *cobra.Command {
	var staleAfter time.Duration
	cmd := &cobra.Command{
		Use:   "relays",
		Short: "Show each relay's circuit breaker and every worker's send control for it",
		Long: `Show, per SMTP relay (by name; relay URLs are never printed), its circuit breaker
from postline_circuits (closed, open or half-open; since when and on which
failure class it opened), and every worker's send control for it from
postline_relay_state, which each worker publishes every
POSTLINE_RELAY_STATE_INTERVAL (default 2s): its priority, concurrency limit,
sends in flight, learned rate (or unpaced), share of the relay's fleet-wide
rate (or none) and how many workers share it, its cuts of each controller,
the last cut (concurrency or rate, when, and why: the failure rule and the
reply code), and how long ago it published.

A worker that has not published for --stale-after is shown as stale and left
out of the relay's fleet learned rate (the sum of the live paced workers'
rates). Workers delete the rows of workers stale for 10 minutes.

--output json prints one object:
  {"at": time,                          the database's clock when read
   "stale_after_seconds",
   "relays": [{"name",
               "breaker": {"state", "since"?, "open_until"?, "last_class"?, "failures",
                           "probe_owner"?, "probe_until"?} or null (no row),
               "fleet_rate", "live_workers", "paced_workers",
               "workers": [{"worker_id", "stale": bool, "priority", "limit", "in_flight",
                            "rate": number or null (unpaced),
                            "fleet_share": number or null (none), "members",
                            "concurrency_cuts", "rate_cuts",
                            "last_cut"?: {"controller", "reason", "at"},
                            "updated_at", "age_seconds"}]}]}
Rates are sends per second; times are RFC 3339 in UTC; fields marked ? are left
out when empty.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if staleAfter <= 0 {
				return usagef("--stale-after %s: must be positive", staleAfter)
			}
			return relays(cmd.Context(), g, staleAfter)
		},
	}
	cmd.Flags().DurationVar(&staleAfter, "stale-after", defaultStaleAfter,
		"a worker that has not published its relay state for this long is stale (3x the workers' POSTLINE_RELAY_STATE_INTERVAL)")
	return cmd
}

func relays(ctx context.Context, g *globals, staleAfter time.Duration) error {
	pool, err := connectPool(ctx, g)
	if err != nil {
		return err
	}
	defer pool.Close()
	l, err := relaystate.New(pool).List(ctx)
	if err != nil {
		return withMigrateHint(err)
	}
	breakers, err := readBreakers(ctx, pool)
	if err != nil {
		return withMigrateHint(err)
	}
	rep := newRelaysReport(l, breakers, staleAfter)
	return printReport(g, rep, func() error { return writeRelays(g, rep) })
}

// readBreakers reads every relay's circuit breaker. It only reads:
// internal/circuit owns the rows and the rules, and its Breakers would
// create rows for the relays it is given.
func readBreakers(ctx context.Context, pool *pgxpool.Pool) ([]breakerRow, error) {
	rows, err := pool.Query(ctx, `SELECT provider, state, failures, opened_at, open_until, probe_owner, probe_until, last_class
		FROM postline_circuits ORDER BY provider`)
	if err != nil {
		return nil, fmt.Errorf("read postline_circuits: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (breakerRow, error) {
		var (
			b                               breakerRow
			openedAt, openUntil, probeUntil *time.Time
			probeOwner, lastClass           *string
		)
		err := r.Scan(&b.Provider, &b.State, &b.Failures, &openedAt, &openUntil, &probeOwner, &probeUntil, &lastClass)
		b.OpenedAt, b.OpenUntil, b.ProbeUntil = deref(openedAt), deref(openUntil), deref(probeUntil)
		b.ProbeOwner, b.LastClass = deref(probeOwner), deref(lastClass)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("read postline_circuits: %w", err)
	}
	return out, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// withMigrateHint says what to do when a table is missing: the database
// was never migrated to this version.
func withMigrateHint(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		return fmt.Errorf("%w (apply the migrations: postctl migrate, or start a worker of this version)", err)
	}
	return err
}
