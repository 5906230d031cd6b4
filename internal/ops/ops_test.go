package ops

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	var notReady, failed error
	srv := httptest.NewServer(Handler(NewRegistry(), func(context.Context) error { return notReady }, func() error { return failed }))
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	tests := []struct {
		name     string
		notReady error
		failed   error
		path     string
		wantCode int
		wantBody string
	}{
		{"health", nil, nil, "/healthz", 200, "ok"},
		{"ready", nil, nil, "/readyz", 200, "ready"},
		{"not ready says why", errors.New("postgres: connection refused"), nil, "/readyz", 503, "not ready: postgres: connection refused"},
		{"health does not depend on readiness", errors.New("down"), nil, "/healthz", 200, "ok"},
		{"a failed process is unhealthy and says why", nil, errors.New("pipeline: dead letters: unauthorized"), "/healthz", 503, "unhealthy: pipeline: dead letters: unauthorized"},
		{"metrics include the runtime", nil, nil, "/metrics", 200, "go_goroutines"},
	}
	for _, tt := range tests {
		notReady, failed = tt.notReady, tt.failed
		code, body := get(tt.path)
		if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
			t.Errorf("%s: GET %s = %d %q, want %d containing %q", tt.name, tt.path, code, body, tt.wantCode, tt.wantBody)
		}
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	l, err := NewLogger(&buf, "warn")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("shown", "message_id", "a@b")
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, `"message_id":"a@b"`) {
		t.Errorf("log output %q", out)
	}
	if _, err := NewLogger(&buf, "loud"); err == nil || !strings.Contains(err.Error(), "POSTLINE_LOG_LEVEL") {
		t.Errorf("NewLogger(loud) = %v, want an error naming POSTLINE_LOG_LEVEL", err)
	}
}
