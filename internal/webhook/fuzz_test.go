package webhook

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// Every endpoint ParseEndpoints accepts passes the dispatcher's checks
// (with a secret set), and writing the endpoints back as YAML parses to
// the same endpoints.
func FuzzParseEndpoints(f *testing.F) {
	f.Add([]byte(goodYAML), false)
	f.Add([]byte(`{"endpoints":[{"id":"a","url":"https://a.example/x?q=1","secret_env":"A","types":["bounced"],"tenants":["t"],"timeout":"3s"}]}`), true)
	f.Add([]byte("endpoints:\n  - {id: l, url: 'http://[::1]:80/', secret_env: L, timeout: 1m}\n"), false)
	f.Add([]byte("endpoints:\n  - {id: l, url: 'http://localhost/', secret_env: L}\n  - {id: m, url: 'https://m/', secret_env: M}\n"), false)
	f.Fuzz(func(t *testing.T, data []byte, isJSON bool) {
		eps, err := ParseEndpoints(data, isJSON)
		if err != nil {
			return
		}
		ids := map[string]bool{}
		var back endpointFile
		for _, ep := range eps {
			if ids[ep.ID] {
				t.Fatalf("duplicate id %q accepted", ep.ID)
			}
			ids[ep.ID] = true
			ep.Secret = Secret(testSecret)
			if err := ep.validate(); err != nil {
				t.Fatalf("accepted endpoint %q fails validation: %v", ep.ID, err)
			}
			spec := endpointSpec{ID: ep.ID, URL: ep.URL.String(), SecretEnv: ep.SecretEnv, Tenants: ep.Tenants, Timeout: ep.Timeout.String()}
			for _, typ := range ep.Types {
				spec.Types = append(spec.Types, string(typ))
			}
			back.Endpoints = append(back.Endpoints, spec)
		}
		out, err := yaml.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseEndpoints(out, false)
		if err != nil {
			t.Fatalf("re-parse of\n%s: %v", out, err)
		}
		if len(again) != len(eps) {
			t.Fatalf("re-parse: %d endpoints, want %d", len(again), len(eps))
		}
		for i := range eps {
			a, b := eps[i], again[i]
			if a.ID != b.ID || a.URL.String() != b.URL.String() || a.SecretEnv != b.SecretEnv || !slices.Equal(a.Types, b.Types) ||
				!slices.Equal(a.Tenants, b.Tenants) || a.Timeout != b.Timeout {
				t.Fatalf("round trip: %+v became %+v", a, b)
			}
		}
	})
}

// parseRetryAfter returns a delay in [0, maxRetryAfter], and delay-seconds
// in range exactly.
func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, s := range []string{"", "0", "120", "-1", "99999999999999999999", "Wed, 02 Dec 2026 12:00:00 GMT", "Sun, 06 Nov 1994 08:49:37 GMT", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d := parseRetryAfter(v, now)
		if d < 0 || d > maxRetryAfter {
			t.Fatalf("parseRetryAfter(%q) = %s, outside [0, %s]", v, d, maxRetryAfter)
		}
		if s, err := strconv.ParseInt(v, 10, 64); err == nil && s > 0 && s <= int64(maxRetryAfter/time.Second) && d != time.Duration(s)*time.Second {
			t.Fatalf("parseRetryAfter(%q) = %s, want %ds", v, d, s)
		}
	})
}
