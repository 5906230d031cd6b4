package unsubscribe

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		path       func(token string) string
		body       string
		breakLists bool
		wantStatus int
		wantText   string
		wantForm   bool
		wantEvents int
		wantCount  [2]string // channel, result counted once
	}{
		{name: "RFC 8058 one-click", method: http.MethodPost, body: "List-Unsubscribe=One-Click", path: tokenPath,
			wantStatus: http.StatusOK, wantText: "Unsubscribed", wantEvents: 1, wantCount: [2]string{"post", "ok"}},
		{name: "any POST to a valid token", method: http.MethodPost, path: tokenPath,
			wantStatus: http.StatusOK, wantText: "Unsubscribed", wantEvents: 1, wantCount: [2]string{"post", "ok"}},
		{name: "a click shows the form", method: http.MethodGet, path: tokenPath,
			wantStatus: http.StatusOK, wantText: "Unsubscribe this address", wantForm: true, wantCount: [2]string{"get", "ok"}},
		{name: "HEAD is a GET", method: http.MethodHead, path: tokenPath, wantStatus: http.StatusOK, wantCount: [2]string{"get", "ok"}},
		{name: "a forged POST", method: http.MethodPost, body: "List-Unsubscribe=One-Click", path: forgedPath,
			wantStatus: http.StatusBadRequest, wantText: "not valid", wantCount: [2]string{"post", "forged"}},
		{name: "a malformed GET", method: http.MethodGet, path: func(string) string { return Path + "/nope" },
			wantStatus: http.StatusBadRequest, wantText: "not valid", wantCount: [2]string{"get", "malformed"}},
		{name: "the lists fail", method: http.MethodPost, path: tokenPath, breakLists: true,
			wantStatus: http.StatusServiceUnavailable, wantText: "try again", wantCount: [2]string{"post", "error"}},
		{name: "another method", method: http.MethodDelete, path: tokenPath, wantStatus: http.StatusMethodNotAllowed},
		{name: "no token", method: http.MethodPost, path: func(string) string { return Path + "/" }, wantStatus: http.StatusBadRequest,
			wantCount: [2]string{"post", "malformed"}},
		{name: "a deeper path", method: http.MethodPost, path: func(tok string) string { return Path + "/" + tok + "/x" }, wantStatus: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lists := newFakeLists()
			if tt.breakLists {
				lists.failList = errors.New("boom")
			}
			a, s, ev, _, _ := newTestApplier(t, lists)
			mux := http.NewServeMux()
			mux.Handle(Path+"/", NewHandler(a, nil))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			token := signed(sampleToken())(s)
			req, err := http.NewRequestWithContext(t.Context(), tt.method, srv.URL+tt.path(token), strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, body)
			}
			if !strings.Contains(strings.ToLower(string(body)), strings.ToLower(tt.wantText)) {
				t.Errorf("body %q does not say %q", body, tt.wantText)
			}
			if hasForm := strings.Contains(string(body), `<form method="post">`); hasForm != tt.wantForm {
				t.Errorf("form in the page = %v, want %v: %s", hasForm, tt.wantForm, body)
			}
			if n := len(ev.published()); n != tt.wantEvents {
				t.Errorf("%d events, want %d", n, tt.wantEvents)
			}
			if tt.method != http.MethodPost && len(lists.entries) != 0 {
				t.Errorf("a %s changed the lists: %v", tt.method, lists.entries)
			}
			if tt.wantCount[0] != "" {
				if n := requests(a, Channel(tt.wantCount[0]), Result(tt.wantCount[1])); n != 1 {
					t.Errorf("requests{%s} = %v, want 1", tt.wantCount, n)
				}
			}
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
			if resp.StatusCode < 300 && resp.Header.Get("Referrer-Policy") != "no-referrer" {
				t.Error("the page lets the link (its token) leak as a referrer")
			}
		})
	}
}

// TestHandlerFormPostsToTheLink follows the page a GET shows: its form
// posts to the link itself and unsubscribes, once.
func TestHandlerFormPostsToTheLink(t *testing.T) {
	lists := newFakeLists()
	a, s, ev, _, _ := newTestApplier(t, lists)
	mux := http.NewServeMux()
	mux.Handle(Path+"/", NewHandler(a, nil))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	link := srv.URL + tokenPath(signed(sampleToken())(s))
	resp, err := srv.Client().Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(ev.published()) != 0 {
		t.Fatal("the GET unsubscribed")
	}
	for range 2 {
		resp, err := srv.Client().PostForm(link, url.Values{"List-Unsubscribe": {"One-Click"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST status %d", resp.StatusCode)
		}
	}
	if n := len(ev.published()); n != 1 {
		t.Fatalf("%d events after two POSTs, want 1", n)
	}
	if requests(a, ChannelPost, ResultOK) != 1 || requests(a, ChannelPost, ResultReplayed) != 1 {
		t.Fatal("the POSTs were not counted as ok, then replayed")
	}
}

func tokenPath(token string) string { return Path + "/" + token }

func forgedPath(token string) string {
	b := []byte(token)
	i := len(b) / 2
	b[i] = map[bool]byte{true: 'a', false: 'b'}[b[i] != 'a']
	return Path + "/" + string(b)
}
