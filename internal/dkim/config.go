package dkim

import (
	"fmt"
	"strings"
	"time"
)

// Config lists the signing keys.
type Config struct {
	// Keys are the signing keys, at most one per domain. Defaults to none
	// (nothing is signed).
	Keys []KeyConfig
	// NowFunc is the clock of the signatures' t= tag. Defaults to
	// time.Now.
	NowFunc func() time.Time
}

// KeyConfig is one domain's signing key.
type KeyConfig struct {
	// Domain is the signing domain (d=): mail whose From address is in
	// exactly this domain is signed with the key. Required.
	Domain string
	// Selector names the key's DNS record, <Selector>._domainkey.<Domain>
	// (s=). Required.
	Selector string
	// KeyFile is the path of the PEM private key: RSA of at least
	// MinRSABits bits, or Ed25519. Required.
	KeyFile string
}

// WithDefaults returns c with zero fields set to their defaults and the
// domains in canonical form (lower case, without a trailing dot).
func (c Config) WithDefaults() Config {
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	keys := make([]KeyConfig, len(c.Keys))
	for i, k := range c.Keys {
		k.Domain = canonicalDomain(k.Domain)
		keys[i] = k
	}
	c.Keys = keys
	return c
}

// Validate reports the first invalid key entry. It expects a config that
// went through WithDefaults.
func (c Config) Validate() error {
	seen := make(map[string]bool, len(c.Keys))
	for i, k := range c.Keys {
		if err := k.validate(); err != nil {
			return fmt.Errorf("dkim config: Keys[%d]: %w", i, err)
		}
		d := canonicalDomain(k.Domain)
		if seen[d] {
			return fmt.Errorf("dkim config: Keys[%d]: domain %q has more than one key", i, k.Domain)
		}
		seen[d] = true
	}
	return nil
}

func (k KeyConfig) validate() error {
	switch {
	case !validDomain(canonicalDomain(k.Domain)):
		return fmt.Errorf("Domain %q is not a domain name", k.Domain)
	case !validDomain(k.Selector):
		return fmt.Errorf("domain %s: Selector %q is not a DNS name (letters, digits, hyphens and dots)", k.Domain, k.Selector)
	case strings.TrimSpace(k.KeyFile) == "":
		return fmt.Errorf("domain %s: KeyFile is required", k.Domain)
	case strings.ContainsAny(k.KeyFile, "\x00\r\n"):
		return fmt.Errorf("domain %s: KeyFile %q contains NUL, CR or LF", k.Domain, k.KeyFile)
	}
	return nil
}

// ParseKeys parses the compact form of the signing keys: comma-separated
// entries domain=selector:keyfile, for example
//
//	example.com=s1:/etc/postline/dkim/example.com.pem,other.org=s2:/etc/postline/dkim/other.org.pem
//
// Spaces around entries and their parts are ignored; the key file path
// runs from the first colon after the selector to the end of the entry,
// so it may contain colons but not commas. "" is no keys. The result has
// gone through WithDefaults and Validate.
func ParseKeys(s string) (Config, error) {
	var c Config
	if strings.TrimSpace(s) == "" {
		return c.WithDefaults(), nil
	}
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		domain, rest, ok := strings.Cut(entry, "=")
		if !ok {
			return Config{}, fmt.Errorf("dkim keys: entry %d %q is not domain=selector:keyfile", i+1, entry)
		}
		domain = strings.TrimSpace(domain)
		selector, file, ok := strings.Cut(rest, ":")
		if !ok {
			return Config{}, fmt.Errorf("dkim keys: entry %d (domain %q): %q is not selector:keyfile", i+1, domain, rest)
		}
		c.Keys = append(c.Keys, KeyConfig{
			Domain:   domain,
			Selector: strings.TrimSpace(selector),
			KeyFile:  strings.TrimSpace(file),
		})
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("dkim keys: %w", err)
	}
	return c, nil
}

// FormatKeys writes the keys in the form ParseKeys reads.
func FormatKeys(keys []KeyConfig) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k.Domain + "=" + k.Selector + ":" + k.KeyFile
	}
	return strings.Join(parts, ",")
}

// canonicalDomain lowercases d and drops one trailing dot.
func canonicalDomain(d string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(d)), ".")
}

// validDomain reports whether d is dot-separated labels of ASCII letters,
// digits and inner hyphens, 1 to 63 bytes each, 253 bytes at most.
func validDomain(d string) bool {
	if d == "" || len(d) > 253 {
		return false
	}
	for label := range strings.SplitSeq(d, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
