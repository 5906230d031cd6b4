package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProbe(t *testing.T) {
	ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }))
	defer ready.Close()
	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not a member of the consumer group", http.StatusServiceUnavailable)
	}))
	defer notReady.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // nothing listens there any more

	tests := []struct {
		name     string
		args     []string
		wantCode int    // 0: success
		wantOut  string // in stdout
		wantErr  string // in the error
	}{
		{name: "ready", args: []string{"probe", ready.URL + "/readyz"}, wantOut: "200 OK ok"},
		{name: "ready as JSON", args: []string{"-o", "json", "probe", ready.URL}, wantOut: `"status":200`},
		{name: "not ready", args: []string{"probe", notReady.URL + "/readyz"}, wantCode: exitFailure,
			wantOut: "not a member of the consumer group", wantErr: "503 Service Unavailable"},
		{name: "nothing listens", args: []string{"probe", gone.URL}, wantCode: exitFailure, wantErr: "connection refused"},
		{name: "not a URL", args: []string{"probe", "localhost:8081"}, wantCode: exitUsage, wantErr: "want an http:// or https:// URL"},
		{name: "no URL", args: []string{"probe"}, wantCode: exitUsage, wantErr: "accepts 1 arg"},
		{name: "bad timeout", args: []string{"probe", "--timeout", "0s", ready.URL}, wantCode: exitUsage, wantErr: "--timeout 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := postctl(t, nil, "", tt.args...)
			switch {
			case tt.wantCode == 0 && err != nil:
				t.Fatalf("probe failed: %v", err)
			case tt.wantCode != 0 && (err == nil || exitCode(err) != tt.wantCode || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v (exit %d), want exit %d with %q", err, exitCodeOf(err), tt.wantCode, tt.wantErr)
			}
			if !strings.Contains(out, tt.wantOut) {
				t.Errorf("stdout %q, want it to contain %q", out, tt.wantOut)
			}
			if strings.Contains(strings.Join(tt.args, " "), "json") {
				var v struct{ Status int }
				if err := json.Unmarshal([]byte(out), &v); err != nil || v.Status != http.StatusOK {
					t.Errorf("JSON output %q: %v", out, err)
				}
			}
		})
	}
}

func exitCodeOf(err error) int {
	if err == nil {
		return 0
	}
	return exitCode(err)
}
