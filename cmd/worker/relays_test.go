package main

import (
	"bytes"
	"context"
	"maps"
	"strings"
	"testing"
	"time"
)

// TestRelaySettingErrorsHidePassword starts the worker with relay settings
// that fail and checks the startup error names the setting but shows no
// piece (three bytes or longer) of the password, whether it comes in a
// relay URL with unencoded reserved characters or in POSTLINE_SMTP_PASSWORD.
func TestRelaySettingErrorsHidePassword(t *testing.T) {
	const secret = "Zq7Xv9kWr2"
	tests := []struct {
		name     string
		env      map[string]string
		password string
		want     string
	}{
		{"'/' in a URL password", map[string]string{"POSTLINE_SMTP_RELAYS": "smtp://ada:4417/" + secret + "@relay.example.com"}, "4417/" + secret, "POSTLINE_SMTP_RELAYS"},
		{"'?' in a URL password", map[string]string{"POSTLINE_SMTP_RELAYS": "smtp://ada:?" + secret + "@relay.example.com"}, "?" + secret, "POSTLINE_SMTP_RELAYS"},
		{"'#' in a URL password", map[string]string{"POSTLINE_SMTP_RELAYS": "smtp://ada:#" + secret + "@relay.example.com"}, "#" + secret, "POSTLINE_SMTP_RELAYS"},
		{"',' in a URL password", map[string]string{"POSTLINE_SMTP_RELAYS": "smtp://ada:4417," + secret + "@relay.example.com"}, "4417," + secret, "POSTLINE_SMTP_RELAYS"},
		{"bad escape in a URL password", map[string]string{"POSTLINE_SMTP_RELAYS": "smtp://ada:" + secret + "%zz@relay.example.com"}, secret + "%zz", "POSTLINE_SMTP_RELAYS"},
		{"URL relay that fails validation", map[string]string{"POSTLINE_SMTP_RELAYS": "smtp://ada:" + secret + "@relay.example.com?tls=none"}, secret, "POSTLINE_SMTP_RELAYS"},
		{"POSTLINE_SMTP_PASSWORD in clear text", map[string]string{
			"POSTLINE_SMTP_HOST": "relay.example.com", "POSTLINE_SMTP_TLS": "none",
			"POSTLINE_SMTP_USERNAME": "ada", "POSTLINE_SMTP_PASSWORD": secret,
		}, secret, "POSTLINE_SMTP"},
		{"POSTLINE_SMTP_PASSWORD without a user", map[string]string{"POSTLINE_SMTP_PASSWORD": "p?ss/" + secret}, "p?ss/" + secret, "POSTLINE_SMTP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{
				"POSTLINE_KAFKA_BROKERS": "127.0.0.1:1",
				"POSTLINE_DATABASE_URL":  "postgres://nobody@127.0.0.1:1/none",
				"POSTLINE_HTTP_ADDR":     "127.0.0.1:0",
			}
			maps.Copy(env, tt.env)
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			var out bytes.Buffer
			err := run(ctx, nil, func(k string) string { return env[k] }, &out)
			if err == nil {
				t.Fatalf("run = nil, want an error naming %s", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run = %q, want it to name %s", err, tt.want)
			}
			for _, text := range []string{err.Error(), out.String()} {
				for n := len(tt.password); n >= 3; n-- {
					for i := 0; i+n <= len(tt.password); i++ {
						if part := tt.password[i : i+n]; strings.Contains(text, part) {
							t.Fatalf("startup output %q shows %q of the password", text, part)
						}
					}
				}
			}
		})
	}
}
