package unsubscribe

import (
	"strings"
	"testing"

	"github.com/postline/postline/event"
)

func TestLinksConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     LinksConfig
		wantURL string // "": invalid
	}{
		{"the bounce domain alone", LinksConfig{Domain: "Bounces.Example.com"}, "https://bounces.example.com/unsubscribe"},
		{"a base of its own", LinksConfig{Domain: "b.example.com", URL: "https://mail.example.com/u/"}, "https://mail.example.com/u"},
		{"plain http (tests on loopback)", LinksConfig{Domain: "b.example.com", URL: "http://127.0.0.1:8080/unsubscribe"}, "http://127.0.0.1:8080/unsubscribe"},
		{"no domain", LinksConfig{URL: "https://mail.example.com/u"}, ""},
		{"a domain with an at", LinksConfig{Domain: "a@b.com"}, ""},
		{"not absolute", LinksConfig{Domain: "b.example.com", URL: "/unsubscribe"}, ""},
		{"another scheme", LinksConfig{Domain: "b.example.com", URL: "ftp://b.example.com/u"}, ""},
		{"a query", LinksConfig{Domain: "b.example.com", URL: "https://b.example.com/u?x=1"}, ""},
		{"a comma", LinksConfig{Domain: "b.example.com", URL: "https://b.example.com/a,b"}, ""},
		{"an angle bracket", LinksConfig{Domain: "b.example.com", URL: "https://b.example.com/a>b"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := NewLinks(tt.cfg, newSigner(t, key1))
			if tt.wantURL == "" {
				if err == nil {
					t.Fatalf("NewLinks accepted %+v (URL %s)", tt.cfg, l.URL())
				}
				return
			}
			if err != nil || l.URL() != tt.wantURL {
				t.Fatalf("NewLinks = %v; URL %q, want %q", err, l.URL(), tt.wantURL)
			}
		})
	}
}

func TestLinksURIs(t *testing.T) {
	s := newSigner(t, key1)
	l, err := NewLinks(LinksConfig{Domain: "bounces.example.com"}, s)
	if err != nil {
		t.Fatal(err)
	}
	uris := l.URIs(sampleToken())
	if len(uris) != 2 {
		t.Fatalf("URIs = %q, want a link and a mailto", uris)
	}
	token, ok := strings.CutPrefix(uris[0], "https://bounces.example.com/unsubscribe/")
	if !ok {
		t.Fatalf("link %q is not under the default base", uris[0])
	}
	if got, err := s.Verify(token); err != nil || got != sampleToken() {
		t.Fatalf("the link's token verifies to %+v, %v", got, err)
	}
	if want := "mailto:unsubscribe+" + token + "@bounces.example.com"; uris[1] != want {
		t.Fatalf("mailto = %q, want %q", uris[1], want)
	}
	if got, ok := TokenOfAddress(strings.ToUpper(strings.TrimPrefix(uris[1], "mailto:")), "Bounces.Example.com"); !ok || got != token {
		t.Fatalf("TokenOfAddress of the mailto = %q, %v", got, ok)
	}
	if strings.Contains(strings.ToLower(strings.Join(uris, " ")), "lovelace") {
		t.Fatal("the URIs carry the address in clear")
	}

	// A mailbox longer than an SMTP path keeps the link only; a link
	// longer than a header line means no headers at all.
	long := sampleToken()
	long.MessageID = strings.Repeat("m", 150) + "@x"
	if got := l.URIs(long); len(got) != 1 || !strings.HasPrefix(got[0], "https://") {
		t.Errorf("URIs of a long token = %q, want the link only", got)
	}
	longest := Token{Tenant: strings.Repeat("t", MaxTenantBytes), Stream: event.StreamBulk,
		Address: strings.Repeat("a", 200) + "@b.c", MessageID: strings.Repeat("m", MaxMessageIDBytes-2) + "@x"}
	if got := l.URIs(longest); got != nil {
		t.Errorf("URIs of a token too long for a header line = %q, want none", got)
	}
	bad := sampleToken()
	bad.Address = "not an address"
	if got := l.URIs(bad); got != nil {
		t.Errorf("URIs of an address the lists cannot hold = %q, want none", got)
	}
}

func TestTokenOfAddress(t *testing.T) {
	tests := []struct {
		address string
		want    string // "": refused
	}{
		{"unsubscribe+abc234@b.example.com", "abc234"},
		{"<UNSUBSCRIBE+ABC234@B.Example.COM>", "abc234"},
		{"unsubscribe+@b.example.com", ""},
		{"unsubscribe+abc1@b.example.com", ""},
		{"unsubscribe+abc@other.example.com", ""},
		{"bounce+abc@b.example.com", ""},
		{"unsubscribe+" + strings.Repeat("a", MaxTokenLen+1) + "@b.example.com", ""},
		{"unsubscribe+abc", ""},
	}
	for _, tt := range tests {
		got, ok := TokenOfAddress(tt.address, "b.example.com")
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("TokenOfAddress(%q) = %q, %v; want %q", tt.address, got, ok, tt.want)
		}
	}
}
