package console

import (
	"context"
	"crypto/subtle"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/postline/postline/internal/operator"
)

// Cookie and form names. Over TLS the cookies take the __Host- prefix: the
// browser then keeps them to this host, path / and HTTPS only.
const (
	sessionCookie = "postline_console_session"
	loginCookie   = "postline_console_login"
	csrfField     = "csrf"
	csrfHeader    = "X-CSRF-Token"
	maxFormBytes  = 64 << 10
)

// cookieName is base, with the __Host- prefix when served over TLS.
func cookieName(base string, secure bool) string {
	if secure {
		return "__Host-" + base
	}
	return base
}

// newCookie is a cookie no script can read and no other site's request
// carries; maxAge < 0 deletes it.
func newCookie(base, value string, maxAge int, secure bool) *http.Cookie {
	return &http.Cookie{Name: cookieName(base, secure), Value: value, Path: "/", MaxAge: maxAge,
		Secure: secure, HttpOnly: true, SameSite: http.SameSiteStrictMode}
}

// visit is a signed-in request: its session, the session's token (for
// logout) and the client's address.
type visit struct {
	session operator.Session
	token   string
	client  string
}

// errSignedOut: the request has no live session.
var errSignedOut = errors.New("console: not signed in")

// visitOf finds the request's session: errSignedOut when it has none, or
// the store's error.
func (s *Server) visitOf(r *http.Request) (visit, error) {
	v := visit{client: operator.ClientAddress(r.RemoteAddr)}
	c, err := r.Cookie(cookieName(sessionCookie, s.cfg.Secure))
	if err != nil || c.Value == "" {
		return v, errSignedOut
	}
	sess, err := s.cfg.Accounts.Lookup(r.Context(), c.Value)
	if errors.Is(err, operator.ErrNoSession) {
		return v, errSignedOut
	}
	if err != nil {
		return v, err
	}
	v.session, v.token = sess, c.Value
	return v, nil
}

// csrfValid reports whether the request carries the session's CSRF token,
// in the form or the X-CSRF-Token header, and does not say it came from
// another site. The form must be parsed.
func csrfValid(r *http.Request, want string) bool {
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return false
	}
	got := r.PostForm.Get(csrfField)
	if got == "" {
		got = r.Header.Get(csrfHeader)
	}
	return got != "" && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// page serves h to a signed-in operator; anyone else is sent to the login.
func (s *Server) page(h func(http.ResponseWriter, *http.Request, visit)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := s.visitOf(r)
		switch {
		case errors.Is(err, errSignedOut):
			http.Redirect(w, r, "/login?"+url.Values{"next": {r.URL.RequestURI()}}.Encode(), http.StatusSeeOther)
		case err != nil:
			s.storeFailed(w, r, nil, "looking up the session", err)
		default:
			h(w, r, v)
		}
	})
}

// actionFunc does one action's work for a request whose form is parsed,
// session, CSRF token and role checked. It returns what the action was on
// (for the audit log) and where to send the browser after; an error of
// type inputError is the operator's to fix.
type actionFunc func(ctx context.Context, r *http.Request, v visit) (target any, next string, err error)

// inputError is a request field the action refused, said so the operator
// can fix it.
type inputError struct{ msg string }

func (e inputError) Error() string { return e.msg }

// unavailableError is a part of the console that this process runs
// without (no Kafka for re-drives, say), said so the operator knows where
// to turn: a 503.
type unavailableError struct{ msg string }

func (e unavailableError) Error() string { return e.msg }

// parseForm reads a POST's form, bounded: a urlencoded one of at most
// maxFormBytes, or, when maxUpload > 0, also a multipart one (a file
// upload) of at most maxUpload bytes, held in memory.
func parseForm(w http.ResponseWriter, r *http.Request, maxUpload int64) error {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		if maxUpload <= 0 {
			return errors.New("console: a multipart form where none is taken")
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxUpload)
		return r.ParseMultipartForm(maxUpload)
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	return r.ParseForm()
}

// outcome is what a guarded form did: what it was on (for the audit log),
// and either where to send the browser (next) or the page to show (page
// with its data: a count or a preview before a confirmation).
type outcome struct {
	target any
	next   string
	page   string
	data   pageData
}

// action serves a state-changing POST: it needs a session, the session's
// CSRF token and a role that may act, else it changes nothing and answers
// 403; then it runs do and redirects. Every outcome, refusals too, is
// audited as name.
func (s *Server) action(name string, do actionFunc) http.Handler {
	return s.guarded(name, 0, func(ctx context.Context, r *http.Request, v visit) (outcome, error) {
		target, next, err := do(ctx, r, v)
		return outcome{target: target, next: next}, err
	})
}

// guarded serves a POST with action's checks and audit; do's outcome is a
// redirect or a page. maxUpload > 0 takes a multipart form that large.
func (s *Server) guarded(name string, maxUpload int64, do func(ctx context.Context, r *http.Request, v visit) (outcome, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := s.checkedPost(w, r, name, maxUpload)
		if !ok {
			return
		}
		if !v.session.Role.CanAct() {
			s.audit(r.Context(), v, name, nil, operator.ResultDenied)
			s.fail(w, r, &v, http.StatusForbidden, "Your account is a viewer: it can search and read, not act. Ask an operator to do this, or an administrator for the operator role.")
			return
		}
		out, err := do(r.Context(), r, v)
		var (
			bad inputError
			off unavailableError
		)
		switch {
		case errors.As(err, &off):
			s.audit(r.Context(), v, name, out.target, operator.ResultFailed)
			s.fail(w, r, &v, http.StatusServiceUnavailable, off.msg)
		case errors.As(err, &bad):
			s.audit(r.Context(), v, name, out.target, operator.ResultInvalid)
			s.fail(w, r, &v, http.StatusBadRequest, bad.msg+" Go back, correct it and send it again.")
		case err != nil:
			s.audit(r.Context(), v, name, out.target, operator.ResultFailed)
			s.storeFailed(w, r, &v, name, err)
		default:
			if err := s.cfg.Audit.Write(r.Context(), v.session.Operator, name, out.target, operator.ResultOK, v.client); err != nil {
				// Done but not recorded: said loudly, since the log must hold every action.
				s.log.Error("console: action done but its audit entry was not written", "action", name, "operator", v.session.Operator, "error", err)
			}
			if out.page != "" {
				s.render(w, http.StatusOK, out.page, out.data.forVisit(&v))
				return
			}
			http.Redirect(w, r, out.next, http.StatusSeeOther)
		}
	})
}

// signedIn serves a POST that needs a session and its CSRF token but no
// role (logout).
func (s *Server) signedIn(h func(http.ResponseWriter, *http.Request, visit)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v, ok := s.checkedPost(w, r, "logout", 0); ok {
			h(w, r, v)
		}
	})
}

// checkedPost finds a POST's session and checks its CSRF token; on a
// refusal it has answered 403 (audited when there is a session).
func (s *Server) checkedPost(w http.ResponseWriter, r *http.Request, name string, maxUpload int64) (visit, bool) {
	v, err := s.visitOf(r)
	if errors.Is(err, errSignedOut) {
		s.fail(w, r, nil, http.StatusForbidden, "You are not signed in (or your session ended): nothing was changed. Log in and try again.")
		return v, false
	}
	if err != nil {
		s.storeFailed(w, r, nil, "looking up the session", err)
		return v, false
	}
	if err := parseForm(w, r, maxUpload); err != nil {
		s.fail(w, r, &v, http.StatusBadRequest, "The form could not be read (too large?): nothing was changed.")
		return v, false
	}
	if !csrfValid(r, v.session.CSRF) {
		s.audit(r.Context(), v, name, nil, operator.ResultNoCSRF)
		s.fail(w, r, &v, http.StatusForbidden, "This form did not carry the console's check token (a stale page, or a request from another site): nothing was changed. Reload the page and try again.")
		return v, false
	}
	return v, true
}

// audit writes an entry, logging a failure: used where the request's own
// answer does not depend on it.
func (s *Server) audit(ctx context.Context, v visit, action string, target any, result string) {
	if err := s.cfg.Audit.Write(ctx, v.session.Operator, action, target, result, v.client); err != nil {
		s.log.Error("console: audit entry not written", "action", action, "operator", v.session.Operator, "result", result, "error", err)
	}
}

// localPath is next when it is a path of this console ("/mail?..."), else
// "/mail": a login must not send the browser to another site.
func localPath(next string) string {
	if len(next) > maxCursorBytes+maxMessageIDBytes || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") ||
		strings.ContainsAny(next, "\\\r\n") {
		return "/mail"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return "/mail"
	}
	return next
}
