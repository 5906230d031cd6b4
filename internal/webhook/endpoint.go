package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/postline/postline/event"
	"github.com/postline/postline/kafkaconn"
)

// Limits of an endpoint's settings.
const (
	// DefaultTimeout is how long one POST may take when the endpoint sets
	// no timeout.
	DefaultTimeout = 10 * time.Second
	// MaxTimeout is the longest timeout an endpoint may set.
	MaxTimeout = 2 * time.Minute
	// MaxEndpoints bounds the endpoints of one file: each is a metric
	// label value and a backlog.
	MaxEndpoints = 100
	// MaxFileBytes bounds an endpoints file.
	MaxFileBytes = 1 << 20
)

// Endpoint is one receiver of webhooks.
type Endpoint struct {
	// ID names the endpoint in logs, metrics and dead letters: 1 to 64 of
	// [A-Za-z0-9_.-]. Required, unique.
	ID string
	// URL is where events are POSTed: https (certificate verified), or
	// http when the host is loopback. User info in it is sent as HTTP basic
	// authentication; it and the query are never logged. Required.
	URL *url.URL
	// SecretEnv is the name of the environment variable that holds the
	// signing secret. Required.
	SecretEnv string
	// Secret is the signing secret, "whsec_" and the base64 of 24 to 64
	// bytes. The file never holds it: the caller reads it from SecretEnv.
	Secret Secret
	// Types are the event types sent; empty sends every type.
	Types []event.Type
	// Tenants are the tenants whose events are sent; empty sends every
	// tenant's (and tenant-less events).
	Tenants []string
	// Timeout bounds one POST, from connecting to reading the response.
	// Defaults to DefaultTimeout.
	Timeout time.Duration
}

// Secret is a signing secret. It prints, logs and marshals as
// "[redacted]", so an Endpoint can be logged or printed whole.
type Secret string

const redacted = "[redacted]"

// String returns "[redacted]".
func (Secret) String() string { return redacted }

// GoString returns "[redacted]", for %#v.
func (Secret) GoString() string { return redacted }

// LogValue returns "[redacted]", for slog.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText returns "[redacted]", for JSON, YAML and text encoders.
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Matches reports whether e passes the endpoint's type and tenant filters.
func (ep *Endpoint) Matches(e *event.Event) bool {
	return (len(ep.Types) == 0 || slices.Contains(ep.Types, e.Type)) &&
		(len(ep.Tenants) == 0 || slices.Contains(ep.Tenants, e.Tenant))
}

// LogURL is the URL for logs: scheme, host and path, without user info,
// query or fragment (where tokens hide).
func (ep *Endpoint) LogURL() string { return redactURL(ep.URL) }

func redactURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return r.String()
}

// endpointFile is the file's document.
type endpointFile struct {
	Endpoints []endpointSpec `yaml:"endpoints" json:"endpoints"`
}

// endpointSpec is one endpoint as the file spells it.
type endpointSpec struct {
	ID        string   `yaml:"id" json:"id"`
	URL       string   `yaml:"url" json:"url"`
	SecretEnv string   `yaml:"secret_env" json:"secret_env"`
	Types     []string `yaml:"types" json:"types"`
	Tenants   []string `yaml:"tenants" json:"tenants"`
	Timeout   string   `yaml:"timeout" json:"timeout"`
}

var (
	idPattern  = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	envPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// LoadEndpoints reads and checks the endpoints file at path: JSON when its
// name ends in .json, YAML otherwise. Secrets are not set: the file names
// the variables that hold them (SecretEnv).
func LoadEndpoints(path string) ([]Endpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("webhook endpoints: %w", err)
	}
	eps, err := ParseEndpoints(b, strings.EqualFold(filepath.Ext(path), ".json"))
	if err != nil {
		return nil, fmt.Errorf("webhook endpoints file %s: %w", path, err)
	}
	return eps, nil
}

// ParseEndpoints parses and checks an endpoints document, JSON or YAML:
//
//	endpoints:
//	  - id: billing
//	    url: https://billing.example.com/hooks/postline
//	    secret_env: POSTLINE_WEBHOOK_SECRET_BILLING
//	    types: [bounced, complained]
//	    tenants: [acme]
//	    timeout: 5s
//
// Unknown fields are errors (a misspelt filter would send everything).
// Errors name the endpoint by id (or position) and the field.
func ParseEndpoints(data []byte, isJSON bool) ([]Endpoint, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%d bytes, at most %d", len(data), MaxFileBytes)
	}
	var f endpointFile
	if isJSON {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("parse JSON: %w", err)
		}
	} else {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("parse YAML: %w", err)
		}
	}
	if len(f.Endpoints) > MaxEndpoints {
		return nil, fmt.Errorf("endpoints: %d listed, at most %d", len(f.Endpoints), MaxEndpoints)
	}
	var errs []error
	eps := make([]Endpoint, 0, len(f.Endpoints))
	seen := make(map[string]bool, len(f.Endpoints))
	for i, s := range f.Endpoints {
		ep, err := s.endpoint()
		if err != nil {
			errs = append(errs, fmt.Errorf("endpoint %s: %w", specName(i, s.ID), err))
			continue
		}
		if seen[ep.ID] {
			errs = append(errs, fmt.Errorf("endpoint %s: id: used by an earlier endpoint", specName(i, s.ID)))
			continue
		}
		seen[ep.ID] = true
		eps = append(eps, ep)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return eps, nil
}

// specName names an endpoint in errors: its id when it has a usable one,
// else its position.
func specName(i int, id string) string {
	if idPattern.MatchString(id) {
		return fmt.Sprintf("%q", id)
	}
	return fmt.Sprintf("#%d", i+1)
}

func (s endpointSpec) endpoint() (Endpoint, error) {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	ep := Endpoint{ID: s.ID, SecretEnv: s.SecretEnv, Tenants: s.Tenants, Timeout: DefaultTimeout}
	if !idPattern.MatchString(s.ID) {
		bad("id", "%q: want 1 to 64 of A-Z, a-z, 0-9, '_', '.', '-'", s.ID)
	}
	u, err := checkURL(s.URL)
	if err != nil {
		bad("url", "%v", err)
	}
	ep.URL = u
	if !envPattern.MatchString(s.SecretEnv) || strings.HasPrefix(s.SecretEnv, secretPrefix) {
		bad("secret_env", "%q is not an environment variable name (the variable holding the secret, not the secret)", truncateName(s.SecretEnv))
	}
	for _, t := range s.Types {
		typ := event.Type(t)
		switch {
		case !typ.Valid():
			bad("types", "unknown event type %q (want one of %v)", t, event.Types)
		case slices.Contains(ep.Types, typ):
			bad("types", "%q listed twice", t)
		default:
			ep.Types = append(ep.Types, typ)
		}
	}
	for _, tn := range s.Tenants {
		if tn == "" {
			bad("tenants", "an empty tenant (leave tenants out to send every tenant's events)")
		}
	}
	if s.Timeout != "" {
		d, err := time.ParseDuration(s.Timeout)
		switch {
		case err != nil:
			bad("timeout", "%q: want a duration such as 5s", s.Timeout)
		case d <= 0 || d > MaxTimeout:
			bad("timeout", "%s: want more than 0 and at most %s", d, MaxTimeout)
		default:
			ep.Timeout = d
		}
	}
	return ep, errors.Join(errs...)
}

// truncateName keeps an error short when a whole secret was pasted where
// its variable's name belongs: only the first characters are quoted.
func truncateName(s string) string {
	if strings.HasPrefix(s, secretPrefix) {
		return secretPrefix + "…"
	}
	if len(s) > 16 {
		return s[:8] + "…"
	}
	return s
}

// checkURL parses an endpoint URL: absolute, https unless the host is
// loopback. Errors quote it without user info or query.
func checkURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url's errors quote the input, which may carry credentials.
		return nil, errors.New("not a URL")
	}
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, fmt.Errorf("%s: want an https URL", redactURL(u))
	case u.Hostname() == "":
		return nil, fmt.Errorf("%s: no host", redactURL(u))
	case u.Scheme == "http" && !kafkaconn.IsLoopback(u.Hostname()):
		return nil, fmt.Errorf("%s: http is allowed only on loopback; use https", redactURL(u))
	case u.Fragment != "":
		return nil, fmt.Errorf("%s: a fragment is never sent; remove it", redactURL(u))
	}
	return u, nil
}
