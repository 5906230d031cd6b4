package console

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/operator"
)

// api serves a mail read as JSON to a signed-in operator (the session
// cookie, as the pages); anyone else gets 401.
func (s *Server) api(h func(http.ResponseWriter, *http.Request, visit)) http.Handler {
	return s.apiNeeding(s.cfg.Mail != nil, "mail search is not available: the console runs without the mail read layer", h)
}

// fleetAPI serves a fleet read (queues, dead letters by reason, relays) as
// api serves a mail read.
func (s *Server) fleetAPI(h func(http.ResponseWriter, *http.Request, visit)) http.Handler {
	return s.apiNeeding(s.cfg.Fleet != nil, noFleetAPI, h)
}

// apiNeeding serves h to a signed-in operator when the part it reads is
// available, else answers 503 with unavailable.
func (s *Server) apiNeeding(available bool, unavailable string, h func(http.ResponseWriter, *http.Request, visit)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := s.visitOf(r)
		switch {
		case errors.Is(err, errSignedOut):
			writeJSONError(w, http.StatusUnauthorized, "not signed in: log in at /login; the API takes the console's session cookie")
		case err != nil:
			s.log.Error("console: session lookup", "error", err)
			writeJSONError(w, http.StatusServiceUnavailable, "the console could not reach its database; try again")
		case !available:
			writeJSONError(w, http.StatusServiceUnavailable, unavailable)
		default:
			h(w, r, v)
		}
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// apiSearch is GET /api/v1/mail: the search page's query parameters (and
// limit), answered as mailquery's Page: {"mails": [...], "next": cursor},
// the JSON names postctl mail find -o json prints too.
func (s *Server) apiSearch(w http.ResponseWriter, r *http.Request, v visit) {
	f, _, err := parseFilter(r.URL.Query(), time.Now())
	var bad inputError
	if errors.As(err, &bad) {
		writeJSONError(w, http.StatusBadRequest, bad.msg)
		return
	}
	if f.Limit, err = parseLimit(r.URL.Query().Get("limit")); err != nil {
		writeJSONError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.cfg.Audit.Write(r.Context(), v.session.Operator, "api.mail.search", auditFilter(f), operator.ResultOK, v.client); err != nil {
		s.log.Error("console: audit entry not written", "error", err)
		writeJSONError(w, http.StatusServiceUnavailable, "the audit entry could not be written; try again")
		return
	}
	page, err := s.cfg.Mail.Find(r.Context(), f)
	if errors.Is(err, mailquery.ErrInvalidFilter) {
		writeJSONError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		s.log.Error("console: search failed", "error", err)
		writeJSONError(w, http.StatusServiceUnavailable, "the search failed; try again")
		return
	}
	writeJSON(w, http.StatusOK, page)
}

func parseLimit(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > mailquery.MaxLimit {
		return 0, errors.New("limit: want a whole number from 1 to 500")
	}
	return n, nil
}

// apiLife is GET /api/v1/mail/life?id=<Message-ID>: the mail's life, as
// mailquery's Life (postctl mail show -o json's names).
func (s *Server) apiLife(w http.ResponseWriter, r *http.Request, v visit) {
	id := bareMessageID(r.URL.Query().Get("id"))
	if id == "" || checkFields(field{"Message-ID", id, maxMessageIDBytes}) != nil {
		writeJSONError(w, http.StatusBadRequest, "id: give the Message-ID")
		return
	}
	if err := s.cfg.Audit.Write(r.Context(), v.session.Operator, "api.mail.life", map[string]string{"message_id": id}, operator.ResultOK, v.client); err != nil {
		s.log.Error("console: audit entry not written", "error", err)
		writeJSONError(w, http.StatusServiceUnavailable, "the audit entry could not be written; try again")
		return
	}
	life, err := s.cfg.Mail.Life(r.Context(), id)
	if s.notFound(err) {
		writeJSONError(w, http.StatusNotFound, "no mail has this Message-ID")
		return
	}
	if err != nil {
		s.log.Error("console: life failed", "error", err)
		writeJSONError(w, http.StatusServiceUnavailable, "reading the mail failed; try again")
		return
	}
	writeJSON(w, http.StatusOK, life)
}
