package webhook

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/event"
)

// https endpoints are verified: a certificate the transport does not trust
// fails every attempt; one it trusts is delivered to.
func TestTLSCertificateVerified(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer srv.Close()
	if !strings.HasPrefix(srv.URL, "https://127.0.0.1:") {
		t.Fatalf("server URL %s", srv.URL)
	}
	ep := Endpoint{ID: "tls", URL: mustURL(t, srv.URL+"/hook"), SecretEnv: "S", Secret: Secret(testSecret)}

	// The harness's transport has the system roots only.
	h := startHarness(t, Config{Endpoints: []Endpoint{ep}, MaxAttempts: 1})
	off := h.send(mustEncode(t, newEvent("<t@x>", 0, event.Delivered, "")))
	waitFor(t, 5*time.Second, "the untrusted endpoint's dead letter", func() bool { return h.src.doneCount(off) == 1 })
	letters := h.dlq.all()
	if len(letters) != 1 || !strings.Contains(letters[0].Error, "certificate") {
		t.Fatalf("letters = %+v, want one whose error names the certificate", letters)
	}
	h.stop()

	trusted := srv.Client().Transport.(*http.Transport)
	d, src := startTrusted(t, ep, trusted)
	off = d.send(mustEncode(t, newEvent("<t@x>", 1, event.Delivered, "")))
	waitFor(t, 5*time.Second, "delivery over verified TLS", func() bool { return src.doneCount(off) == 1 })
	if len(d.dlq.all()) != 0 {
		t.Errorf("dead letters over trusted TLS: %+v", d.dlq.all())
	}
}

// startTrusted starts a harness whose transport trusts the test server.
func startTrusted(t *testing.T, ep Endpoint, tr *http.Transport) (*harness, *fakeSource) {
	t.Helper()
	h := startHarnessWithTransport(t, Config{Endpoints: []Endpoint{ep}, MaxAttempts: 1}, tr)
	return h, h.src
}
