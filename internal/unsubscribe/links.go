package unsubscribe

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/postline/postline/internal/suppression"
)

// LocalPartPrefix starts the local part of the mailto address of every
// List-Unsubscribe header: unsubscribe+<token>@<bounce domain>.
const LocalPartPrefix = "unsubscribe+"

// Path is the path the bounce-receiver serves the one-click links under
// (Handler's route), and the path of the default link base.
const Path = "/unsubscribe"

// maxLineBytes bounds a header line (RFC 5322 section 2.1.1) and
// maxPathBytes an address in an SMTP path (RFC 5321 section 4.5.3.1.3,
// without the angle brackets).
const (
	maxLineBytes = 998
	maxPathBytes = 254
	// maxURIBytes is the longest URI that fits on a header line of its own
	// as the sender writes it: "List-Unsubscribe: <uri>,".
	maxURIBytes = maxLineBytes - len("List-Unsubscribe: <>,")
)

// LinksConfig configures Links.
type LinksConfig struct {
	// Domain is the bounce domain: the mailto address is
	// unsubscribe+<token>@Domain. Required.
	Domain string
	// URL is the base of the one-click links, each URL/<token>; an https
	// URL in production (RFC 8058), whose Path the bounce-receiver's hooks
	// server answers behind a TLS proxy. Defaults to
	// https://<Domain>/unsubscribe.
	URL string
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg LinksConfig) WithDefaults() LinksConfig {
	cfg.Domain = strings.ToLower(strings.TrimSpace(cfg.Domain))
	if cfg.URL == "" && cfg.Domain != "" {
		cfg.URL = "https://" + cfg.Domain + Path
	}
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	return cfg
}

// Validate reports the first invalid field of cfg (after WithDefaults).
func (cfg LinksConfig) Validate() error {
	if cfg.Domain == "" || strings.ContainsAny(cfg.Domain, "@ \t\r\n<>") || !strings.Contains(cfg.Domain, ".") {
		return fmt.Errorf("unsubscribe links: Domain %q is not a domain name", cfg.Domain)
	}
	u, err := url.Parse(cfg.URL)
	switch {
	case err != nil:
		return fmt.Errorf("unsubscribe links: URL %q: %w", cfg.URL, err)
	case u.Scheme != "https" && u.Scheme != "http" || u.Host == "":
		return fmt.Errorf("unsubscribe links: URL %q is not an absolute https URL", cfg.URL)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return fmt.Errorf("unsubscribe links: URL %q has a query, fragment or user: want a base the token is appended to", cfg.URL)
	case strings.ContainsAny(cfg.URL, "<>, \t\r\n\""):
		return fmt.Errorf("unsubscribe links: URL %q holds a character a List-Unsubscribe header cannot carry", cfg.URL)
	}
	return nil
}

// Links makes the List-Unsubscribe URIs of one recipient's copy. It is
// safe for concurrent use.
type Links struct {
	cfg    LinksConfig
	signer *Signer
}

// NewLinks returns Links that sign tokens with signer.
func NewLinks(cfg LinksConfig, signer *Signer) (*Links, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if signer == nil {
		return nil, errors.New("unsubscribe links: nil signer")
	}
	return &Links{cfg: cfg, signer: signer}, nil
}

// URL returns the base of the one-click links.
func (l *Links) URL() string { return l.cfg.URL }

// URIs returns the List-Unsubscribe URIs for t, the one-click link first,
// then the mailto address when its address fits an SMTP path. It returns
// nil when t cannot be signed (a field beyond the bounds), its address is
// not one the suppression lists can hold, or the link would not fit on a
// header line: the copy then goes without the headers rather than with a
// link that cannot work.
func (l *Links) URIs(t Token) []string {
	if _, err := suppression.Normalize(t.Address); err != nil {
		return nil
	}
	token, err := l.signer.Sign(t)
	if err != nil {
		return nil
	}
	link := l.cfg.URL + "/" + token
	if len(link) > maxURIBytes {
		return nil
	}
	mailbox := LocalPartPrefix + token + "@" + l.cfg.Domain
	if len(mailbox) > maxPathBytes {
		return []string{link}
	}
	return []string{link, "mailto:" + mailbox}
}

// TokenOfAddress returns the token of an address unsubscribe+<token>@domain
// (in any case, with or without angle brackets), checking the syntax
// only: the prefix, the domain and a plausible token. Verify checks the
// token.
func TokenOfAddress(address, domain string) (string, bool) {
	a := strings.ToLower(strings.TrimSpace(address))
	a = strings.TrimSuffix(strings.TrimPrefix(a, "<"), ">")
	at := strings.LastIndexByte(a, '@')
	if at < 0 || a[at+1:] != strings.ToLower(domain) || !strings.HasPrefix(a[:at], LocalPartPrefix) {
		return "", false
	}
	token := a[len(LocalPartPrefix):at]
	if len(token) == 0 || len(token) > MaxTokenLen || strings.Trim(token, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		return "", false
	}
	return token, true
}
