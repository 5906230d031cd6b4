package webhook

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/testkit"
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
	h := startHarness(t, Config{Endpoints: []Endpoint{ep}, Schedule: Schedule{Delays: []time.Duration{time.Hour}}})
	off := h.send(mustEncode(t, newEvent("<t@x>", 0, event.Delivered, "")))
	testkit.Eventually(t, 5*time.Second, "the untrusted endpoint's event queued", func() bool { return h.done("tls", off) == 1 })
	var lastError string
	if err := h.pool.QueryRow(t.Context(), `SELECT last_error FROM postline_webhook_queue WHERE endpoint = 'tls'`).Scan(&lastError); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lastError, "certificate") {
		t.Fatalf("last error %q, want one that names the certificate", lastError)
	}
	h.stop()

	trusted := srv.Client().Transport.(*http.Transport)
	d := startHarness(t, Config{Endpoints: []Endpoint{ep}, Transport: trusted})
	off = d.send(mustEncode(t, newEvent("<t@x>", 1, event.Delivered, "")))
	testkit.Eventually(t, 5*time.Second, "delivery over verified TLS", func() bool { return d.done("tls", off) == 1 })
	if len(d.dlq.all()) != 0 || d.rows("tls", statusPending) != 0 {
		t.Errorf("dead letters or redeliveries over trusted TLS: %+v", d.dlq.all())
	}
}
