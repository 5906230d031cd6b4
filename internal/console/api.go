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

// api serves a JSON read to a signed-in operator (the session cookie, as
// the pages); anyone else gets 401.
func (s *Server) api(h func(http.ResponseWriter, *http.Request, visit)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := s.visitOf(r)
		switch {
		case errors.Is(err, errSignedOut):
			writeJSONError(w, http.StatusUnauthorized, "not signed in: log in at /login; the API takes the console's session cookie")
		case err != nil:
			s.log.Error("console: session lookup", "error", err)
			writeJSONError(w, http.StatusServiceUnavailable, "the console could not reach its database; try again")
		case s.cfg.Mail == nil:
			writeJSONError(w, http.StatusServiceUnavailable, "mail search is not available: the console runs without the mail read layer")
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
// limit), answered {"mails": [...], "next": cursor}.
func (s *Server) apiSearch(w http.ResponseWriter, r *http.Request, v visit) {
	f, _, err := parseFilter(r.URL.Query())
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
	if err != nil {
		s.log.Error("console: search failed", "error", err)
		writeJSONError(w, http.StatusServiceUnavailable, "the search failed; try again")
		return
	}
	out := struct {
		Mails []mailJSON `json:"mails"`
		Next  string     `json:"next,omitempty"`
	}{Mails: make([]mailJSON, len(page.Mails)), Next: page.Next}
	for i, m := range page.Mails {
		out.Mails[i] = newMailJSON(m)
	}
	writeJSON(w, http.StatusOK, out)
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

// apiLife is GET /api/v1/mail/life?id=<Message-ID>: the mail's life.
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
	writeJSON(w, http.StatusOK, newLifeJSON(life))
}

// The API's documents: snake_case, times RFC 3339 in UTC, empty fields
// left out.
type mailJSON struct {
	MessageID    string          `json:"message_id"`
	Tenant       string          `json:"tenant,omitempty"`
	Status       string          `json:"status"`
	Stream       string          `json:"stream,omitempty"`
	Priority     string          `json:"priority,omitempty"`
	Provider     string          `json:"provider,omitempty"`
	ErrorClass   string          `json:"error_class,omitempty"`
	Confirmation string          `json:"confirmation,omitempty"`
	Attempt      int             `json:"attempt"`
	CreatedAt    *time.Time      `json:"created_at,omitempty"`
	UpdatedAt    *time.Time      `json:"updated_at,omitempty"`
	SentAt       *time.Time      `json:"sent_at,omitempty"`
	Recipients   []recipientJSON `json:"recipients"`
}

type recipientJSON struct {
	Index        int        `json:"index"`
	Address      string     `json:"address"`
	State        string     `json:"state"`
	Attempt      int        `json:"attempt,omitempty"`
	Provider     string     `json:"provider,omitempty"`
	BounceType   string     `json:"bounce_type,omitempty"`
	Status       string     `json:"status,omitempty"`
	Code         int        `json:"code,omitempty"`
	Diagnostic   string     `json:"diagnostic,omitempty"`
	Rule         string     `json:"rule,omitempty"`
	Source       string     `json:"source,omitempty"`
	FeedbackType string     `json:"feedback_type,omitempty"`
	AcceptedAt   *time.Time `json:"accepted_at,omitempty"`
	ResolvedAt   *time.Time `json:"resolved_at,omitempty"`
	UpdatedAt    *time.Time `json:"updated_at,omitempty"`
}

type entryJSON struct {
	At             *time.Time `json:"at,omitempty"`
	Type           string     `json:"type"`
	EventID        string     `json:"event_id,omitempty"`
	RecipientIndex int        `json:"recipient_index"`
	Recipient      string     `json:"recipient,omitempty"`
	Attempt        int        `json:"attempt,omitempty"`
	Provider       string     `json:"provider,omitempty"`
	Class          string     `json:"class,omitempty"`
	Reason         string     `json:"reason,omitempty"`
	NextAttemptAt  *time.Time `json:"next_attempt_at,omitempty"`
	Code           int        `json:"code,omitempty"`
	Status         string     `json:"status,omitempty"`
	Diagnostic     string     `json:"diagnostic,omitempty"`
	Note           string     `json:"note,omitempty"`
}

type webhookJSON struct {
	Endpoint   string     `json:"endpoint"`
	EventID    string     `json:"event_id"`
	EventType  string     `json:"event_type"`
	State      string     `json:"state"`
	Attempts   int        `json:"attempts"`
	LastStatus int        `json:"last_status,omitempty"`
	LastError  string     `json:"last_error,omitempty"`
	NextAt     *time.Time `json:"next_at,omitempty"`
}

type lifeJSON struct {
	Mail       mailJSON      `json:"mail"`
	Entries    []entryJSON   `json:"entries"`
	Template   *templateJSON `json:"template,omitempty"`
	DKIMDomain string        `json:"dkim_domain,omitempty"`
	Webhooks   []webhookJSON `json:"webhooks"`
}

type templateJSON struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	Why     string `json:"why,omitempty"`
}

func utc(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func newMailJSON(m mailquery.Mail) mailJSON {
	out := mailJSON{MessageID: m.MessageID, Tenant: m.Tenant, Status: m.Status, Stream: m.Stream, Priority: m.Priority,
		Provider: m.Provider, ErrorClass: m.ErrorClass, Confirmation: m.Confirmation, Attempt: m.Attempt,
		CreatedAt: utc(m.CreatedAt), UpdatedAt: utc(m.UpdatedAt), SentAt: utc(m.SentAt), Recipients: make([]recipientJSON, len(m.Recipients))}
	for i, r := range m.Recipients {
		out.Recipients[i] = recipientJSON{Index: r.Index, Address: r.Address, State: r.State, Attempt: r.Attempt, Provider: r.Provider,
			BounceType: r.BounceType, Status: r.Status, Code: r.Code, Diagnostic: r.Diagnostic, Rule: r.Rule, Source: r.Source,
			FeedbackType: r.FeedbackType, AcceptedAt: utc(r.AcceptedAt), ResolvedAt: utc(r.ResolvedAt), UpdatedAt: utc(r.UpdatedAt)}
	}
	return out
}

func newLifeJSON(l mailquery.Life) lifeJSON {
	out := lifeJSON{Mail: newMailJSON(l.Mail), DKIMDomain: l.DKIMDomain,
		Entries: make([]entryJSON, len(l.Entries)), Webhooks: make([]webhookJSON, len(l.Webhooks))}
	for i, e := range l.Entries {
		out.Entries[i] = entryJSON{At: utc(e.At), Type: e.Type, EventID: e.EventID, RecipientIndex: e.RecipientIndex,
			Recipient: e.Recipient, Attempt: e.Attempt, Provider: e.Provider, Class: e.Class, Reason: e.Reason,
			NextAttemptAt: utc(e.NextAttemptAt), Code: e.Code, Status: e.Status, Diagnostic: e.Diagnostic, Note: e.Note}
	}
	for i, h := range l.Webhooks {
		out.Webhooks[i] = webhookJSON{Endpoint: h.Endpoint, EventID: h.EventID, EventType: h.EventType, State: h.State,
			Attempts: h.Attempts, LastStatus: h.LastStatus, LastError: h.LastError, NextAt: utc(h.NextAt)}
	}
	if l.Template != nil {
		out.Template = &templateJSON{Name: l.Template.Name, Version: l.Template.Version, Why: l.Template.Why}
	}
	return out
}
