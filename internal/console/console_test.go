package console

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/operator"
	"github.com/postline/postline/internal/suppression"
)

func TestCookieAttributes(t *testing.T) {
	tests := []struct {
		secure   bool
		wantName string
	}{
		{secure: true, wantName: "__Host-postline_console_session"},
		{secure: false, wantName: "postline_console_session"},
	}
	for _, tt := range tests {
		c := newCookie(sessionCookie, "v", 60, tt.secure)
		if c.Name != tt.wantName || c.Secure != tt.secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode ||
			c.Path != "/" || c.Domain != "" || c.MaxAge != 60 {
			t.Errorf("secure=%v: cookie %+v: want %s, Secure %v, HttpOnly, SameSite=Strict, Path /, no Domain", tt.secure, c, tt.wantName, tt.secure)
		}
		if line := c.String(); !strings.Contains(line, "SameSite=Strict") || !strings.Contains(line, "HttpOnly") {
			t.Errorf("Set-Cookie %q lacks SameSite=Strict or HttpOnly", line)
		}
	}
}

func TestCSRFValid(t *testing.T) {
	const token = "the-session-csrf-token"
	tests := []struct {
		name   string
		form   url.Values
		header map[string]string
		want   bool
	}{
		{name: "in the form", form: url.Values{csrfField: {token}}, want: true},
		{name: "in the header", header: map[string]string{csrfHeader: token}, want: true},
		{name: "missing", want: false},
		{name: "empty", form: url.Values{csrfField: {""}}, want: false},
		{name: "another session's", form: url.Values{csrfField: {"someone-else"}}, want: false},
		{name: "a prefix", form: url.Values{csrfField: {token[:5]}}, want: false},
		{name: "right token from another site", form: url.Values{csrfField: {token}}, header: map[string]string{"Sec-Fetch-Site": "cross-site"}, want: false},
		{name: "right token, same origin", form: url.Values{csrfField: {token}}, header: map[string]string{"Sec-Fetch-Site": "same-origin"}, want: true},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(tt.form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range tt.header {
			r.Header.Set(k, v)
		}
		if err := r.ParseForm(); err != nil {
			t.Fatal(err)
		}
		if got := csrfValid(r, token); got != tt.want {
			t.Errorf("%s: csrfValid = %v, want %v", tt.name, got, tt.want)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/x", nil)
	_ = r.ParseForm()
	if csrfValid(r, "") {
		t.Error("a session without a CSRF token accepted a request without one")
	}
}

func TestCheckPlainListen(t *testing.T) {
	tests := []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:8090", true},
		{"[::1]:8090", true},
		{"localhost:8090", true},
		{"127.1.2.3:8090", true},
		{":8090", false},
		{"0.0.0.0:8090", false},
		{"192.0.2.1:8090", false},
		{"[::]:8090", false},
		{"console.example.com:8090", false},
		{"127.0.0.1", false},
	}
	for _, tt := range tests {
		err := CheckPlainListen(tt.addr)
		if (err == nil) != tt.ok {
			t.Errorf("CheckPlainListen(%q) = %v, want ok %v", tt.addr, err, tt.ok)
		}
		if err != nil && tt.addr != "127.0.0.1" && !strings.Contains(err.Error(), "without TLS") {
			t.Errorf("CheckPlainListen(%q) = %v: the error must say why", tt.addr, err)
		}
	}
	if _, err := TLSConfig("cert.pem", ""); err == nil {
		t.Error("TLSConfig took a certificate without its key")
	}
	if c, err := TLSConfig("", ""); c != nil || err != nil {
		t.Errorf("TLSConfig of neither = %v, %v; want no TLS", c, err)
	}
}

func TestParseFilter(t *testing.T) {
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := day.Add(36 * time.Hour)
	tests := []struct {
		name      string
		query     string
		want      mailquery.Filter
		submitted bool
		wantErr   string
	}{
		{name: "first visit", query: "", want: mailquery.Filter{}},
		{name: "empty search lists everything", query: "search=1", submitted: true},
		{name: "fields trimmed", query: "search=1&message_id=+m1@x+&recipient=@example.com&tenant=acme&state=bounced&reason=smtp_permanent",
			want:      mailquery.Filter{MessageID: "m1@x", Recipient: "@example.com", Tenant: "acme", State: "bounced", Reason: "smtp_permanent"},
			submitted: true},
		{name: "datetime-local and a day", query: "since=2026-12-01T00:00&until=2026-12-02",
			want: mailquery.Filter{Since: day, Until: day.Add(24 * time.Hour)}, submitted: true},
		{name: "RFC 3339 with an offset is UTC", query: "since=2026-12-01T01:00:00%2B01:00", want: mailquery.Filter{Since: day}, submitted: true},
		{name: "cursor kept", query: "cursor=abc", want: mailquery.Filter{Cursor: "abc"}, submitted: true},
		{name: "durations ago, as postctl takes them", query: "since=2d&until=90m",
			want: mailquery.Filter{Since: now.Add(-48 * time.Hour), Until: now.Add(-90 * time.Minute)}, submitted: true},
		{name: "a negative duration", query: "since=-2h", wantErr: "Since"},
		{name: "unknown state", query: "state=lost", wantErr: "State"},
		{name: "bad time", query: "since=yesterday", wantErr: "Since"},
		{name: "since after until", query: "since=2026-12-02&until=2026-12-01", wantErr: "before Until"},
		{name: "long Message-ID", query: "message_id=" + strings.Repeat("m", maxMessageIDBytes+1), wantErr: "Message-ID"},
	}
	for _, tt := range tests {
		q, err := url.ParseQuery(tt.query)
		if err != nil {
			t.Fatal(err)
		}
		got, submitted, err := parseFilter(q, now)
		if tt.wantErr != "" {
			if _, ok := err.(inputError); !ok || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want an inputError about %s", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) || submitted != tt.submitted {
			t.Errorf("%s: parseFilter = %+v, %v, %v; want %+v, %v", tt.name, got, submitted, err, tt.want, tt.submitted)
		}
	}
}

// FuzzParseFilter: any query either is refused with an inputError or gives
// a filter whose next-page link reads back as the same filter, later too
// (a duration ago is fixed in the link).
func FuzzParseFilter(f *testing.F) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	f.Add("search=1&recipient=@example.com&since=2026-12-01T00:00&until=2026-12-02")
	f.Add("message_id=m1@x&state=dead&cursor=abc&reason=smtp_permanent&tenant=t")
	f.Add("since=2026-12-01T01:00:00.5%2B01:00")
	f.Add("since=7d&until=90m")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		flt, _, err := parseFilter(q, now)
		if err != nil {
			if _, ok := err.(inputError); !ok {
				t.Fatalf("parseFilter(%q) failed with %T, not an inputError", raw, err)
			}
			return
		}
		back, submitted, err := parseFilter(filterValues(flt), now.Add(time.Hour))
		if err != nil || !submitted || !reflect.DeepEqual(back, flt) {
			t.Fatalf("parseFilter(%q) = %+v; its link %q reads back as %+v, %v", raw, flt, filterValues(flt).Encode(), back, err)
		}
	})
}

// newUnitServer is a Server on the fakes, with one viewer and one operator
// session.
func newUnitServer(t *testing.T, mail MailReader) (*Server, *fakeAudit, *fakeSuppressions) {
	t.Helper()
	audit := &fakeAudit{}
	sup := &fakeSuppressions{entries: []suppression.Entry{{Address: "bob@example.com", Stream: "*", Reason: "hard_bounce", Source: "dsn"}}}
	s, err := New(Config{
		Accounts: &fakeAccounts{sessions: map[string]operator.Session{
			"viewer-token":   {Operator: "vic", Role: operator.RoleViewer, CSRF: "vic-csrf"},
			"operator-token": {Operator: "olga", Role: operator.RoleOperator, CSRF: "olga-csrf"},
		}},
		Audit: audit, Suppressions: sup, Mail: mail, NotFound: errNoSuchMail,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, audit, sup
}

func get(t *testing.T, h http.Handler, path, token string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if token != "" {
		r.AddCookie(&http.Cookie{Name: sessionCookie, Value: token})
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestPagesRenderTheirStates(t *testing.T) {
	m, l := sampleMail()
	withMail := &fakeMail{mails: []mailquery.Mail{m}, lives: map[string]mailquery.Life{m.MessageID: l}, next: "c2"}
	tests := []struct {
		name       string
		mail       MailReader
		path       string
		token      string
		wantStatus int
		want       []string
	}{
		{name: "login form", path: "/login", wantStatus: 200, want: []string{`name="csrf"`, `autocomplete="current-password"`, "postctl operators add"}},
		{name: "signed out to login", path: "/mail", wantStatus: 303},
		{name: "search before a search", mail: &fakeMail{}, path: "/mail", token: "viewer-token", wantStatus: 200,
			want: []string{"Fill in any fields and press Search", `<label for="message_id">Message-ID</label>`, `<label for="since">`}},
		{name: "search with no result", mail: &fakeMail{}, path: "/mail?search=1&recipient=x@y", token: "viewer-token", wantStatus: 200,
			want: []string{"No mail matches. Widen the time range"}},
		{name: "search without the read layer", path: "/mail?search=1", token: "viewer-token", wantStatus: 503,
			want: []string{"not available"}},
		{name: "search refused", mail: &fakeMail{}, path: "/mail?since=soon", token: "viewer-token", wantStatus: 400,
			want: []string{`role="alert"`, "is not a time"}},
		{name: "search results", mail: withMail, path: "/mail?search=1&tenant=acme", token: "viewer-token", wantStatus: 200,
			want: []string{`href="/mail/view?id=m1%40postline.test"`, "bob@example.com: <span class=\"state\">bounced</span>",
				`<time datetime="2026-12-05T14:49:17Z">2026-12-05 14:49:17 UTC</time>`, `rel="next"`, "cursor=c2", "tenant=acme"}},
		{name: "a mail's life", mail: withMail, path: "/mail/view?id=m1@postline.test", token: "viewer-token", wantStatus: 200,
			want: []string{"smtp; 550 5.1.1 no such user", "welcome version 3", "postline.test", "crm", "claimed", "reply 550 5.1.1",
				"hard bounce", "rule user_unknown", "by olga: relay fixed", "(horizon)"}},
		{name: "an unknown mail", mail: withMail, path: "/mail/view?id=nope@x", token: "viewer-token", wantStatus: 404,
			want: []string{"No mail has the Message-ID nope@x"}},
		{name: "a mail page without an ID", mail: withMail, path: "/mail/view", token: "viewer-token", wantStatus: 400,
			want: []string{"Give a Message-ID"}},
		{name: "suppressions before a search", path: "/suppressions", token: "viewer-token", wantStatus: 200,
			want: []string{"Search by the start of an address", "Your account is a viewer"}},
		{name: "suppressions for an operator", path: "/suppressions?search=1", token: "operator-token", wantStatus: 200,
			want: []string{"bob@example.com", `action="/suppressions/remove"`, `value="olga-csrf"`, `action="/suppressions/add"`}},
		{name: "audit log", path: "/audit", token: "viewer-token", wantStatus: 200, want: []string{"Audit log"}},
		{name: "API signed out", path: "/api/v1/mail", wantStatus: 401, want: []string{`"error"`}},
		{name: "API search", mail: withMail, path: "/api/v1/mail?recipient=@example.com&limit=10", token: "viewer-token", wantStatus: 200,
			want: []string{`"message_id":"m1@postline.test"`, `"next":"c2"`, `"state":"bounced"`, `"created_at":"2026-12-05T14:49:17Z"`}},
		{name: "API bad limit", mail: withMail, path: "/api/v1/mail?limit=100000", token: "viewer-token", wantStatus: 400},
		{name: "API life", mail: withMail, path: "/api/v1/mail/life?id=m1@postline.test", token: "viewer-token", wantStatus: 200,
			want: []string{`"dkim_domain":"postline.test"`, `"diagnostic":"smtp; 550 5.1.1 no such user"`}},
		{name: "a cursor the reader refuses", mail: &fakeMail{findErr: &mailquery.FilterError{Field: "Cursor", Problem: "is of another listing"}},
			path: "/mail?cursor=x", token: "viewer-token", wantStatus: 400, want: []string{"The search was refused: Cursor is of another listing"}},
		{name: "API cursor the reader refuses", mail: &fakeMail{findErr: &mailquery.FilterError{Field: "Cursor", Problem: "is of another listing"}},
			path: "/api/v1/mail?cursor=x", token: "viewer-token", wantStatus: 400, want: []string{"Cursor: is of another listing"}},
		{name: "a failed search", mail: &fakeMail{findErr: errors.New("connection refused")},
			path: "/mail?recipient=a@b", token: "viewer-token", wantStatus: 503, want: []string{"could not reach its database"}},
		{name: "API unknown life", mail: withMail, path: "/api/v1/mail/life?id=nope@x", token: "viewer-token", wantStatus: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, _ := newUnitServer(t, tt.mail)
			w := get(t, s, tt.path, tt.token)
			if w.Code != tt.wantStatus {
				t.Fatalf("GET %s = %d, want %d: %s", tt.path, w.Code, tt.wantStatus, w.Body)
			}
			body := w.Body.String()
			for _, want := range tt.want {
				if !strings.Contains(body, want) {
					t.Errorf("GET %s lacks %q:\n%s", tt.path, want, body)
				}
			}
			if strings.Contains(body, "<no value>") || strings.Contains(body, "viewer-token") || strings.Contains(body, "operator-token") {
				t.Errorf("GET %s shows a missing value or a session token", tt.path)
			}
			if h := w.Header(); h.Get("Content-Security-Policy") != contentSecurityPolicy || h.Get("X-Frame-Options") != "DENY" ||
				h.Get("Cache-Control") != "no-store" {
				t.Errorf("GET %s: security headers %v", tt.path, h)
			}
			if strings.HasPrefix(body, "<!doctype html>") && !strings.Contains(body, `name="viewport"`) {
				t.Errorf("GET %s: a page without the viewport meta", tt.path)
			}
		})
	}
}

func TestActionsNeedCSRFAndRole(t *testing.T) {
	remove := url.Values{"tenant": {""}, "stream": {"*"}, "address": {"bob@example.com"}}
	tests := []struct {
		name       string
		token      string
		csrf       string
		wantStatus int
		wantResult string
		removed    bool
	}{
		{name: "signed out", wantStatus: 403},
		{name: "viewer with its token", token: "viewer-token", csrf: "vic-csrf", wantStatus: 403, wantResult: operator.ResultDenied},
		{name: "operator without a token", token: "operator-token", wantStatus: 403, wantResult: operator.ResultNoCSRF},
		{name: "operator with the viewer's token", token: "operator-token", csrf: "vic-csrf", wantStatus: 403, wantResult: operator.ResultNoCSRF},
		{name: "operator with its token", token: "operator-token", csrf: "olga-csrf", wantStatus: 303, wantResult: operator.ResultOK, removed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, audit, sup := newUnitServer(t, nil)
			form := url.Values{}
			for k, v := range remove {
				form[k] = v
			}
			if tt.csrf != "" {
				form.Set(csrfField, tt.csrf)
			}
			r := httptest.NewRequest(http.MethodPost, "/suppressions/remove", strings.NewReader(form.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if tt.token != "" {
				r.AddCookie(&http.Cookie{Name: sessionCookie, Value: tt.token})
			}
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			if w.Code != tt.wantStatus {
				t.Fatalf("POST = %d, want %d: %s", w.Code, tt.wantStatus, w.Body)
			}
			if removed := len(sup.entries) == 0; removed != tt.removed {
				t.Errorf("removed = %v, want %v", removed, tt.removed)
			}
			var results []string
			for _, e := range audit.entries {
				results = append(results, e.Action+":"+e.Result)
			}
			if tt.wantResult != "" && !reflect.DeepEqual(results, []string{"suppression.remove:" + tt.wantResult}) {
				t.Errorf("audit = %v, want suppression.remove:%s", results, tt.wantResult)
			}
		})
	}
}

func TestTextChecks(t *testing.T) {
	tests := []struct {
		in, bare string
	}{
		{"<m1@x>", "m1@x"}, {" < m1@x > ", "m1@x"}, {"<<m1@x>>", "m1@x"}, {"<>", ""}, {"m1@x", "m1@x"}, {"<m1@x", "<m1@x"}, {"", ""},
	}
	for _, tt := range tests {
		if got := bareMessageID(tt.in); got != tt.bare {
			t.Errorf("bareMessageID(%q) = %q, want %q", tt.in, got, tt.bare)
		}
	}
	for _, tt := range []struct {
		value string
		ok    bool
	}{{"ada@x.org", true}, {"ünï", true}, {"a\x00b", false}, {"\xff\xfe", false}, {strings.Repeat("a", 11), false}} {
		if err := checkFields(field{"F", tt.value, 10}); (err == nil) != tt.ok {
			t.Errorf("checkFields(%q) = %v, want ok %v", tt.value, err, tt.ok)
		}
	}
	long := strings.Repeat("é", 40) // 80 bytes
	if got := auditedName(long); len(got) > maxNameBytes || !storable(got) {
		t.Errorf("auditedName cut %q to %q", long, got)
	}
	if got := auditedName("a\x00\xffb"); got != "a?b" {
		t.Errorf("auditedName = %q", got)
	}
}

func TestNewNeedsNotFoundWithMail(t *testing.T) {
	_, err := New(Config{Accounts: &fakeAccounts{}, Audit: &fakeAudit{}, Suppressions: &fakeSuppressions{}, Mail: &fakeMail{}})
	if err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Fatalf("New with Mail and no NotFound = %v", err)
	}
}

func TestLocalPath(t *testing.T) {
	tests := []struct{ next, want string }{
		{"/mail/view?id=m1%40x", "/mail/view?id=m1%40x"},
		{"/suppressions?search=1", "/suppressions?search=1"},
		{"", "/mail"},
		{"https://evil.example/", "/mail"},
		{"//evil.example/", "/mail"},
		{"/\\evil.example", "/mail"},
		{"mail", "/mail"},
		{"/mail\r\nSet-Cookie: x=y", "/mail"},
	}
	for _, tt := range tests {
		if got := localPath(tt.next); got != tt.want {
			t.Errorf("localPath(%q) = %q, want %q", tt.next, got, tt.want)
		}
	}
}
