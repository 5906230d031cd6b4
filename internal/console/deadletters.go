package console

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/postline/postline/internal/operator"
	"github.com/postline/postline/internal/redrive"
)

// deadLettersShown is the most dead letters the page lists: the newest.
const deadLettersShown = 100

// deadLettersBody is the dead-letter page's data.
type deadLettersBody struct {
	Form        redriveForm
	Listed      bool
	Unavailable bool
	Letters     []redrive.DeadLetter // newest first
	Matched     int
	Shown       int
}

// deadLettersPage lists the dead letters a filter selects, newest first,
// at most deadLettersShown of them, with how many matched in all.
func (s *Server) deadLettersPage(w http.ResponseWriter, r *http.Request, v visit) {
	q := r.URL.Query()
	body := deadLettersBody{Form: readRedriveForm(q), Listed: q.Has("list"), Unavailable: s.cfg.Redrive == nil, Shown: deadLettersShown}
	body.Form.Rate, body.Form.Note = "", ""
	d := pageData{Title: "Dead letters", Nav: "deadletters"}.forVisit(&v)
	status := http.StatusOK
	filter, form, err := parseRedriveFilter(body.Form, time.Now())
	var bad inputError
	switch {
	case errors.As(err, &bad):
		d.Error, body.Listed, status = bad.msg+" Correct it and list again.", false, http.StatusBadRequest
	case err != nil:
		s.storeFailed(w, r, &v, "reading the filter", err)
		return
	case body.Unavailable:
		d.Error, body.Listed = noRedrive, false
	case body.Listed:
		body.Form = form
		if err := s.cfg.Audit.Write(r.Context(), v.session.Operator, "deadletters.list", auditedRedrive{Filter: form}, operator.ResultOK, v.client); err != nil {
			s.storeFailed(w, r, &v, "writing the audit entry", err)
			return
		}
		if body.Letters, body.Matched, err = newestDeadLetters(r.Context(), s.cfg.Redrive, filter, deadLettersShown); err != nil {
			s.log.Error("console: listing dead letters failed", "error", err)
			s.fail(w, r, &v, http.StatusServiceUnavailable, "The console could not read the dead-letter topic. Check that Kafka answers (postctl status), then list again.")
			return
		}
	}
	d.Body = body
	s.render(w, status, "deadletters", d)
}

// newestDeadLetters reads every dead letter f selects and keeps the n
// newest, newest first, with the count of all.
func newestDeadLetters(ctx context.Context, rd Redriver, f redrive.Filter, n int) ([]redrive.DeadLetter, int, error) {
	var (
		kept    []redrive.DeadLetter
		matched int
	)
	older := func(a, b redrive.DeadLetter) int { return b.Time.Compare(a.Time) } // newest first
	err := rd.List(ctx, f, func(l redrive.DeadLetter) error {
		matched++
		if len(kept) == n && !l.Time.After(kept[n-1].Time) {
			return nil
		}
		i, _ := slices.BinarySearchFunc(kept, l, older)
		kept = slices.Insert(kept, i, l)
		if len(kept) > n {
			kept = kept[:n]
		}
		return nil
	})
	return kept, matched, err
}
