package sender_test

import (
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/postline/postline/internal/sender"
)

// swapCase swaps the case of ASCII letters. Nothing ParseRelayURL decides
// about a password depends on its letters' case (userinfo takes letters of
// both cases, percent escapes read hex either way), so only an echo of the
// password can make two errors differ by it.
func swapCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		case 'A' <= c && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

// renderRelayURL writes cfg back as a relay URL that sets every field.
func renderRelayURL(cfg sender.Config) string {
	u := url.URL{Scheme: "smtp", Host: net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))}
	q := url.Values{}
	if cfg.TLS == sender.TLSImplicit {
		u.Scheme = "smtps"
	} else {
		q.Set("tls", string(cfg.TLS))
	}
	if cfg.Username != "" {
		u.User = url.UserPassword(cfg.Username, cfg.Password)
	}
	q.Set("name", cfg.Name)
	q.Set("priority", strconv.Itoa(cfg.Priority))
	q.Set("max_conns", strconv.Itoa(cfg.MaxConns))
	q.Set("rate", strconv.FormatFloat(cfg.Rate, 'g', -1, 64))
	q.Set("insecure_skip_verify", strconv.FormatBool(cfg.InsecureSkipVerify))
	if cfg.HELO != "" {
		q.Set("helo", cfg.HELO)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// FuzzParseRelayURL parses scheme://user:password@rest with every part
// fuzzed. Properties:
//
//   - no error shows the password: the error text must be the same when
//     the password's letters swap case (it would differ by the echoed
//     piece), and must not contain the password itself unless the error
//     for the case-swapped password does too (then it is other text);
//   - a URL that parses gives a Config that validates, and writing that
//     Config back as a URL parses to the same Config;
//   - allocation is bounded per input byte.
func FuzzParseRelayURL(f *testing.F) {
	for _, seed := range [][4]string{
		{"smtp", "ada", "s3cret", "relay.example.com"},
		{"smtps", "ada%40example.com", "p%40ss%3Aw%2Fo%2Crd", "relay.example.com:4650?name=ses&priority=2"},
		{"smtp", "ada", "p?ss", "relay.example.com"},
		{"smtp", "ada", "p#ss", "relay.example.com"},
		{"smtp", "ada", "p/ss", "relay.example.com"},
		{"smtp", "ada", "p@ss", "relay.example.com"},
		{"smtp", "ada", "a:b:c", "relay.example.com"},
		{"smtp", "ada", "%zz", "relay.example.com"},
		{"smtp", "ada", "4417/Xv9k", "relay.example.com"},
		{"smtp", "ada", "?Xv9k", "relay.example.com?tls=none"},
		{"smtp", "ada", "Xv9k", "[::1]:25?tls=none&helo=me.example.com&max_conns=8&rate=12.5&insecure_skip_verify=true"},
		{"smtp", "ada", "Xv9k", "relay.example.com?tls=bogus"},
		{"http", "ada", "Xv9k", "relay.example.com"},
		{"smtp", "", "Xv9k", "relay.example.com:0"},
		{"A", "AA", "AAAAA", "AAAAAA0"}, // the password is part of the host
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	f.Fuzz(func(t *testing.T, scheme, user, password, rest string) {
		raw := scheme + "://" + user + ":" + password + "@" + rest
		cfg, err := sender.ParseRelayURL(raw)

		swapped := scheme + "://" + user + ":" + swapCase(password) + "@" + rest
		_, errSwapped := sender.ParseRelayURL(swapped)
		if (err == nil) != (errSwapped == nil) {
			t.Fatalf("ParseRelayURL(%q) = %v but ParseRelayURL(%q) = %v: the password's case decided", raw, err, swapped, errSwapped)
		}
		if err != nil {
			msg := err.Error()
			if msg != errSwapped.Error() {
				t.Fatalf("errors differ with the password's case, so they show it:\n%q: %q\n%q: %q", raw, msg, swapped, errSwapped)
			}
			// A password that is also part of the scheme, user or host
			// may show as that part: only an echo of the password
			// itself counts.
			echo := !strings.Contains(scheme+"\x00"+user+"\x00"+rest, password)
			if len(password) >= 3 && echo && strings.Contains(msg, password) && !strings.Contains(errSwapped.Error(), swapCase(password)) {
				t.Fatalf("ParseRelayURL(%q): error %q shows the password", raw, msg)
			}
		} else {
			if verr := cfg.WithDefaults().Validate(); verr != nil {
				t.Fatalf("ParseRelayURL(%q) = %+v, which does not validate: %v", raw, cfg, verr)
			}
			again := renderRelayURL(cfg)
			cfg2, err := sender.ParseRelayURL(again)
			if err != nil {
				t.Fatalf("ParseRelayURL(%q) = %+v, written back as %q, which does not parse: %v", raw, cfg, again, err)
			}
			if cfg2 != cfg {
				t.Fatalf("round trip of %q through %q:\n%+v, then\n%+v", raw, again, cfg, cfg2)
			}
		}

		if allocs := testing.AllocsPerRun(2, func() { _, _ = sender.ParseRelayURL(raw) }); allocs > float64(100+2*len(raw)) {
			t.Fatalf("ParseRelayURL allocated %.0f times for %d bytes", allocs, len(raw))
		}
	})
}
