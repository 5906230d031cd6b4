package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHooksHandlerAlwaysServesUnsubscribe: the public server answers the
// one-click unsubscribe links whether or not a provider webhook is
// configured, and is off only without POSTLINE_HOOKS_ADDR.
func TestHooksHandlerAlwaysServesUnsubscribe(t *testing.T) {
	unsub := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h, err := hooksHandler(settings{HooksAddr: "127.0.0.1:0"}, receiverDeps{}, nil, unsub)
	if err != nil || h == nil {
		t.Fatalf("hooksHandler without providers = %v, %v; want the unsubscribe route", h, err)
	}
	for path, want := range map[string]int{"/unsubscribe/abc": http.StatusTeapot, "/hooks/ses": http.StatusNotFound, "/": http.StatusNotFound} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, nil))
		if rec.Code != want {
			t.Errorf("POST %s: %d, want %d", path, rec.Code, want)
		}
	}
	if h, err := hooksHandler(settings{}, receiverDeps{}, nil, unsub); h != nil || err != nil {
		t.Errorf("hooksHandler without POSTLINE_HOOKS_ADDR = %v, %v; want none", h, err)
	}
	if _, err := hooksHandler(settings{MailgunSigningKey: "k"}, receiverDeps{}, nil, unsub); err == nil {
		t.Error("a provider webhook without POSTLINE_HOOKS_ADDR was accepted")
	}
}
