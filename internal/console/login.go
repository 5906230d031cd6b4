package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/postline/postline/internal/operator"
)

// loginFormLifetime bounds how long a login form may wait before it is
// sent.
const loginFormLifetime = time.Hour

// maxNameBytes bounds the name a failed login is audited under.
const maxNameBytes = 64

// loginBody is the login page's data.
type loginBody struct {
	Name  string
	Nonce string
	// Next is where a successful login goes: the page that asked for it.
	Next string
}

// loginForm shows the login form with a fresh check token, also set as a
// cookie: a login posted from another site carries neither.
func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.URL.Query().Get("next"))
	if _, err := s.visitOf(r); err == nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	s.showLogin(w, http.StatusOK, "", next, "")
}

func (s *Server) showLogin(w http.ResponseWriter, status int, name, next, msg string) {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	nonce := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, newCookie(loginCookie, nonce, int(loginFormLifetime/time.Second), s.cfg.Secure))
	s.render(w, status, "login", pageData{Title: "Log in", Error: msg, Body: loginBody{Name: name, Nonce: nonce, Next: next}})
}

// login checks the form's token against its cookie, then the name and
// password, and starts a session. Every attempt is audited under the name
// given; the password is never kept.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	client := operator.ClientAddress(r.RemoteAddr)
	if err := parseForm(w, r, 0); err != nil {
		s.showLogin(w, http.StatusBadRequest, "", "/mail", "The form could not be read. Try again.")
		return
	}
	name, next := r.PostForm.Get("name"), localPath(r.PostForm.Get("next"))
	// Audited as the account it names: names are lower case (operator.Login).
	v := visit{session: operator.Session{Operator: auditedName(strings.ToLower(strings.TrimSpace(name)))}, client: client}
	c, err := r.Cookie(cookieName(loginCookie, s.cfg.Secure))
	nonce := r.PostForm.Get(csrfField)
	if err != nil || nonce == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(nonce)) != 1 {
		s.audit(r.Context(), v, "login", nil, operator.ResultNoCSRF)
		s.showLogin(w, http.StatusForbidden, v.session.Operator, next, "This login form expired or came from another site. It has been reloaded: log in again.")
		return
	}
	sess, err := s.cfg.Accounts.Login(r.Context(), name, r.PostForm.Get("password"), client)
	var throttled *operator.ThrottledError
	switch {
	case errors.As(err, &throttled):
		s.audit(r.Context(), v, "login", nil, operator.ResultThrottled)
		seconds := int(math.Ceil(throttled.RetryAfter.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(seconds))
		s.showLogin(w, http.StatusTooManyRequests, v.session.Operator, next, "Too many wrong passwords for this account or from your address. Wait "+
			strconv.Itoa(seconds)+" seconds before the next try; if you forgot the password, ask an administrator to set a new one (postctl operators passwd).")
	case errors.Is(err, operator.ErrWrongPassword):
		s.audit(r.Context(), v, "login", nil, operator.ResultWrong)
		s.showLogin(w, http.StatusUnauthorized, v.session.Operator, next, "Wrong name or password. Check both and try again.")
	case err != nil:
		s.log.Error("console: login failed", "error", err)
		s.showLogin(w, http.StatusServiceUnavailable, v.session.Operator, next, "The console could not reach its database. Try again in a moment.")
	default:
		v.session.Operator = sess.Operator
		s.audit(r.Context(), v, "login", nil, operator.ResultOK)
		// A session this browser held before ends: one browser, one session.
		if old, err := r.Cookie(cookieName(sessionCookie, s.cfg.Secure)); err == nil && old.Value != "" {
			if err := s.cfg.Accounts.Logout(r.Context(), old.Value); err != nil {
				s.log.Warn("console: ending the session replaced by a login", "error", err)
			}
		}
		maxAge := int(time.Until(sess.ExpiresAt) / time.Second)
		http.SetCookie(w, newCookie(sessionCookie, sess.Token, maxAge, s.cfg.Secure))
		http.SetCookie(w, newCookie(loginCookie, "", -1, s.cfg.Secure))
		http.Redirect(w, r, next, http.StatusSeeOther)
	}
}

// logout ends the session in the store, so its cookie is refused from now
// on even if kept, and deletes the cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request, v visit) {
	if err := s.cfg.Accounts.Logout(r.Context(), v.token); err != nil {
		s.storeFailed(w, r, &v, "ending the session", err)
		return
	}
	s.audit(r.Context(), v, "logout", nil, operator.ResultOK)
	http.SetCookie(w, newCookie(sessionCookie, "", -1, s.cfg.Secure))
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
