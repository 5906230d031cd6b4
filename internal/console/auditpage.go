package console

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/postline/postline/internal/operator"
)

// auditPageSize is how many entries one page of the audit log shows.
const auditPageSize = 100

// auditBody is the audit page's data.
type auditBody struct {
	Actor, Action string
	Entries       []operator.AuditEntry
	Next          string
}

// auditPage lists the audit log, newest first, by actor and action.
func (s *Server) auditPage(w http.ResponseWriter, r *http.Request, v visit) {
	q := r.URL.Query()
	body := auditBody{Actor: strings.TrimSpace(q.Get("actor")), Action: strings.TrimSpace(q.Get("action"))}
	d := pageData{Title: "Audit log", Nav: "audit"}.forVisit(&v)
	before, err := strconv.ParseInt(q.Get("before"), 10, 64)
	var bad inputError
	if errors.As(checkFields(field{"Who", body.Actor, maxNameBytes}, field{"Action", body.Action, maxReasonBytes}), &bad) {
		d.Error, d.Body = bad.msg, body
		s.render(w, http.StatusBadRequest, "audit", d)
		return
	}
	if q.Get("before") != "" && (err != nil || before <= 0) {
		d.Error = "The page link is broken: start again from the newest entries."
		d.Body = body
		s.render(w, http.StatusBadRequest, "audit", d)
		return
	}
	entries, err := s.cfg.Audit.Read(r.Context(), operator.AuditFilter{Actor: body.Actor, Action: body.Action, Before: before, Limit: auditPageSize})
	if err != nil {
		s.storeFailed(w, r, &v, "reading the audit log", err)
		return
	}
	body.Entries = entries
	if len(entries) == auditPageSize {
		next := url.Values{"actor": {body.Actor}, "action": {body.Action}, "before": {strconv.FormatInt(entries[len(entries)-1].ID, 10)}}
		body.Next = "/audit?" + next.Encode()
	}
	d.Body = body
	s.render(w, http.StatusOK, "audit", d)
}
