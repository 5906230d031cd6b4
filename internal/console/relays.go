package console

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postline/postline/internal/fleet"
	"github.com/postline/postline/internal/operator"
)

// relaysBody is the relays page's data.
type relaysBody struct {
	Unavailable bool
	Read        bool // Relays was read
	Relays      fleet.Relays
}

// relaysPage shows, as postctl relays prints it, each relay's circuit
// breaker (closed, open or half-open, since when, the next probe), the
// fleet's learned rate, and every worker's send control of it: its rate
// or unpaced, and whether it is stale.
func (s *Server) relaysPage(w http.ResponseWriter, r *http.Request, v visit) {
	d := pageData{Title: "Relays", Nav: "relays"}.forVisit(&v)
	body := relaysBody{Unavailable: s.cfg.Fleet == nil}
	if body.Unavailable {
		d.Error, d.Body = noFleet, body
		s.render(w, http.StatusServiceUnavailable, "relays", d)
		return
	}
	if err := s.cfg.Audit.Write(r.Context(), v.session.Operator, "relays.view", nil, operator.ResultOK, v.client); err != nil {
		s.storeFailed(w, r, &v, "writing the audit entry", err)
		return
	}
	status := http.StatusOK
	rep, problem := s.readRelays(r.Context())
	if problem != "" {
		d.Error, status = problem, http.StatusServiceUnavailable
	} else {
		body.Read, body.Relays = true, rep
	}
	d.Body = body
	s.render(w, status, "relays", d)
}

// readRelays reads the relays, or says what to tell the operator (the
// failure itself is logged).
func (s *Server) readRelays(ctx context.Context) (fleet.Relays, string) {
	ctx, cancel := context.WithTimeout(ctx, fleetReadTimeout)
	defer cancel()
	rep, err := s.cfg.Fleet.Relays(ctx)
	if err == nil {
		return rep, ""
	}
	s.log.Error("console: reading the relays failed", "error", err)
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "42P01": // undefined_table
		return rep, "The database has no relay tables yet: apply the migrations (postctl migrate, or start a worker of this version), then reload."
	case errors.Is(err, fleet.ErrNotConfigured):
		return rep, "This console reads no relays: it runs without the database's relay state. Use postctl relays."
	}
	return rep, "The console could not read the relays from PostgreSQL (postline_circuits, postline_relay_state). " +
		"Try again in a moment; if it persists, check the console's /readyz and its log."
}

// breakerState names a breaker's state as postctl relays does: closed,
// open or half-open.
func breakerState(state string) string { return strings.ReplaceAll(state, "_", "-") }

// sendRate shows a rate in sends/s, or none when nil.
func sendRate(r *float64, none string) string {
	if r == nil {
		return none
	}
	return strconv.FormatFloat(*r, 'f', 1, 64) + "/s"
}
