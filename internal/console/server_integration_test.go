package console

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/operator"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/testenv"
)

// cheapHash keeps the many logins of these tests light on a shared machine.
var cheapHash = operator.HashParams{MemoryKiB: 1024, Passes: 1, Lanes: 1}

// stack is a console on an isolated schema of the real PostgreSQL, with a
// viewer (vic) and an operator (olga), and a fake mail reader.
type stack struct {
	url          string
	accounts     *operator.Store
	audit        *operator.AuditLog
	suppressions *suppression.Store
	mail         *fakeMail
}

const (
	olgaPassword = "olga's long password"
	vicPassword  = "vic's long password!"
)

func newStack(t *testing.T) *stack { return newStackWith(t, nil) }

// newStackWith is newStack whose Config wire adds to (the re-drive, the
// webhook queue) on the schema's pool.
func newStackWith(t *testing.T, wire func(pool *pgxpool.Pool, sup *suppression.Store, cfg *Config)) *stack {
	t.Helper()
	_, pool := testenv.NewSchema(t)
	ctx := context.Background()
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	accounts, err := operator.New(operator.Config{Hash: cheapHash}, pool)
	if err != nil {
		t.Fatal(err)
	}
	sup, err := suppression.New(suppression.Config{}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		name, password string
		role           operator.Role
	}{{"olga", olgaPassword, operator.RoleOperator}, {"vic", vicPassword, operator.RoleViewer}} {
		if err := accounts.Add(ctx, a.name, a.role, a.password); err != nil {
			t.Fatal(err)
		}
	}
	m, l := sampleMail()
	mail := &fakeMail{mails: []mailquery.Mail{m}, lives: map[string]mailquery.Life{m.MessageID: l}}
	st := &stack{accounts: accounts, audit: operator.NewAuditLog(pool, nil), suppressions: sup, mail: mail}
	cfg := Config{Accounts: accounts, Audit: st.audit, Suppressions: sup, Mail: mail, NotFound: errNoSuchMail}
	if wire != nil {
		wire(pool, sup, &cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	st.url = ts.URL
	return st
}

// browser is one client with its cookies, not following redirects.
type browser struct {
	t      *testing.T
	base   string
	client *http.Client
}

func (st *stack) browser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: st.url, client: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) do(req *http.Request) (int, string) {
	b.t.Helper()
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (b *browser) get(path string) (int, string) {
	req, _ := http.NewRequest(http.MethodGet, b.base+path, nil)
	return b.do(req)
}

func (b *browser) post(path string, form url.Values) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrfOf is the CSRF token a page's forms carry.
func (b *browser) csrfOf(path string) string {
	b.t.Helper()
	_, body := b.get(path)
	m := csrfInput.FindStringSubmatch(body)
	if m == nil {
		b.t.Fatalf("GET %s has no CSRF field:\n%s", path, body)
	}
	return m[1]
}

// login fills in and sends the login form, returning the answer's status.
func (b *browser) login(name, password string) (int, string) {
	b.t.Helper()
	return b.post("/login", url.Values{"csrf": {b.csrfOf("/login")}, "name": {name}, "password": {password}})
}

func (b *browser) mustLogin(name, password string) {
	b.t.Helper()
	if status, body := b.login(name, password); status != http.StatusSeeOther {
		b.t.Fatalf("login %s = %d:\n%s", name, status, body)
	}
}

func (b *browser) sessionCookie() *http.Cookie {
	u, _ := url.Parse(b.base)
	for _, c := range b.client.Jar.Cookies(u) {
		if c.Name == sessionCookie {
			return c
		}
	}
	b.t.Fatal("no session cookie")
	return nil
}

func (st *stack) addSuppression(t *testing.T, address string) {
	t.Helper()
	if _, err := st.suppressions.Add(context.Background(), []suppression.Entry{{Address: address, Stream: "*", Reason: "hard_bounce", Source: "dsn"}}); err != nil {
		t.Fatal(err)
	}
}

func (st *stack) suppressed(t *testing.T, address string) bool {
	t.Helper()
	entries, err := st.suppressions.List(context.Background(), suppression.Filter{AddressPrefix: address})
	if err != nil {
		t.Fatal(err)
	}
	return len(entries) > 0
}

// auditResults are the audit log's action:result pairs, oldest first.
func (st *stack) auditResults(t *testing.T, actor string) []string {
	t.Helper()
	entries, err := st.audit.Read(context.Background(), operator.AuditFilter{Actor: actor})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range slices.Backward(entries) {
		out = append(out, e.Action+":"+e.Result)
	}
	return out
}

func TestLoginSearchAndOpenAMail(t *testing.T) {
	st := newStack(t)
	b := st.browser(t)
	if status, _ := b.get("/mail"); status != http.StatusSeeOther {
		t.Fatalf("GET /mail signed out = %d, want a redirect to the login", status)
	}
	// A link to a mail, opened signed out, comes back to that mail after the login.
	want := "/mail/view?id=" + url.QueryEscape("m1@postline.test")
	resp, err := b.client.Get(st.url + want)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loginURL := resp.Header.Get("Location")
	_, body := b.get(loginURL)
	csrf := csrfInput.FindStringSubmatch(body)
	next := regexp.MustCompile(`name="next" value="([^"]*)"`).FindStringSubmatch(body)
	if csrf == nil || next == nil || html.UnescapeString(next[1]) != want {
		t.Fatalf("login page at %s keeps next %v, want %s:\n%s", loginURL, next, want, body)
	}
	req, _ := http.NewRequest(http.MethodPost, st.url+"/login", strings.NewReader(url.Values{"csrf": {csrf[1]},
		"name": {"vic"}, "password": {vicPassword}, "next": {html.UnescapeString(next[1])}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
		t.Fatalf("login = %d to %q, want a redirect to %s", resp.StatusCode, resp.Header.Get("Location"), want)
	}
	status, body := b.get("/mail?search=1&recipient=bob@example.com&since=2026-12-01")
	if status != 200 || !strings.Contains(body, "m1@postline.test") || !strings.Contains(body, "bounced") {
		t.Fatalf("search = %d:\n%s", status, body)
	}
	if f := st.mail.filters[len(st.mail.filters)-1]; f.Recipient != "bob@example.com" || !f.Since.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("the reader got filter %+v", f)
	}
	status, body = b.get("/mail/view?id=" + url.QueryEscape("m1@postline.test"))
	if status != 200 || !strings.Contains(body, "550 5.1.1 no such user") || !strings.Contains(body, "welcome version 3") {
		t.Fatalf("mail page = %d:\n%s", status, body)
	}
	status, body = b.get("/api/v1/mail?recipient=bob@example.com")
	var page struct {
		Mails []struct {
			MessageID string `json:"message_id"`
		} `json:"mails"`
	}
	if err := json.Unmarshal([]byte(body), &page); status != 200 || err != nil || len(page.Mails) != 1 || page.Mails[0].MessageID != "m1@postline.test" {
		t.Fatalf("API search = %d, %v:\n%s", status, err, body)
	}
	if status, _ := b.get("/api/v1/mail/life?id=m1@postline.test"); status != 200 {
		t.Fatalf("API life = %d", status)
	}
	wantAudit := []string{"login:ok", "mail.search:ok", "mail.view:ok", "api.mail.search:ok", "api.mail.life:ok"}
	if got := st.auditResults(t, "vic"); !slices.Equal(got, wantAudit) {
		t.Errorf("audit log of vic = %v, want %v", got, wantAudit)
	}
}

func TestViewerCannotAct(t *testing.T) {
	st := newStack(t)
	st.addSuppression(t, "bob@example.com")
	b := st.browser(t)
	b.mustLogin("vic", vicPassword)
	csrf := b.csrfOf("/suppressions?search=1")
	status, body := b.post("/suppressions/remove", url.Values{"csrf": {csrf}, "tenant": {""}, "stream": {"*"}, "address": {"bob@example.com"}})
	if status != http.StatusForbidden || !strings.Contains(body, "viewer") {
		t.Fatalf("viewer's remove = %d:\n%s", status, body)
	}
	status, _ = b.post("/suppressions/add", url.Values{"csrf": {csrf}, "stream": {"*"}, "address": {"eve@example.com"}})
	if status != http.StatusForbidden {
		t.Fatalf("viewer's add = %d", status)
	}
	if !st.suppressed(t, "bob@example.com") || st.suppressed(t, "eve@example.com") {
		t.Fatal("a viewer's action changed the suppression list")
	}
	want := []string{"login:ok", "suppression.search:ok", "suppression.remove:denied", "suppression.add:denied"}
	if got := st.auditResults(t, "vic"); !slices.Equal(got, want) {
		t.Errorf("audit log of vic = %v, want %v", got, want)
	}
}

func TestPostWithoutCSRFChangesNothing(t *testing.T) {
	st := newStack(t)
	st.addSuppression(t, "bob@example.com")
	b := st.browser(t)
	b.mustLogin("olga", olgaPassword)
	key := url.Values{"tenant": {""}, "stream": {"*"}, "address": {"bob@example.com"}}
	if status, _ := b.post("/suppressions/remove", key); status != http.StatusForbidden {
		t.Fatalf("remove without the CSRF token = %d, want 403", status)
	}
	key.Set("csrf", "forged")
	if status, _ := b.post("/suppressions/remove", key); status != http.StatusForbidden {
		t.Fatalf("remove with a forged CSRF token = %d, want 403", status)
	}
	if !st.suppressed(t, "bob@example.com") {
		t.Fatal("a request without the CSRF token lifted the suppression")
	}
	// Logout needs it too: without it the session lives on.
	if status, _ := b.post("/logout", url.Values{}); status != http.StatusForbidden {
		t.Fatalf("logout without the CSRF token = %d, want 403", status)
	}
	if status, _ := b.get("/mail"); status != http.StatusOK {
		t.Fatalf("after a refused logout GET /mail = %d, want the session alive", status)
	}
	// The operator's real form lifts it: the e2e's "lift a suppression".
	key.Set("csrf", b.csrfOf("/suppressions?search=1"))
	status, _ := b.post("/suppressions/remove", key)
	if status != http.StatusSeeOther || st.suppressed(t, "bob@example.com") {
		t.Fatalf("remove with the CSRF token = %d, still suppressed %v", status, st.suppressed(t, "bob@example.com"))
	}
	_, body := b.get("/suppressions?search=1&address=bob%40example.com&done=removed")
	if !strings.Contains(body, "Suppression removed") {
		t.Errorf("the page after the removal does not say it:\n%s", body)
	}
	want := []string{"login:ok", "suppression.remove:csrf_refused", "suppression.remove:csrf_refused", "logout:csrf_refused",
		"suppression.search:ok", "suppression.remove:ok", "suppression.search:ok"}
	if got := st.auditResults(t, "olga"); !slices.Equal(got, want) {
		t.Errorf("audit log of olga = %v, want %v", got, want)
	}
}

func TestOperatorAddsASuppressionAndItIsAudited(t *testing.T) {
	st := newStack(t)
	b := st.browser(t)
	b.mustLogin("olga", olgaPassword)
	form := url.Values{"csrf": {b.csrfOf("/suppressions")}, "tenant": {"acme"}, "stream": {"bulk"}, "address": {"Eve <EVE@example.com>"}, "note": {"asked by phone"}}
	if status, body := b.post("/suppressions/add", form); status != http.StatusSeeOther {
		t.Fatalf("add = %d:\n%s", status, body)
	}
	entries, err := st.suppressions.List(context.Background(), suppression.Filter{AddressPrefix: "eve@"})
	if err != nil || len(entries) != 1 || entries[0].Reason != suppression.ReasonManual || entries[0].Source != "console:olga" || entries[0].Tenant != "acme" {
		t.Fatalf("entries = %+v, %v", entries, err)
	}
	form.Set("address", "not an address")
	if status, body := b.post("/suppressions/add", form); status != http.StatusBadRequest || !strings.Contains(body, "correct it") {
		t.Fatalf("add of a bad address = %d:\n%s", status, body)
	}
	log, err := st.audit.Read(context.Background(), operator.AuditFilter{Actor: "olga", Action: "suppression.add"})
	if err != nil || len(log) != 2 || log[0].Result != operator.ResultInvalid || log[1].Result != operator.ResultOK ||
		!strings.Contains(string(log[1].Target), `"address": "Eve <EVE@example.com>"`) && !strings.Contains(string(log[1].Target), `"address":"Eve <EVE@example.com>"`) {
		t.Fatalf("audit = %+v, %v", log, err)
	}
	if status, body := b.get("/audit?actor=olga"); status != 200 || !strings.Contains(body, "suppression.add") || !strings.Contains(body, "invalid") {
		t.Fatalf("audit page = %d:\n%s", status, body)
	}
}

func TestSessionCookieFromBeforeLogoutIsRefused(t *testing.T) {
	st := newStack(t)
	b := st.browser(t)
	b.mustLogin("olga", olgaPassword)
	old := b.sessionCookie()
	csrf := b.csrfOf("/mail")
	if status, _ := b.post("/logout", url.Values{"csrf": {csrf}}); status != http.StatusSeeOther {
		t.Fatalf("logout = %d", status)
	}
	// A client that kept the cookie (a copy, a stolen one) sends it again.
	replay := st.browser(t)
	u, _ := url.Parse(st.url)
	replay.client.Jar.SetCookies(u, []*http.Cookie{{Name: old.Name, Value: old.Value}})
	if status, _ := replay.get("/mail"); status != http.StatusSeeOther {
		t.Fatalf("GET /mail with the old cookie = %d, want the login redirect", status)
	}
	if status, _ := replay.get("/api/v1/mail"); status != http.StatusUnauthorized {
		t.Fatalf("API with the old cookie = %d, want 401", status)
	}
	st.addSuppression(t, "bob@example.com")
	if status, _ := replay.post("/suppressions/remove", url.Values{"csrf": {csrf}, "stream": {"*"}, "address": {"bob@example.com"}}); status != http.StatusForbidden {
		t.Fatalf("action with the old cookie and CSRF token = %d, want 403", status)
	}
	if !st.suppressed(t, "bob@example.com") {
		t.Fatal("an action with a logged-out cookie changed the list")
	}
}

func TestTenWrongPasswordsSlowTheNextTry(t *testing.T) {
	st := newStack(t)
	b := st.browser(t)
	for i := range 10 {
		status, body := b.login("olga", "not olga's password")
		if status == http.StatusTooManyRequests {
			continue // the throttle starts before the tenth; each still counts
		}
		if status != http.StatusUnauthorized || !strings.Contains(body, "Wrong name or password") {
			t.Fatalf("wrong password %d = %d:\n%s", i+1, status, body)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, st.url+"/login", strings.NewReader(url.Values{
		"csrf": {b.csrfOf("/login")}, "name": {"olga"}, "password": {olgaPassword}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "Too many wrong passwords") {
		t.Fatalf("the right password after ten wrong ones = %d (Retry-After %q):\n%s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if strings.Contains(string(body), olgaPassword) {
		t.Fatal("the login page shows the password")
	}
	got := st.auditResults(t, "olga")
	if len(got) != 11 || got[0] != "login:wrong_password" || got[10] != "login:throttled" {
		t.Errorf("audit log of the logins = %v", got)
	}
}

func TestBytesThatAreNotTextAreRefusedNotFailed(t *testing.T) {
	st := newStack(t)
	b := st.browser(t)
	if status, body := b.login("olga\xff\x00", olgaPassword); status != http.StatusUnauthorized {
		t.Fatalf("login with a name that is not text = %d:\n%s", status, body)
	}
	b.mustLogin("olga", olgaPassword)
	for _, path := range []string{"/mail?message_id=a%00b", "/mail?recipient=%FF", "/suppressions?search=1&address=%00", "/audit?actor=%FF"} {
		if status, body := b.get(path); status != http.StatusBadRequest || !strings.Contains(body, "not text") {
			t.Errorf("GET %s = %d, want 400 saying so:\n%s", path, status, body)
		}
	}
	form := url.Values{"csrf": {b.csrfOf("/suppressions")}, "stream": {"*"}, "address": {"a\x00@example.com"}}
	if status, _ := b.post("/suppressions/add", form); status != http.StatusBadRequest {
		t.Errorf("add of an address with a NUL = %d, want 400", status)
	}
	if got := st.auditResults(t, "olga"); !slices.Contains(got, "suppression.add:invalid") {
		t.Errorf("audit = %v, want the refused add", got)
	}
}

func TestLoginNeedsItsFormToken(t *testing.T) {
	st := newStack(t)
	b := st.browser(t)
	status, _ := b.post("/login", url.Values{"name": {"olga"}, "password": {olgaPassword}})
	if status != http.StatusForbidden {
		t.Fatalf("login without the form's token = %d, want 403", status)
	}
	if got := st.auditResults(t, "olga"); !slices.Equal(got, []string{"login:csrf_refused"}) {
		t.Errorf("audit = %v", got)
	}
}

// upload sends file with the import preview's multipart form.
func (b *browser) upload(csrf, file string) (int, string) {
	b.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("csrf", csrf)
	fw, _ := mw.CreateFormFile("file", "list.csv")
	_, _ = fw.Write([]byte(file))
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, b.base+"/suppressions/import/preview", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return b.do(req)
}
