package sender

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// DefaultImplicitTLSPort is the port of an smtps:// relay URL without one.
const DefaultImplicitTLSPort = 465

// relayURLParams are the query parameters a relay URL may carry.
var relayURLParams = []string{"name", "priority", "tls", "helo", "max_conns", "rate", "insecure_skip_verify", "pipelining"}

// ParseRelayURL parses one relay URL into a Config (without defaults for
// the fields the URL does not set; New applies them):
//
//	smtp://[user[:pass]@]host[:port][?name=&priority=&tls=&helo=&max_conns=&rate=&insecure_skip_verify=true&pipelining=false]
//	smtps://... the same with implicit TLS (TLSImplicit)
//
// The port defaults to 587 for smtp and 465 for smtps, name to the host,
// tls (smtp only: auto, mandatory, opportunistic or none) to auto. User and
// password are percent-decoded, so a password with '/', '?', '#', '%' or ','
// must be percent-encoded ('@' and ':' may be, too). Errors name the part
// that is wrong and never include the password or any part of it: they show
// the URL only as scheme and host, and none of it when the host may not be
// the host.
func ParseRelayURL(raw string) (Config, error) {
	raw = strings.TrimSpace(raw)
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("relay URL: %s", urlParseProblem(err))
	}
	if strings.Contains(u.Opaque+u.Path+u.RawQuery+u.Fragment, "@") {
		// The '@' that ends the user and password came after the first
		// '/', '?' or '#', which url.Parse ends the host at: those are in
		// the password, and what looks like the host, port, path, query
		// or fragment holds pieces of it. None of it may be shown.
		return Config{}, errors.New("relay URL: '@' after the host: percent-encode '/', '?', '#', '%' and ',' in the user and password (%2F, %3F, %23, %25, %2C)")
	}
	where := "relay URL"
	if u.Host != "" {
		where += " " + u.Scheme + "://" + u.Host
	}
	cfg, err := relayURLServer(u)
	if err == nil {
		err = relayURLQuery(u, &cfg)
	}
	if err == nil {
		err = cfg.WithDefaults().Validate()
	}
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", where, err)
	}
	return cfg, nil
}

// relayURLServer reads a relay URL's scheme, host, port, user and password.
func relayURLServer(u *url.URL) (Config, error) {
	var cfg Config
	switch u.Scheme {
	case "smtp":
		cfg.Port, cfg.TLS = DefaultPort, TLSAuto
	case "smtps":
		cfg.Port, cfg.TLS = DefaultImplicitTLSPort, TLSImplicit
	default:
		return Config{}, fmt.Errorf("scheme %q is not smtp or smtps", u.Scheme)
	}
	if u.Opaque != "" {
		return Config{}, fmt.Errorf("want %s://host, not %s:host", u.Scheme, u.Scheme)
	}
	// Neither the path nor the fragment is shown: a password with an
	// unencoded '/' or '#' and no user before it ends up there.
	if u.Path != "" && u.Path != "/" {
		return Config{}, fmt.Errorf("a path is not allowed (percent-encode '/' in a password as %%2F)")
	}
	if u.Fragment != "" {
		return Config{}, fmt.Errorf("a fragment is not allowed (percent-encode '#' in a password as %%23)")
	}
	if cfg.Host = u.Hostname(); cfg.Host == "" {
		return Config{}, fmt.Errorf("host is missing")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Config{}, fmt.Errorf("port %q is not between 1 and 65535", p)
		}
		cfg.Port = n
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
		if cfg.Username == "" {
			return Config{}, fmt.Errorf("user is empty")
		}
	}
	return cfg, nil
}

// relayURLQuery reads a relay URL's query parameters into cfg.
func relayURLQuery(u *url.URL, cfg *Config) error {
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return fmt.Errorf("query: %s", urlParseProblem(err))
	}
	// In order, so the same URL always gets the same error.
	for _, key := range slices.Sorted(maps.Keys(q)) {
		vals := q[key]
		if !slices.Contains(relayURLParams, key) {
			return fmt.Errorf("unknown parameter %q (want one of %s)", key, strings.Join(relayURLParams, ", "))
		}
		if len(vals) > 1 {
			return fmt.Errorf("parameter %q is given %d times", key, len(vals))
		}
	}
	cfg.Name = cmp.Or(q.Get("name"), cfg.Host)
	cfg.HELO = q.Get("helo")
	if v := q.Get("priority"); v != "" {
		if cfg.Priority, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("priority %q is not an integer", v)
		}
	}
	if v := q.Get("max_conns"); v != "" {
		if cfg.MaxConns, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("max_conns %q is not an integer", v)
		}
	}
	if v := q.Get("rate"); v != "" {
		if cfg.Rate, err = strconv.ParseFloat(v, 64); err != nil {
			return fmt.Errorf("rate %q is not a number of messages per second", v)
		}
	}
	if v := q.Get("insecure_skip_verify"); v != "" {
		if cfg.InsecureSkipVerify, err = strconv.ParseBool(v); err != nil {
			return fmt.Errorf("insecure_skip_verify %q is not true or false", v)
		}
	}
	if v := q.Get("pipelining"); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("pipelining %q is not true or false", v)
		}
		cfg.NoPipelining = !on
	}
	if v := q.Get("tls"); v != "" {
		switch p := TLSPolicy(strings.ToLower(v)); {
		case u.Scheme == "smtps" && p != TLSImplicit:
			return fmt.Errorf("tls=%s conflicts with smtps:// (implicit TLS); use smtp:// for STARTTLS", v)
		case u.Scheme == "smtp" && p == TLSImplicit:
			return fmt.Errorf("tls=implicit: use smtps:// for implicit TLS")
		case !p.valid():
			return fmt.Errorf("tls %q is not one of auto, mandatory, opportunistic, none", v)
		default:
			cfg.TLS = p
		}
	}
	return nil
}

// urlParseProblem describes a url.Parse error without the URL, which may
// hold a password.
func urlParseProblem(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ee url.EscapeError
	if errors.As(err, &ee) {
		return "invalid percent-encoding"
	}
	var he url.InvalidHostError
	if errors.As(err, &he) {
		return "invalid character in host"
	}
	msg := err.Error()
	if strings.Contains(msg, "userinfo") {
		return "invalid user or password (percent-encode reserved characters)"
	}
	if strings.Contains(msg, "port") {
		return "invalid port"
	}
	return "not a valid URL"
}

// ParseRelayURLs parses a comma-separated list of relay URLs (see
// ParseRelayURL) and returns the configs sorted by Priority, keeping the
// list's order among equal priorities. Names must be unique.
func ParseRelayURLs(list string) ([]Config, error) {
	if strings.TrimSpace(list) == "" {
		return nil, errors.New("relay URLs: the list is empty")
	}
	parts := strings.Split(list, ",")
	// Every entry is checked before any is parsed: an unencoded ',' in a
	// password splits its URL in two, and the head parses as a host and
	// port made of the user and the start of the password, which an error
	// about the head would show.
	for i, raw := range parts {
		switch {
		case strings.TrimSpace(raw) == "":
			return nil, fmt.Errorf("relay URLs: entry %d is empty", i+1)
		case !strings.Contains(raw, "://"):
			return nil, fmt.Errorf("relay URLs: entry %d is not a scheme://host URL (percent-encode ',' in a password as %%2C)", i+1)
		}
	}
	cfgs := make([]Config, 0, len(parts))
	seen := make(map[string]int, len(parts))
	for i, raw := range parts {
		cfg, err := ParseRelayURL(raw)
		if err != nil {
			return nil, fmt.Errorf("relay URLs: entry %d: %w", i+1, err)
		}
		if j, dup := seen[cfg.Name]; dup {
			return nil, fmt.Errorf("relay URLs: entries %d and %d are both named %q (set ?name=)", j, i+1, cfg.Name)
		}
		seen[cfg.Name] = i + 1
		cfgs = append(cfgs, cfg)
	}
	slices.SortStableFunc(cfgs, func(a, b Config) int { return cmp.Compare(a.Priority, b.Priority) })
	return cfgs, nil
}
