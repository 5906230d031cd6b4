package console

import (
	"errors"
	"net/http"
	"time"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/operator"
)

// searchBody is the search page's data.
type searchBody struct {
	Form        mailquery.Filter
	Since       string // the form's since and until, as typed
	Until       string
	States      []string
	Submitted   bool
	Unavailable bool
	Mails       []mailquery.Mail
	Next        string // the next page's URL, "" on the last
}

const noReader = "Mail search is not available: this console runs without the mail read layer (internal/mailquery). Suppressions and the audit log work."

// searchPage shows the search form and, once asked, a page of results,
// newest first, each recipient with its state.
func (s *Server) searchPage(w http.ResponseWriter, r *http.Request, v visit) {
	q := r.URL.Query()
	body := searchBody{States: mailquery.States, Since: q.Get("since"), Until: q.Get("until"), Unavailable: s.cfg.Mail == nil}
	d := pageData{Title: "Find mail", Nav: "mail"}.forVisit(&v)
	f, submitted, err := parseFilter(q, time.Now())
	body.Form, body.Submitted = f, submitted
	var bad inputError
	switch {
	case errors.As(err, &bad):
		d.Error = bad.msg
	case body.Unavailable && submitted:
		d.Error = noReader
	case submitted:
		// Audited before it is read: no result is shown without its entry.
		if err := s.cfg.Audit.Write(r.Context(), v.session.Operator, "mail.search", auditFilter(f), operator.ResultOK, v.client); err != nil {
			s.storeFailed(w, r, &v, "writing the audit entry", err)
			return
		}
		page, err := s.cfg.Mail.Find(r.Context(), f)
		var refused *mailquery.FilterError
		switch {
		case errors.As(err, &refused):
			d.Error = "The search was refused: " + refused.Field + " " + refused.Problem + ". Correct it, or start a new search."
		case errors.Is(err, mailquery.ErrInvalidFilter):
			d.Error = "The search was refused (" + err.Error() + "). Correct it, or start a new search."
		case err != nil:
			s.storeFailed(w, r, &v, "searching mail", err)
			return
		}
		body.Mails = page.Mails
		if page.Next != "" {
			next := f
			next.Cursor = page.Next
			body.Next = "/mail?" + filterValues(next).Encode()
		}
	}
	d.Body = body
	status := http.StatusOK
	if d.Error != "" {
		status = http.StatusBadRequest
		if body.Unavailable {
			status = http.StatusServiceUnavailable
		}
	}
	s.render(w, status, "search", d)
}

// lifeBody is the mail page's data.
type lifeBody struct {
	Life mailquery.Life
	// CanRedrive: the mail failed or is dead and this console re-drives.
	CanRedrive bool
}

// lifePage shows one mail's whole life: its row, its recipients, every
// transition in time order, its template and signature and its webhooks.
func (s *Server) lifePage(w http.ResponseWriter, r *http.Request, v visit) {
	id := bareMessageID(r.URL.Query().Get("id"))
	if id == "" || checkFields(field{"Message-ID", id, maxMessageIDBytes}) != nil {
		s.fail(w, r, &v, http.StatusBadRequest, "Give a Message-ID: open a mail from the search results, or search by Message-ID.")
		return
	}
	if s.cfg.Mail == nil {
		s.fail(w, r, &v, http.StatusServiceUnavailable, noReader)
		return
	}
	if err := s.cfg.Audit.Write(r.Context(), v.session.Operator, "mail.view", map[string]string{"message_id": id}, operator.ResultOK, v.client); err != nil {
		s.storeFailed(w, r, &v, "writing the audit entry", err)
		return
	}
	life, err := s.cfg.Mail.Life(r.Context(), id)
	if s.notFound(err) {
		s.fail(w, r, &v, http.StatusNotFound, "No mail has the Message-ID "+id+". Check it, or search by recipient; mail past the retention period is purged.")
		return
	}
	if err != nil {
		s.storeFailed(w, r, &v, "reading the mail's life", err)
		return
	}
	s.render(w, http.StatusOK, "mail", pageData{Title: "Mail " + id, Nav: "mail", Body: lifeBody{Life: life,
		CanRedrive: s.cfg.Redrive != nil && (life.Mail.Status == string(idempotency.StatusFailed) || life.Mail.Status == string(idempotency.StatusDead))}}.forVisit(&v))
}
