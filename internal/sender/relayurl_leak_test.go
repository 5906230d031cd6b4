package sender_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/postline/postline/internal/sender"
)

// leakedPart returns a piece of secret, three bytes or longer, that msg
// contains, or "" if none.
func leakedPart(msg, secret string) string {
	for n := len(secret); n >= 3; n-- {
		for i := 0; i+n <= len(secret); i++ {
			if part := secret[i : i+n]; strings.Contains(msg, part) {
				return part
			}
		}
	}
	return ""
}

// TestParseRelayURLNeverShowsPassword writes passwords with unencoded
// reserved characters into relay URLs, where url.Parse takes the rest of the
// password for a port, path, query or fragment, and checks that no error
// shows the password or any three-byte piece of it. A URL that does parse
// must carry exactly the password and host it was written with.
func TestParseRelayURLNeverShowsPassword(t *testing.T) {
	passwords := []string{
		"p?ss", "p#ss", "p/ss", "p@ss", "a:b:c", "%zz", "p,ss",
		"Zq7?Xv9k", "Zq7#Xv9k", "Zq7/Xv9k", "Zq7@Xv9k", "Zq7:Xv9k:Wr2", "Zq7%zzXv9k", "Zq7,Xv9k",
		// A numeric head makes "user:<head>" a valid host and port, so
		// url.Parse succeeds and the tail lands in a path, query or fragment.
		"4417/Xv9k", "4417?Xv9k", "4417#Xv9k", "4417,Xv9k", "4417?Xv9k#Wr2",
		"?Xv9kWr2", "#Xv9kWr2", "/Xv9kWr2", ",Xv9kWr2", "Xv9k?", "Xv9k%", "Xv9k%4",
		"?Xv9k=Wr2", "#/?@Xv9k", "Xv9k@Wr2/x", "4417/Xv9k@Wr2",
	}
	// (No password shares three bytes with the text errors are made of,
	// such as "relay", "name" or a port of the shapes.)
	shapes := []string{
		"smtp://ada:%s@relay.example.com",
		"smtp://ada:%s@relay.example.com:2525",
		"smtps://ada:%s@relay.example.com/",
		"smtp://ada:%s@relay.example.com?tls=mandatory&name=r1",
		"smtp://ada:%s@relay.example.com?tls=bogus",
		"smtp://ada:%s@relay.example.com:99999",
		"smtp://ada:%s@relay.example.com?tls=none",
		"smtp://ada:%s@",
		"smtp://ada@example.com:%s@relay.example.com",
		"ada:%s@relay.example.com",
		"http://ada:%s@relay.example.com",
	}
	for _, pw := range passwords {
		for _, shape := range shapes {
			raw := strings.Replace(shape, "%s", pw, 1)
			cfg, err := sender.ParseRelayURL(raw)
			if err != nil {
				if part := leakedPart(err.Error(), pw); part != "" {
					t.Errorf("ParseRelayURL(%q): error %q shows %q of the password", raw, err, part)
				}
			} else if cfg.Password != pw || cfg.Host != "relay.example.com" {
				t.Errorf("ParseRelayURL(%q) = host %q password %q, want relay.example.com and %q", raw, cfg.Host, cfg.Password, pw)
			}
			for _, list := range []string{raw, "smtp://backup.example.com," + raw, raw + ",smtp://backup.example.com"} {
				if _, err := sender.ParseRelayURLs(list); err != nil {
					if part := leakedPart(err.Error(), pw); part != "" {
						t.Errorf("ParseRelayURLs(%q): error %q shows %q of the password", list, err, part)
					}
				}
			}
		}
	}
}

// TestParseRelayURLReservedCharacters checks that each reserved character
// works in a password when percent-encoded, as the error asks.
func TestParseRelayURLReservedCharacters(t *testing.T) {
	for _, pw := range []string{"p?ss", "p#ss", "p/ss", "p@ss", "a:b:c", "%zz", "p,ss", "p ss", "p%2Fss"} {
		raw := "smtp://ada:" + encodeAll(pw) + "@relay.example.com"
		cfg, err := sender.ParseRelayURL(raw)
		if err != nil {
			t.Errorf("ParseRelayURL(%q): %v", raw, err)
			continue
		}
		if cfg.Password != pw {
			t.Errorf("ParseRelayURL(%q) password %q, want %q", raw, cfg.Password, pw)
		}
	}
}

// TestParseRelayURLMisencodedPasswordError checks the error for a password
// that url.Parse splits says what to do, without saying where.
func TestParseRelayURLMisencodedPasswordError(t *testing.T) {
	for _, raw := range []string{
		"smtp://ada:2525/Xv9k@relay.example.com",
		"smtp://ada:?Xv9k@relay.example.com",
		"smtp://ada:#Xv9k@relay.example.com",
	} {
		_, err := sender.ParseRelayURL(raw)
		if err == nil || !strings.Contains(err.Error(), "percent-encode") {
			t.Errorf("ParseRelayURL(%q) = %v, want an error asking to percent-encode", raw, err)
		}
		if err != nil && strings.Contains(err.Error(), "ada") {
			t.Errorf("ParseRelayURL(%q): error %q shows what url.Parse took for the host", raw, err)
		}
	}
}

// encodeAll percent-encodes every byte of s but letters and digits.
func encodeAll(s string) string {
	var b strings.Builder
	for i := range len(s) {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}
