package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
)

func TestLoadSettingsRefusesPlainHTTPOffLoopback(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{name: "defaults: loopback, no TLS"},
		{name: "every interface without TLS", env: map[string]string{"POSTLINE_CONSOLE_ADDR": ":8090"},
			wantErr: "POSTLINE_CONSOLE_ADDR: address \":8090\" listens on every interface without TLS"},
		{name: "a public address without TLS", env: map[string]string{"POSTLINE_CONSOLE_ADDR": "192.0.2.1:8090"},
			wantErr: "without TLS: set the certificate and key files"},
		{name: "a certificate without its key", env: map[string]string{"POSTLINE_CONSOLE_ADDR": ":8443", "POSTLINE_CONSOLE_TLS_CERT_FILE": "cert.pem"},
			wantErr: "POSTLINE_CONSOLE_TLS_CERT_FILE and POSTLINE_CONSOLE_TLS_KEY_FILE: set both"},
		{name: "missing certificate files", env: map[string]string{"POSTLINE_CONSOLE_TLS_CERT_FILE": "/nonexistent/c.pem", "POSTLINE_CONSOLE_TLS_KEY_FILE": "/nonexistent/k.pem"},
			wantErr: "POSTLINE_CONSOLE_TLS_CERT_FILE"},
		{name: "a session of seconds", env: map[string]string{"POSTLINE_CONSOLE_SESSION_LIFETIME": "30s"},
			wantErr: "POSTLINE_CONSOLE_SESSION_LIFETIME"},
		{name: "no shutdown time", env: map[string]string{"POSTLINE_SHUTDOWN_TIMEOUT": "0s"}, wantErr: "POSTLINE_SHUTDOWN_TIMEOUT"},
	}
	for _, tt := range tests {
		_, _, _, err := loadSettings(nil, func(k string) string { return tt.env[k] }, io.Discard)
		if tt.wantErr == "" && err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
		if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.wantErr)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestRunServesTheLoginAndStops starts the binary's run on a fresh schema:
// it migrates, turns ready, serves the login page and stops cleanly.
func TestRunServesTheLoginAndStops(t *testing.T) {
	dbURL, _ := testenv.NewSchema(t)
	addr, opsAddr := freeAddr(t), freeAddr(t)
	env := map[string]string{"POSTLINE_DATABASE_URL": dbURL, "POSTLINE_CONSOLE_ADDR": addr, "POSTLINE_CONSOLE_HTTP_ADDR": opsAddr,
		"POSTLINE_SHUTDOWN_TIMEOUT": "2s"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, func(k string) string { return env[k] }, io.Discard) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	client := &http.Client{Timeout: 2 * time.Second}
	testkit.Eventually(t, 20*time.Second, "the console's /readyz to answer 200", func(context.Context) (bool, string) {
		resp, err := client.Get("http://" + opsAddr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	resp, err := client.Get("http://" + addr + "/login")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `type="password"`) || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("GET /login = %d %v:\n%s", resp.StatusCode, resp.Header, body)
	}
}
