package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/postline/postline/internal/operator"
	"github.com/postline/postline/internal/suppression"
)

// suppressionsPageSize is how many entries one page lists.
const suppressionsPageSize = 100

// maxNoteBytes bounds an operator's note on a suppression.
const maxNoteBytes = 500

// suppressionsBody is the suppressions page's data.
type suppressionsBody struct {
	Address, Tenant, Reason, Stream string
	Reasons                         []suppression.Reason
	Entries                         []suppression.Entry
	Next                            string
	Searched                        bool
}

// notices are the messages an action's redirect asks the page to show.
var notices = map[string]string{
	"added":   "Suppression added: mail to this address is not sent on that stream.",
	"removed": "Suppression removed: mail to this address is sent again.",
	"nothing": "There was no such suppression: nothing was removed.",
}

// suppressionsPage searches the suppression lists by address prefix,
// tenant, reason and stream, with the add form and, for operators, a
// remove button per entry.
func (s *Server) suppressionsPage(w http.ResponseWriter, r *http.Request, v visit) {
	q := r.URL.Query()
	get := func(name string) string { return strings.TrimSpace(q.Get(name)) }
	body := suppressionsBody{Address: get("address"), Tenant: get("tenant"), Reason: get("reason"), Stream: get("stream"),
		Reasons: suppression.Reasons(), Searched: q.Has("search")}
	d := pageData{Title: "Suppressions", Nav: "suppressions", Notice: notices[q.Get("done")]}.forVisit(&v)
	var bad inputError
	if err := checkFields(field{"Address", body.Address, maxAddressBytes}, field{"Tenant", body.Tenant, maxTenantBytes},
		field{"Reason", body.Reason, maxReasonBytes}, field{"Stream", body.Stream, maxReasonBytes},
		field{"Page link", q.Get("after_tenant") + q.Get("after_stream") + q.Get("after_address"), maxCursorBytes}); errors.As(err, &bad) {
		d.Error, body.Searched = bad.msg, false
	}
	if body.Searched {
		f := suppression.Filter{AddressPrefix: body.Address, Reason: suppression.Reason(body.Reason),
			Stream: suppression.Stream(body.Stream), Limit: suppressionsPageSize}
		if q.Has("tenant") && body.Tenant != "" {
			f.Tenant = &body.Tenant
		}
		if q.Has("after_address") {
			f.After = &suppression.Key{Tenant: q.Get("after_tenant"), Stream: suppression.Stream(q.Get("after_stream")), Address: q.Get("after_address")}
		}
		target := map[string]string{"address_prefix": body.Address, "tenant": body.Tenant, "reason": body.Reason, "stream": body.Stream}
		if err := s.cfg.Audit.Write(r.Context(), v.session.Operator, "suppression.search", target, operator.ResultOK, v.client); err != nil {
			s.storeFailed(w, r, &v, "writing the audit entry", err)
			return
		}
		entries, err := s.cfg.Suppressions.List(r.Context(), f)
		switch {
		case errors.Is(err, suppression.ErrInvalid):
			d.Error = "The search was refused: " + strings.TrimPrefix(err.Error(), "suppression list: ") + "."
		case err != nil:
			s.storeFailed(w, r, &v, "listing suppressions", err)
			return
		}
		body.Entries = entries
		if len(entries) == suppressionsPageSize {
			last := entries[len(entries)-1]
			next := url.Values{"search": {"1"}, "address": {body.Address}, "tenant": {body.Tenant}, "reason": {body.Reason},
				"stream": {body.Stream}, "after_tenant": {last.Tenant}, "after_stream": {string(last.Stream)}, "after_address": {last.Address}}
			body.Next = "/suppressions?" + next.Encode()
		}
	}
	d.Body = body
	status := http.StatusOK
	if d.Error != "" {
		status = http.StatusBadRequest
	}
	s.render(w, status, "suppressions", d)
}

// suppressionTarget is a suppression as the audit log keeps it.
type suppressionTarget struct {
	Tenant  string `json:"tenant"`
	Stream  string `json:"stream"`
	Address string `json:"address"`
	Note    string `json:"note,omitempty"`
}

// formKey reads the tenant, stream and address of an add or remove form.
func formKey(r *http.Request) (suppressionTarget, error) {
	t := suppressionTarget{Tenant: strings.TrimSpace(r.PostForm.Get("tenant")), Stream: strings.TrimSpace(r.PostForm.Get("stream")),
		Address: strings.TrimSpace(r.PostForm.Get("address")), Note: strings.TrimSpace(r.PostForm.Get("note"))}
	if t.Address == "" {
		return t, inputError{"Give the address."}
	}
	if err := checkFields(field{"Address", t.Address, maxAddressBytes}, field{"Tenant", t.Tenant, maxTenantBytes},
		field{"Stream", t.Stream, maxReasonBytes}, field{"Note", t.Note, maxNoteBytes}); err != nil {
		return suppressionTarget{}, err
	}
	if _, err := suppression.ParseStream(t.Stream); err != nil {
		return t, inputError{"Pick a stream: transactional, bulk or * (every stream)."}
	}
	return t, nil
}

// backTo is the suppressions page listing address, showing notice done.
func backTo(address, done string) string {
	return "/suppressions?" + url.Values{"search": {"1"}, "address": {address}, "done": {done}}.Encode()
}

// addSuppression adds an operator's manual entry that never expires.
func (s *Server) addSuppression(ctx context.Context, r *http.Request, v visit) (any, string, error) {
	t, err := formKey(r)
	if err != nil {
		return t, "", err
	}
	e := suppression.Entry{Tenant: t.Tenant, Stream: suppression.Stream(t.Stream), Address: t.Address,
		Reason: suppression.ReasonManual, Source: "console:" + v.session.Operator, Note: t.Note}
	if err := e.Validate(); err != nil {
		return t, "", inputError{"The suppression was refused: " + err.Error() + "."}
	}
	if _, err := s.cfg.Suppressions.Add(ctx, []suppression.Entry{e}); err != nil {
		return t, "", err
	}
	return t, backTo(t.Address, "added"), nil
}

// removeSuppression lifts one entry (tenant, stream, address).
func (s *Server) removeSuppression(ctx context.Context, r *http.Request, _ visit) (any, string, error) {
	t, err := formKey(r)
	if err != nil {
		return t, "", err
	}
	t.Note = ""
	n, err := s.cfg.Suppressions.Remove(ctx, []suppression.Key{{Tenant: t.Tenant, Stream: suppression.Stream(t.Stream), Address: t.Address}})
	if errors.Is(err, suppression.ErrInvalid) {
		return t, "", inputError{"The removal was refused: " + err.Error() + "."}
	}
	if err != nil {
		return t, "", err
	}
	if n == 0 {
		return t, backTo(t.Address, "nothing"), nil
	}
	return t, backTo(t.Address, "removed"), nil
}
