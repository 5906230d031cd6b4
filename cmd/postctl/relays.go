package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/fleet"
)

// breakerLine describes a breaker for the text output, at the database
// time at.
func breakerLine(b *fleet.Breaker, at time.Time) string {
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
func relayHeader(v fleet.Relay, at time.Time) string {
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
func relayWorkersTable(v fleet.Relay, at time.Time) (header []string, rows [][]string) {
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
func writeRelays(g *globals, rep fleet.Relays) error {
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
	cmd.Flags().DurationVar(&staleAfter, "stale-after", fleet.DefaultStaleAfter,
		"a worker that has not published its relay state for this long is stale (3x the workers' POSTLINE_RELAY_STATE_INTERVAL)")
	return cmd
}

func relays(ctx context.Context, g *globals, staleAfter time.Duration) error {
	pool, err := connectPool(ctx, g)
	if err != nil {
		return err
	}
	defer pool.Close()
	r, err := fleet.New(fleet.Config{Database: pool, StaleAfter: staleAfter})
	if err != nil {
		return err
	}
	rep, err := r.Relays(ctx)
	if err != nil {
		return withMigrateHint(err)
	}
	return printReport(g, rep, func() error { return writeRelays(g, rep) })
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
