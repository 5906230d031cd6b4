package console

import (
	"net/http"
	"time"

	"github.com/postline/postline/internal/fleet"
	"github.com/postline/postline/internal/operator"
)

// apiQueues is GET /api/v1/queues: fleet's Queues, the names postctl lag
// -o json prints.
func (s *Server) apiQueues(w http.ResponseWriter, r *http.Request, v visit) {
	if !s.auditAPI(w, r, v, "api.queues", nil) {
		return
	}
	q, problem := s.readQueues(r.Context())
	if problem != "" {
		writeJSONError(w, http.StatusServiceUnavailable, problem)
		return
	}
	writeJSON(w, http.StatusOK, q)
}

// apiHistogram is GET /api/v1/deadletters/histogram?since=&until=&bucket=:
// fleet's Histogram (postctl dlq stats -o json's names), the queues page's
// defaults (the last 24 h by hour) for parameters not given.
func (s *Server) apiHistogram(w http.ResponseWriter, r *http.Request, v visit) {
	form := readHistogramForm(r.URL.Query())
	q, err := parseHistogramQuery(form, time.Now(), fleet.MaxBuckets)
	if err != nil { // an inputError: its text says which field
		writeJSONError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.auditAPI(w, r, v, "api.deadletters.histogram", window(q, form.Bucket)) {
		return
	}
	h, problem := s.readHistogram(r.Context(), q)
	if problem != "" {
		writeJSONError(w, http.StatusServiceUnavailable, problem)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

// apiRelays is GET /api/v1/relays: fleet's Relays, the names postctl
// relays -o json prints.
func (s *Server) apiRelays(w http.ResponseWriter, r *http.Request, v visit) {
	if !s.auditAPI(w, r, v, "api.relays", nil) {
		return
	}
	rep, problem := s.readRelays(r.Context())
	if problem != "" {
		writeJSONError(w, http.StatusServiceUnavailable, problem)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// auditAPI writes an API read's entry before it is read; when it cannot,
// it has answered 503.
func (s *Server) auditAPI(w http.ResponseWriter, r *http.Request, v visit, action string, target any) bool {
	if err := s.cfg.Audit.Write(r.Context(), v.session.Operator, action, target, operator.ResultOK, v.client); err != nil {
		s.log.Error("console: audit entry not written", "error", err)
		writeJSONError(w, http.StatusServiceUnavailable, "the audit entry could not be written; try again")
		return false
	}
	return true
}
