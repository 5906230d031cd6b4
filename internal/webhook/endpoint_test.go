package webhook

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/event"
)

const goodYAML = `
endpoints:
  - id: billing
    url: https://billing.example.com/hooks/postline?token=abc
    secret_env: POSTLINE_WEBHOOK_SECRET_BILLING
    types: [bounced, complained]
    tenants: [acme, globex]
    timeout: 5s
  - id: local.dev
    url: http://127.0.0.1:8080/hook
    secret_env: LOCAL_SECRET
`

func TestParseEndpoints(t *testing.T) {
	eps, err := ParseEndpoints([]byte(goodYAML), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 2 {
		t.Fatalf("got %d endpoints, want 2", len(eps))
	}
	b := eps[0]
	if b.ID != "billing" || b.URL.String() != "https://billing.example.com/hooks/postline?token=abc" || b.SecretEnv != "POSTLINE_WEBHOOK_SECRET_BILLING" ||
		!slices.Equal(b.Types, []event.Type{event.Bounced, event.Complained}) || !slices.Equal(b.Tenants, []string{"acme", "globex"}) ||
		b.Timeout != 5*time.Second || b.Secret != "" {
		t.Errorf("billing = %+v", b)
	}
	if l := eps[1]; l.ID != "local.dev" || l.Timeout != DefaultTimeout || l.Types != nil || l.Tenants != nil {
		t.Errorf("local.dev = %+v", l)
	}

	js := `{"endpoints": [{"id": "a", "url": "https://a.example/x", "secret_env": "A_SECRET", "types": ["delivered"]}]}`
	eps, err = ParseEndpoints([]byte(js), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 1 || eps[0].ID != "a" || !slices.Equal(eps[0].Types, []event.Type{event.Delivered}) {
		t.Errorf("JSON endpoints = %+v", eps)
	}

	// A file with no endpoint yet is valid: the dispatcher runs idle.
	if eps, err := ParseEndpoints([]byte("endpoints: []\n"), false); err != nil || len(eps) != 0 {
		t.Errorf("empty list: %v, %v", eps, err)
	}
}

func TestParseEndpointsErrors(t *testing.T) {
	one := func(fields string) string {
		return "endpoints:\n  - " + strings.ReplaceAll(strings.TrimSpace(fields), "\n", "\n    ") + "\n"
	}
	base := "id: e1\nurl: https://e.example/h\nsecret_env: E1_SECRET\n"
	tests := []struct {
		name  string
		doc   string
		json  bool
		want  string
		never string // must not appear in the error
	}{
		{"unknown field", one(base + "typs: [bounced]"), false, "field typs not found", ""},
		{"unknown field json", `{"endpoints":[{"id":"e1","url":"https://e.example/h","secret_env":"E","secret":"x"}]}`, true, `unknown field "secret"`, ""},
		{"missing id", one("url: https://e.example/h\nsecret_env: E"), false, `endpoint #1: id: "": want 1 to 64`, ""},
		{"bad id", one("id: has space\nurl: https://e.example/h\nsecret_env: E"), false, `endpoint #1: id: "has space"`, ""},
		{"duplicate id", "endpoints:\n  - {id: e1, url: 'https://a.example/', secret_env: A}\n  - {id: e1, url: 'https://b.example/', secret_env: B}\n", false,
			`endpoint "e1": id: used by an earlier endpoint`, ""},
		{"missing url", one("id: e1\nsecret_env: E"), false, `endpoint "e1": url: required`, ""},
		{"http off loopback", one("id: e1\nurl: http://user:hunter2@e.example/h?token=t0ps3cret\nsecret_env: E"), false,
			`endpoint "e1": url: http://e.example/h: http is allowed only on loopback`, "t0ps3cret"},
		{"http off loopback password", one("id: e1\nurl: http://user:hunter2@e.example/h\nsecret_env: E"), false, "only on loopback", "hunter2"},
		{"ftp", one("id: e1\nurl: ftp://e.example/h\nsecret_env: E"), false, `url: ftp://e.example/h: want an https URL`, ""},
		{"no host", one("id: e1\nurl: https:///h\nsecret_env: E"), false, `url: https:///h: no host`, ""},
		{"unparsable url", one("id: e1\nurl: 'https://u:p4ss@e.example/%zz'\nsecret_env: E"), false, `url: not a URL`, "p4ss"},
		{"fragment", one("id: e1\nurl: https://e.example/h#frag\nsecret_env: E"), false, `url: https://e.example/h: a fragment`, ""},
		{"secret pasted as secret_env", one("id: e1\nurl: https://e.example/h\nsecret_env: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), false,
			`endpoint "e1": secret_env: "whsec_…" is not an environment variable name`, "MfKQ9r8G"},
		{"missing secret_env", one("id: e1\nurl: https://e.example/h"), false, `endpoint "e1": secret_env: "" is not`, ""},
		{"unknown type", one(base + "types: [bounce]"), false, `endpoint "e1": types: unknown event type "bounce"`, ""},
		{"type twice", one(base + "types: [bounced, bounced]"), false, `types: "bounced" listed twice`, ""},
		{"empty tenant", one(base + "tenants: ['']"), false, `endpoint "e1": tenants: an empty tenant`, ""},
		{"bad timeout", one(base + "timeout: soon"), false, `endpoint "e1": timeout: "soon": want a duration`, ""},
		{"long timeout", one(base + "timeout: 1h"), false, `endpoint "e1": timeout: 1h0m0s: want more than 0 and at most 2m0s`, ""},
		{"two problems", one("id: e1\nurl: ftp://x/\nsecret_env: E\ntimeout: 0s"), false, "timeout: 0s", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseEndpoints([]byte(tt.doc), tt.json)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseEndpoints = %v, want an error containing %q", err, tt.want)
			}
			if tt.never != "" && strings.Contains(err.Error(), tt.never) {
				t.Errorf("error %q reveals %q", err, tt.never)
			}
		})
	}
}

func TestLoadEndpoints(t *testing.T) {
	dir := t.TempDir()
	y := filepath.Join(dir, "hooks.yaml")
	j := filepath.Join(dir, "hooks.JSON")
	if err := os.WriteFile(y, []byte(goodYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(j, []byte(`{"endpoints":[{"id":"j","url":"https://j.example/","secret_env":"J"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if eps, err := LoadEndpoints(y); err != nil || len(eps) != 2 {
		t.Errorf("LoadEndpoints(yaml) = %d endpoints, %v", len(eps), err)
	}
	if eps, err := LoadEndpoints(j); err != nil || len(eps) != 1 || eps[0].ID != "j" {
		t.Errorf("LoadEndpoints(json) = %+v, %v", eps, err)
	}
	if _, err := LoadEndpoints(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("LoadEndpoints(missing) = %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("endpoints: [{id: x}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadEndpoints(bad); err == nil || !strings.Contains(err.Error(), bad+`: endpoint "x": url: required`) {
		t.Errorf("LoadEndpoints(bad) = %v", err)
	}
}

func TestMatches(t *testing.T) {
	ev := func(typ event.Type, tenant string) *event.Event { return &event.Event{Type: typ, Tenant: tenant} }
	tests := []struct {
		name    string
		types   []event.Type
		tenants []string
		ev      *event.Event
		want    bool
	}{
		{"no filters", nil, nil, ev(event.Accepted, ""), true},
		{"type listed", []event.Type{event.Bounced, event.Complained}, nil, ev(event.Complained, "acme"), true},
		{"type not listed", []event.Type{event.Bounced}, nil, ev(event.Delivered, "acme"), false},
		{"tenant listed", nil, []string{"acme"}, ev(event.Delivered, "acme"), true},
		{"tenant not listed", nil, []string{"acme"}, ev(event.Delivered, "globex"), false},
		{"no tenant with tenant filter", nil, []string{"acme"}, ev(event.Delivered, ""), false},
		{"both match", []event.Type{event.Bounced}, []string{"acme"}, ev(event.Bounced, "acme"), true},
		{"type matches, tenant not", []event.Type{event.Bounced}, []string{"acme"}, ev(event.Bounced, "initech"), false},
		{"tenant matches, type not", []event.Type{event.Bounced}, []string{"acme"}, ev(event.Accepted, "acme"), false},
	}
	for _, tt := range tests {
		ep := Endpoint{Types: tt.types, Tenants: tt.tenants}
		if got := ep.Matches(tt.ev); got != tt.want {
			t.Errorf("%s: Matches = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestEveryEventTypeIsAFilter checks that an endpoint may filter on every
// type Postline publishes (redriven included) and then receives it.
func TestEveryEventTypeIsAFilter(t *testing.T) {
	for _, typ := range event.Types {
		doc := fmt.Sprintf("endpoints: [{id: a, url: 'https://a.example/x', secret_env: A, types: [%s]}]", typ)
		eps, err := ParseEndpoints([]byte(doc), false)
		if err != nil {
			t.Errorf("types [%s]: %v", typ, err)
			continue
		}
		if !eps[0].Matches(&event.Event{Type: typ}) {
			t.Errorf("an endpoint filtering on %s does not match a %s event", typ, typ)
		}
	}
}

func TestLogURL(t *testing.T) {
	eps, err := ParseEndpoints([]byte("endpoints: [{id: a, url: 'https://u:pw@h.example:8443/p/a%2Fb?token=t#x', secret_env: A}]"), false)
	if err == nil {
		t.Fatal("a URL with a fragment was accepted")
	}
	eps, err = ParseEndpoints([]byte("endpoints: [{id: a, url: 'https://u:pw@h.example:8443/p/a%2Fb?token=t', secret_env: A}]"), false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := eps[0].LogURL(), "https://h.example:8443/p/a%2Fb"; got != want {
		t.Errorf("LogURL = %q, want %q", got, want)
	}
}
