package console

import (
	"bytes"
	"errors"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/operator"
	"github.com/postline/postline/internal/redrive"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/webhook"
)

func TestParseRedrive(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		form    redriveForm
		want    redriveForm // the form as parsed; only checked without wantErr
		filter  redrive.Filter
		wantErr string
	}{
		{name: "defaults", form: redriveForm{Note: "relay fixed"}, want: redriveForm{Rate: "100", Note: "relay fixed"}},
		{name: "durations become absolute, lists clean",
			form: redriveForm{Since: "2h", Until: "2026-12-05T11:30", Tenant: " acme, globex,acme", Reason: "smtp_permanent", Class: "permanent,",
				MessageID: "<m1@x>", Rate: "500", Note: "n"},
			want: redriveForm{Since: "2026-12-05T10:00:00Z", Until: "2026-12-05T11:30:00Z", Tenant: "acme,globex", Reason: "smtp_permanent",
				Class: "permanent", MessageID: "m1@x", Rate: "500", Note: "n"},
			filter: redrive.Filter{Since: now.Add(-2 * time.Hour), Until: now.Add(-30 * time.Minute), Tenants: []string{"acme", "globex"},
				Reasons: []string{"smtp_permanent"}, Classes: []string{"permanent"}, MessageIDs: []string{"m1@x"}}},
		{name: "a day", form: redriveForm{Since: "2026-12-01", Note: "n"}, want: redriveForm{Since: "2026-12-01T00:00:00Z", Rate: "100", Note: "n"},
			filter: redrive.Filter{Since: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}},
		{name: "no note", form: redriveForm{}, wantErr: "Note is required"},
		{name: "rate not a number", form: redriveForm{Rate: "fast", Note: "n"}, wantErr: `Rate "fast" is not a number`},
		{name: "rate too high", form: redriveForm{Rate: "20000", Note: "n"}, wantErr: "Rate 20000: want more than 0 and at most 10000"},
		{name: "rate zero", form: redriveForm{Rate: "0", Note: "n"}, wantErr: "Rate 0"},
		{name: "rate infinite", form: redriveForm{Rate: "Inf", Note: "n"}, wantErr: "is not a number"},
		{name: "since not a time", form: redriveForm{Since: "yesterday", Note: "n"}, wantErr: `Since "yesterday" is not a time`},
		{name: "since after until", form: redriveForm{Since: "1h", Until: "2h", Note: "n"}, wantErr: "is not before Until"},
		{name: "control character in a tenant", form: redriveForm{Tenant: "a\x01b", Note: "n"}, wantErr: "Tenant"},
		{name: "note on two lines", form: redriveForm{Note: "a\nb"}, wantErr: "Note contains a control character"},
		{name: "note too long", form: redriveForm{Note: strings.Repeat("n", redrive.MaxNoteBytes+1)}, wantErr: "Note is"},
		{name: "not text", form: redriveForm{Reason: "\xff", Note: "n"}, wantErr: "Reason holds bytes that are not text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := parseRedrive(tt.form, "console:olga", now)
			if tt.wantErr != "" {
				if _, ok := err.(inputError); !ok || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want an inputError with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if req.form != tt.want {
				t.Errorf("form = %+v, want %+v", req.form, tt.want)
			}
			f := req.filter
			if !f.Since.Equal(tt.filter.Since) || !f.Until.Equal(tt.filter.Until) || !slices.Equal(f.Tenants, tt.filter.Tenants) ||
				!slices.Equal(f.Reasons, tt.filter.Reasons) || !slices.Equal(f.Classes, tt.filter.Classes) || !slices.Equal(f.MessageIDs, tt.filter.MessageIDs) {
				t.Errorf("filter = %+v, want %+v", f, tt.filter)
			}
			if req.opts.Actor != "console:olga" || req.opts.Note != tt.want.Note {
				t.Errorf("options = %+v", req.opts)
			}
			// The parsed form parses to the same filter: the confirmation
			// re-drives what was counted, whenever it is sent.
			again, err := parseRedrive(req.form, "console:olga", now.Add(time.Hour))
			if err != nil || again.form != req.form || !again.filter.Since.Equal(f.Since) || !again.filter.Until.Equal(f.Until) {
				t.Errorf("parsed again an hour later: %+v, %v", again.form, err)
			}
		})
	}
}

func TestParseWebhookReplay(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		form    webhookReplayF
		want    webhookReplayF
		wantErr string
	}{
		{name: "dead letters by default", form: webhookReplayF{Endpoint: "crm"}, want: webhookReplayF{Endpoint: "crm", Source: "dead-letters", Rate: "50"}},
		{name: "events from a time", form: webhookReplayF{Endpoint: "crm", Source: "events", From: "1h", Types: "bounced, complained", Rate: "10"},
			want: webhookReplayF{Endpoint: "crm", Source: "events", From: "2026-12-05T11:00:00Z", Types: "bounced, complained", Rate: "10"}},
		{name: "no endpoint", form: webhookReplayF{}, wantErr: "Give the endpoint"},
		{name: "events need from", form: webhookReplayF{Endpoint: "crm", Source: "events"}, wantErr: "From is required"},
		{name: "unknown source", form: webhookReplayF{Endpoint: "crm", Source: "disk"}, wantErr: `Source "disk"`},
		{name: "unknown type", form: webhookReplayF{Endpoint: "crm", Types: "opened"}, wantErr: `Event type "opened"`},
		{name: "to before from", form: webhookReplayF{Endpoint: "crm", From: "1h", To: "2h"}, wantErr: "To must be after From"},
		{name: "rate too high", form: webhookReplayF{Endpoint: "crm", Rate: "1e9"}, wantErr: "Rate"},
		{name: "rate NaN", form: webhookReplayF{Endpoint: "crm", Rate: "NaN"}, wantErr: "Rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseWebhookReplay(tt.form, now)
			if tt.wantErr != "" {
				if _, ok := err.(inputError); !ok || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want an inputError with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.form != tt.want {
				t.Fatalf("form = %+v, %v; want %+v", got.form, err, tt.want)
			}
		})
	}
}

// opsServer is a unit server with a re-drive and webhook endpoints.
func opsServer(t *testing.T) (*Server, *fakeAudit, *fakeRedriver, *fakeWebhooks, *fakeSuppressions) {
	t.Helper()
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	rd := &fakeRedriver{plan: redrive.Summary{Matched: 3, Redriven: 2, SkippedNotReplayable: 1, DryRun: true},
		letters: []redrive.DeadLetter{
			{Time: at, MessageID: "old@x", Tenant: "acme", Reason: "smtp_permanent", Class: "permanent"},
			{Time: at.Add(time.Hour), MessageID: "new@x", Tenant: "acme", Reason: "expired", Class: "expired", Error: "too old"},
		}}
	wh := &fakeWebhooks{dead: 4, endpoints: []webhook.EndpointReport{
		{EndpointState: webhook.EndpointState{Endpoint: "crm", LastFailure: at, LastStatus: 503, LastError: "HTTP 503", FailingSince: at},
			Backlog: webhook.Backlog{Pending: 7, OldestPending: at, Dead: 4}},
		{EndpointState: webhook.EndpointState{Endpoint: "billing", DisabledAt: at, DisabledReason: "migrating"}},
	}}
	audit := &fakeAudit{}
	sup := &fakeSuppressions{entries: []suppression.Entry{{Address: "bob@example.com", Stream: "*", Reason: "hard_bounce", Source: "dsn"}}}
	m, l := sampleMail()
	l.Mail.Status = "dead"
	s, err := New(Config{
		Accounts: &fakeAccounts{sessions: map[string]operator.Session{
			"viewer-token":   {Operator: "vic", Role: operator.RoleViewer, CSRF: "vic-csrf"},
			"operator-token": {Operator: "olga", Role: operator.RoleOperator, CSRF: "olga-csrf"},
		}},
		Audit: audit, Suppressions: sup, Mail: &fakeMail{lives: map[string]mailquery.Life{m.MessageID: l}}, NotFound: errNoSuchMail,
		Redrive: rd, Webhooks: wh,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, audit, rd, wh, sup
}

func post(t *testing.T, h http.Handler, path, token string, form url.Values) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if token != "" {
		r.AddCookie(&http.Cookie{Name: sessionCookie, Value: token})
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func (f *fakeAudit) results() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, e := range f.entries {
		out = append(out, e.Action+":"+e.Result)
	}
	return out
}

func TestOpsPagesRender(t *testing.T) {
	tests := []struct {
		name, path, token string
		want, not         []string
	}{
		{name: "re-drive form", path: "/redrive", token: "operator-token",
			want: []string{`<label for="since">Since</label>`, `<label for="until">Until</label>`, `<label for="tenant">Tenant</label>`,
				`<label for="reason">Reason</label>`, `<label for="class">Class</label>`, `<label for="rate">Rate</label>`,
				`<label for="note">Note</label>`, `id="count">Count</button>`, `value="100"`, "No re-drive started", `href="/redrive"`, `href="/webhooks"`}},
		{name: "re-drive for a viewer", path: "/redrive", token: "viewer-token", want: []string{"Your account is a viewer"}, not: []string{`action="/redrive/count"`}},
		{name: "re-drive pre-filled", path: "/redrive?message_id=m1@postline.test", token: "operator-token", want: []string{`value="m1@postline.test"`}},
		{name: "a dead mail offers its re-drive", path: "/mail/view?id=m1@postline.test", token: "operator-token",
			want: []string{"Re-drive this mail", `name="message_id" value="m1@postline.test"`}},
		{name: "not to a viewer", path: "/mail/view?id=m1@postline.test", token: "viewer-token", not: []string{"Re-drive this mail"}},
		{name: "dead letters before a list", path: "/deadletters", token: "viewer-token", want: []string{"press List"}},
		{name: "dead letters newest first", path: "/deadletters?list=1&tenant=acme", token: "operator-token",
			want: []string{"2 dead letters match", "new@x</a>", "too old", "Re-drive these dead letters", `href="/redrive?tenant=acme"`}},
		{name: "no dead letter matches", path: "/deadletters?list=1&reason=nope", token: "viewer-token", want: []string{"No dead letter matches"}},
		{name: "webhooks", path: "/webhooks", token: "operator-token",
			want: []string{"crm", "failing", "HTTP 503", "billing", "disabled", "migrating", `action="/webhooks/enable"`, `action="/webhooks/disable"`,
				`href="/webhooks/replay?endpoint=crm"`, "Log and replay"}},
		{name: "webhooks for a viewer", path: "/webhooks", token: "viewer-token", want: []string{"crm"}, not: []string{`action="/webhooks/disable"`}},
		{name: "replay form", path: "/webhooks/replay?endpoint=crm", token: "operator-token", want: []string{`value="crm"`, `id="count">Count`, "Nothing logged"}},
		{name: "an endpoint's log", path: "/webhooks/replay?endpoint=billing", token: "viewer-token", want: []string{"console:olga", "migrating"},
			not: []string{`action="/webhooks/replay/count"`}},
		{name: "import form", path: "/suppressions/import", token: "operator-token", want: []string{`enctype="multipart/form-data"`, `<label for="file">File</label>`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, _, _, _ := opsServer(t)
			w := get(t, s, tt.path, tt.token)
			body := w.Body.String()
			if w.Code != http.StatusOK {
				t.Fatalf("GET %s = %d: %s", tt.path, w.Code, body)
			}
			for _, want := range tt.want {
				if !strings.Contains(body, want) {
					t.Errorf("GET %s lacks %q:\n%s", tt.path, want, body)
				}
			}
			for _, not := range tt.not {
				if strings.Contains(body, not) {
					t.Errorf("GET %s has %q", tt.path, not)
				}
			}
			if strings.Contains(body, "<no value>") {
				t.Errorf("GET %s shows a missing value", tt.path)
			}
		})
	}
}

func TestRedriveNeedsOperatorAndCSRF(t *testing.T) {
	form := url.Values{"note": {"relay fixed"}, "tenant": {"acme"}}
	tests := []struct {
		name, path, token, csrf string
		wantResult              string
	}{
		{name: "viewer counts", path: "/redrive/count", token: "viewer-token", csrf: "vic-csrf", wantResult: "redrive.count:" + operator.ResultDenied},
		{name: "viewer re-drives", path: "/redrive/run", token: "viewer-token", csrf: "vic-csrf", wantResult: "redrive.run:" + operator.ResultDenied},
		{name: "operator without a token", path: "/redrive/run", token: "operator-token", wantResult: "redrive.run:" + operator.ResultNoCSRF},
		{name: "operator with another's token", path: "/redrive/count", token: "operator-token", csrf: "vic-csrf", wantResult: "redrive.count:" + operator.ResultNoCSRF},
		{name: "signed out", path: "/redrive/run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, audit, rd, _, _ := opsServer(t)
			f := url.Values{}
			for k, v := range form {
				f[k] = v
			}
			if tt.csrf != "" {
				f.Set(csrfField, tt.csrf)
			}
			if w := post(t, s, tt.path, tt.token, f); w.Code != http.StatusForbidden {
				t.Fatalf("POST %s = %d, want 403", tt.path, w.Code)
			}
			if plans, runs := rd.calls(); plans+runs != 0 {
				t.Errorf("%d plans and %d runs, want none", plans, runs)
			}
			if got := audit.results(); tt.wantResult != "" && !slices.Equal(got, []string{tt.wantResult}) {
				t.Errorf("audit = %v, want %s", got, tt.wantResult)
			}
		})
	}
}

var hiddenInput = regexp.MustCompile(`<input type="hidden" name="([a-z_]+)" value="([^"]*)">`)

func TestRedriveCountConfirmRun(t *testing.T) {
	s, audit, rd, _, _ := opsServer(t)
	rd.release = make(chan struct{})
	w := post(t, s, "/redrive/count", "operator-token", url.Values{csrfField: {"olga-csrf"}, "since": {"2h"}, "tenant": {"acme"}, "note": {"relay fixed"}, "rate": {"500"}})
	body := w.Body.String()
	if w.Code != http.StatusOK || !strings.Contains(body, `<dd id="plan-matched">3</dd>`) || !strings.Contains(body, `<dd id="plan-redrive">2</dd>`) ||
		!strings.Contains(body, `<dd id="plan-skipped">1</dd>`) || !strings.Contains(body, `id="redrive">Re-drive</button>`) {
		t.Fatalf("count = %d:\n%s", w.Code, body)
	}
	if plans, runs := rd.calls(); plans != 1 || runs != 0 {
		t.Fatalf("after the count: %d plans, %d runs", plans, runs)
	}
	// The confirmation carries the filter as counted, since made absolute.
	confirm := url.Values{}
	for _, m := range hiddenInput.FindAllStringSubmatch(body[strings.Index(body, `action="/redrive/run"`):], -1) {
		confirm.Set(m[1], m[2])
	}
	if confirm.Get(csrfField) != "olga-csrf" || confirm.Get("tenant") != "acme" || confirm.Get("rate") != "500" ||
		!strings.HasSuffix(confirm.Get("since"), "Z") || confirm.Get("note") != "relay fixed" {
		t.Fatalf("confirmation form %v", confirm)
	}
	// A tampered confirmation is checked again: nothing runs.
	bad := url.Values{csrfField: {"olga-csrf"}, "since": {"whenever"}, "note": {"x"}}
	if w := post(t, s, "/redrive/run", "operator-token", bad); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "Since") {
		t.Fatalf("tampered confirmation = %d: %s", w.Code, w.Body)
	}
	if w := post(t, s, "/redrive/run", "operator-token", url.Values{csrfField: {"olga-csrf"}, "tenant": {"acme"}}); w.Code != http.StatusBadRequest {
		t.Fatalf("confirmation without a note = %d", w.Code)
	}
	if _, runs := rd.calls(); runs != 0 {
		t.Fatal("a refused confirmation ran")
	}
	w = post(t, s, "/redrive/run", "operator-token", confirm)
	next := w.Header().Get("Location")
	if w.Code != http.StatusSeeOther || !strings.HasPrefix(next, "/redrive/runs/") {
		t.Fatalf("re-drive = %d to %q: %s", w.Code, next, w.Body)
	}
	// A second run waits for the first.
	if w := post(t, s, "/redrive/run", "operator-token", confirm); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "under way already") {
		t.Fatalf("second run = %d: %s", w.Code, w.Body)
	}
	page := get(t, s, next, "viewer-token")
	if !strings.Contains(page.Body.String(), `<meta http-equiv="refresh" content="2">`) || !strings.Contains(page.Body.String(), "Running") {
		t.Fatalf("run page while running:\n%s", page.Body)
	}
	close(rd.release)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(page.Body.String(), "Done.") {
		if time.Now().After(deadline) {
			t.Fatalf("the run page never said done:\n%s", page.Body)
		}
		time.Sleep(10 * time.Millisecond)
		page = get(t, s, next, "viewer-token")
	}
	if strings.Contains(page.Body.String(), "http-equiv") || !strings.Contains(page.Body.String(), `<dd id="run-redriven">2</dd>`) {
		t.Errorf("finished run page:\n%s", page.Body)
	}
	rd.mu.Lock()
	o, f := rd.opts[0], rd.runs[0]
	rd.mu.Unlock()
	if o.Rate != 500 || o.Note != "relay fixed" || o.Actor != "console:olga" || !slices.Equal(f.Tenants, []string{"acme"}) || f.Since.IsZero() {
		t.Errorf("run with %+v, %+v", o, f)
	}
	want := []string{"redrive.count:ok", "redrive.run:invalid", "redrive.run:invalid", "redrive.run:ok", "redrive.run:invalid", "redrive.run.done:ok"}
	if got := audit.results(); !slices.Equal(got, want) {
		t.Errorf("audit = %v, want %v", got, want)
	}
	if w := get(t, s, "/redrive/runs/nope", "viewer-token"); w.Code != http.StatusNotFound {
		t.Errorf("unknown run = %d", w.Code)
	}
}

func TestWebhookActions(t *testing.T) {
	s, audit, _, wh, _ := opsServer(t)
	if w := post(t, s, "/webhooks/disable", "operator-token", url.Values{csrfField: {"olga-csrf"}, "endpoint": {"crm"}}); w.Code != http.StatusBadRequest {
		t.Errorf("disable without a reason = %d", w.Code)
	}
	if w := post(t, s, "/webhooks/disable", "viewer-token", url.Values{csrfField: {"vic-csrf"}, "endpoint": {"crm"}, "reason": {"x"}}); w.Code != http.StatusForbidden {
		t.Errorf("viewer disables = %d", w.Code)
	}
	w := post(t, s, "/webhooks/disable", "operator-token", url.Values{csrfField: {"olga-csrf"}, "endpoint": {"crm"}, "reason": {"500s"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/webhooks?done=disabled" {
		t.Fatalf("disable = %d %s", w.Code, w.Header().Get("Location"))
	}
	w = post(t, s, "/webhooks/enable", "operator-token", url.Values{csrfField: {"olga-csrf"}, "endpoint": {"billing"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/webhooks?done=enabled" {
		t.Fatalf("enable = %d %s", w.Code, w.Header().Get("Location"))
	}
	eps, _ := wh.Endpoints(t.Context())
	if !eps[0].Disabled() || eps[0].DisabledReason != "500s" || eps[1].Disabled() {
		t.Errorf("endpoints after: %+v", eps)
	}
	w = post(t, s, "/webhooks/replay/count", "operator-token", url.Values{csrfField: {"olga-csrf"}, "endpoint": {"crm"}, "types": {"bounced"}})
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "4 dead letters of crm") || !strings.Contains(w.Body.String(), `id="replay">Replay`) {
		t.Fatalf("replay count = %d:\n%s", w.Code, w.Body)
	}
	if len(wh.replays) != 0 {
		t.Fatal("the count replayed")
	}
	if w := post(t, s, "/webhooks/replay", "operator-token", url.Values{"endpoint": {"crm"}}); w.Code != http.StatusForbidden || len(wh.replays) != 0 {
		t.Fatalf("replay without CSRF = %d, replays %v", w.Code, wh.replays)
	}
	w = post(t, s, "/webhooks/replay", "operator-token", url.Values{csrfField: {"olga-csrf"}, "endpoint": {"crm"}, "types": {"bounced"}})
	if w.Code != http.StatusSeeOther || len(wh.replays) != 1 || wh.replays[0].Types[0] != "bounced" {
		t.Fatalf("replay = %d, %v", w.Code, wh.replays)
	}
	if got := get(t, s, w.Header().Get("Location"), "operator-token").Body.String(); !strings.Contains(got, "4 events of crm queued again") {
		t.Errorf("after the replay:\n%s", got)
	}
	want := []string{"webhook.disable:invalid", "webhook.disable:denied", "webhook.disable:ok", "webhook.enable:ok",
		"webhook.replay.count:ok", "webhook.replay:" + operator.ResultNoCSRF, "webhook.replay:ok"}
	if got := audit.results(); !slices.Equal(got, want) {
		t.Errorf("audit = %v, want %v", got, want)
	}
}

// upload posts file as the import form's file, with form's fields.
func upload(t *testing.T, h http.Handler, token string, form url.Values, file string) *httptest.ResponseRecorder {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, vs := range form {
		for _, v := range vs {
			_ = mw.WriteField(k, v)
		}
	}
	fw, _ := mw.CreateFormFile("file", "list.csv")
	_, _ = fw.Write([]byte(file))
	_ = mw.Close()
	r := httptest.NewRequest(http.MethodPost, "/suppressions/import/preview", &buf)
	r.Header.Set("Content-Type", mw.FormDataContentType())
	r.AddCookie(&http.Cookie{Name: sessionCookie, Value: token})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestSuppressionImportPreviewThenConfirm(t *testing.T) {
	s, audit, _, _, sup := opsServer(t)
	file := "address,reason\nada@example.com,manual\nbob@example.com,hard_bounce\ncy@example.com,manual\n"
	if w := upload(t, s, "viewer-token", url.Values{csrfField: {"vic-csrf"}}, file); w.Code != http.StatusForbidden {
		t.Fatalf("viewer upload = %d", w.Code)
	}
	if w := upload(t, s, "operator-token", nil, file); w.Code != http.StatusForbidden {
		t.Fatalf("upload without CSRF = %d", w.Code)
	}
	bad := upload(t, s, "operator-token", url.Values{csrfField: {"olga-csrf"}}, "address\nada@example.com\nnot an address\n")
	if bad.Code != http.StatusOK || !strings.Contains(bad.Body.String(), "line 2: reason is missing") ||
		!strings.Contains(bad.Body.String(), `<dd id="preview-invalid">2</dd>`) || strings.Contains(bad.Body.String(), `name="import"`) {
		t.Fatalf("preview of a bad file = %d:\n%s", bad.Code, bad.Body)
	}
	w := upload(t, s, "operator-token", url.Values{csrfField: {"olga-csrf"}, "stream": {"bulk"}}, file)
	body := w.Body.String()
	if w.Code != http.StatusOK || !strings.Contains(body, `<dd id="preview-parsed">3</dd>`) || !strings.Contains(body, `<dd id="preview-new">2</dd>`) ||
		!strings.Contains(body, `<dd id="preview-listed">1</dd>`) || !strings.Contains(body, "cy@example.com") {
		t.Fatalf("preview = %d:\n%s", w.Code, body)
	}
	if len(sup.entries) != 1 {
		t.Fatal("the preview imported")
	}
	id := regexp.MustCompile(`name="import" value="([0-9a-f]+)"`).FindStringSubmatch(body)[1]
	if w := post(t, s, "/suppressions/import", "viewer-token", url.Values{csrfField: {"vic-csrf"}, "import": {id}}); w.Code != http.StatusForbidden {
		t.Fatalf("viewer confirms = %d", w.Code)
	}
	w = post(t, s, "/suppressions/import", "operator-token", url.Values{csrfField: {"olga-csrf"}, "import": {id}})
	if w.Code != http.StatusSeeOther || len(sup.entries) != 4 || sup.entries[1].Stream != "bulk" || sup.entries[1].Source != "console:olga" {
		t.Fatalf("confirm = %d, entries %+v", w.Code, sup.entries)
	}
	if got := get(t, s, w.Header().Get("Location"), "operator-token").Body.String(); !strings.Contains(got, "Imported 3 entries: 3 added or replaced") {
		t.Errorf("after the import:\n%s", got)
	}
	if w := post(t, s, "/suppressions/import", "operator-token", url.Values{csrfField: {"olga-csrf"}, "import": {id}}); w.Code != http.StatusBadRequest || len(sup.entries) != 4 {
		t.Errorf("second confirmation = %d, entries %d", w.Code, len(sup.entries))
	}
	want := []string{"suppression.import.preview:denied", "suppression.import.preview:" + operator.ResultNoCSRF, "suppression.import.preview:ok", "suppression.import.preview:ok",
		"suppression.import:denied", "suppression.import:ok", "suppression.import:invalid"}
	if got := audit.results(); !slices.Equal(got, want) {
		t.Errorf("audit = %v, want %v", got, want)
	}
}

func TestMultipartOnlyWhereAnUploadIsTaken(t *testing.T) {
	s, _, _, _, sup := opsServer(t)
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField(csrfField, "olga-csrf")
	_ = mw.WriteField("address", "bob@example.com")
	_ = mw.WriteField("stream", "*")
	_ = mw.Close()
	r := httptest.NewRequest(http.MethodPost, "/suppressions/remove", &buf)
	r.Header.Set("Content-Type", mw.FormDataContentType())
	r.AddCookie(&http.Cookie{Name: sessionCookie, Value: "operator-token"})
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	if w.Code != http.StatusBadRequest || len(sup.entries) != 1 {
		t.Errorf("multipart remove = %d, entries %d", w.Code, len(sup.entries))
	}
}

// FuzzParseRedriveFilter: a form the parser takes parses again, at any
// later time, to the same form and the same filter: the confirmation
// re-drives exactly what was counted.
func FuzzParseRedriveFilter(f *testing.F) {
	f.Add("2h", "", "acme, globex", "smtp_permanent", "", "<m1@x>")
	f.Add("2026-12-01", "2026-12-02T10:00", "", "", "permanent,expired", "")
	f.Add("2026-12-01T00:00:00+02:00", "30m", ",,", " a ,b", "\x7f", "a@x,b@x")
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, since, until, tenant, reason, class, messageID string) {
		in := redriveForm{Since: since, Until: until, Tenant: tenant, Reason: reason, Class: class, MessageID: messageID}
		filter, form, err := parseRedriveFilter(in, now)
		if err != nil {
			return
		}
		filter2, form2, err := parseRedriveFilter(form, now.Add(48*time.Hour))
		if err != nil {
			t.Fatalf("%+v parsed to %+v, which is refused: %v", in, form, err)
		}
		if form2 != form || !filter2.Since.Equal(filter.Since) || !filter2.Until.Equal(filter.Until) ||
			!slices.Equal(filter2.Tenants, filter.Tenants) || !slices.Equal(filter2.Reasons, filter.Reasons) ||
			!slices.Equal(filter2.Classes, filter.Classes) || !slices.Equal(filter2.MessageIDs, filter.MessageIDs) {
			t.Fatalf("%+v: parsed %+v then %+v", in, form, form2)
		}
	})
}

func TestRedriveCountWithoutKafkaSaysSo(t *testing.T) {
	s, audit, rd, _, _ := opsServer(t)
	rd.planErr = errors.New("dial tcp 127.0.0.1:9092: connection refused")
	w := post(t, s, "/redrive/count", "operator-token", url.Values{csrfField: {"olga-csrf"}, "note": {"n"}})
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "dead-letter topic (Kafka)") || strings.Contains(w.Body.String(), "9092") {
		t.Errorf("count without Kafka = %d:\n%s", w.Code, w.Body)
	}
	if got := audit.results(); !slices.Equal(got, []string{"redrive.count:" + operator.ResultFailed}) {
		t.Errorf("audit = %v", got)
	}
}
