package unsubscribe

import (
	"errors"
	"strings"
	"testing"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/returnpath"
)

const (
	key1 = "0123456789abcdef0123"
	key2 = "another key, long enough"
)

func newSigner(t testing.TB, keys ...string) *Signer {
	t.Helper()
	var kb [][]byte
	for _, k := range keys {
		kb = append(kb, []byte(k))
	}
	s, err := NewSigner(kb)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sampleToken() Token {
	return Token{Tenant: "acme", Stream: event.StreamBulk, Address: "Ada.Lovelace@Example.net",
		MessageID: "news-42.1764590400@shop.example", Recipient: 3, Life: 1234567}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	s := newSigner(t, key1)
	tests := []struct {
		name string
		tok  Token
	}{
		{"bulk", sampleToken()},
		{"transactional without tenant or life", Token{Stream: event.StreamTransactional, Address: "a@b.c", MessageID: "m@x", Recipient: 0}},
		{"last recipient, negative life", Token{Stream: event.StreamBulk, Address: "a@b.c", MessageID: "m@x", Recipient: MaxRecipients - 1, Life: -9}},
		{"longest fields", Token{Tenant: strings.Repeat("t", MaxTenantBytes), Stream: event.StreamBulk,
			Address: strings.Repeat("a", MaxAddressBytes-4) + "@b.c", MessageID: strings.Repeat("m", MaxMessageIDBytes-2) + "@x",
			Recipient: 99, Life: -1 << 63}},
		{"UTF-8 tenant and address", Token{Tenant: "Zoë", Stream: event.StreamBulk, Address: "zoë@exämple.test", MessageID: "m@x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := s.Sign(tt.tok)
			if err != nil {
				t.Fatal(err)
			}
			if len(tok) > MaxTokenLen || strings.Trim(tok, "abcdefghijklmnopqrstuvwxyz234567") != "" {
				t.Fatalf("token %q is not lower-case base32 of at most %d characters", tok, MaxTokenLen)
			}
			for _, form := range []string{tok, strings.ToUpper(tok)} {
				got, err := s.Verify(form)
				if err != nil || got != tt.tok {
					t.Fatalf("Verify = %+v, %v; want %+v", got, err, tt.tok)
				}
			}
		})
	}
}

func TestSignRefusesWhatATokenCannotCarry(t *testing.T) {
	s := newSigner(t, key1)
	tests := []struct {
		name   string
		mutate func(*Token)
	}{
		{"no stream", func(t *Token) { t.Stream = "" }},
		{"every stream", func(t *Token) { t.Stream = "*" }},
		{"tenant too long", func(t *Token) { t.Tenant = strings.Repeat("t", MaxTenantBytes+1) }},
		{"no address", func(t *Token) { t.Address = "" }},
		{"address too long", func(t *Token) { t.Address = strings.Repeat("a", MaxAddressBytes) + "@b" }},
		{"no message ID", func(t *Token) { t.MessageID = "" }},
		{"message ID too long", func(t *Token) { t.MessageID = strings.Repeat("m", MaxMessageIDBytes+1) }},
		{"negative recipient", func(t *Token) { t.Recipient = -1 }},
		{"recipient out of range", func(t *Token) { t.Recipient = MaxRecipients }},
		{"address not UTF-8", func(t *Token) { t.Address = "a\xff@b.c" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := sampleToken()
			tt.mutate(&tok)
			if got, err := s.Sign(tok); err == nil {
				t.Fatalf("Sign = %q, want an error", got)
			} else if strings.Contains(err.Error(), "Lovelace") {
				t.Fatalf("the error %q names the address", err)
			}
		})
	}
}

func TestVerifyRefusesForgeries(t *testing.T) {
	s := newSigner(t, key1)
	good, err := s.Sign(sampleToken())
	if err != nil {
		t.Fatal(err)
	}
	other, _ := newSigner(t, key2).Sign(sampleToken())
	// A return path token under the same key, and one made to look like an
	// unsubscribe token's start: neither verifies.
	rp, err := returnpath.New("bounces.example.test", [][]byte{[]byte(key1)})
	if err != nil {
		t.Fatal(err)
	}
	flipped := []byte(good)
	flipped[len(flipped)/2] = map[bool]byte{true: 'a', false: 'b'}[flipped[len(flipped)/2] != 'a']
	tests := []struct {
		name  string
		token string
		want  error
	}{
		{"another key", other, ErrForged},
		{"one character changed", string(flipped), ErrForged},
		{"the MAC cut short", cut(good, 4), ErrForged},
		// Malformed or forged, as its first byte happens to fall.
		{"a return path token", rp.Token("news-42.1764590400@shop.example", 3), nil},
		{"empty", "", ErrMalformed},
		{"not base32", strings.Repeat("1", 40), ErrMalformed},
		{"too long", strings.Repeat("a", MaxTokenLen+1), ErrMalformed},
		{"too short", good[:10], ErrMalformed},
		{"spare bits set", spareBitsSet(good), ErrMalformed},
		{"another version", withVersion(good, 2), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Verify(tt.token)
			if tt.want == nil && (errors.Is(err, ErrForged) || errors.Is(err, ErrMalformed)) {
				err = nil
			}
			if !errors.Is(err, tt.want) || got != (Token{}) {
				t.Fatalf("Verify = %+v, %v; want nothing and %v", got, err, tt.want)
			}
		})
	}
}

func TestVerifyAcceptsEveryKey(t *testing.T) {
	old := newSigner(t, key2)
	rotated := newSigner(t, key1, key2)
	tok, _ := old.Sign(sampleToken())
	if got, err := rotated.Verify(tok); err != nil || got != sampleToken() {
		t.Fatalf("a token of the second key: %+v, %v", got, err)
	}
	tok, _ = rotated.Sign(sampleToken())
	if _, err := newSigner(t, key1).Verify(tok); err != nil {
		t.Fatalf("the first key does not sign: %v", err)
	}
	if _, err := old.Verify(tok); !errors.Is(err, ErrForged) {
		t.Fatalf("a signer without the first key verified its token: %v", err)
	}
}

func TestNewSigner(t *testing.T) {
	if _, err := NewSigner(nil); err == nil {
		t.Error("no keys accepted")
	}
	if _, err := NewSigner([][]byte{[]byte("short")}); err == nil || strings.Contains(err.Error(), "short") {
		t.Errorf("a short key: %v; want an error that does not quote it", err)
	}
}

// spareBitsSet returns token with the unused low bits of its last
// character set: the same bytes, spelled another way.
func spareBitsSet(token string) string {
	b, _ := encoding.DecodeString(token)
	bits := len(b) * 8
	if bits%5 == 0 {
		return token + "a" // no spare bits: any longer spelling is not canonical
	}
	last := strings.IndexByte("abcdefghijklmnopqrstuvwxyz234567", token[len(token)-1])
	return token[:len(token)-1] + string("abcdefghijklmnopqrstuvwxyz234567"[last|1])
}

// cut returns token with its last n bytes removed, spelled canonically.
func cut(token string, n int) string {
	b, _ := encoding.DecodeString(token)
	return encoding.EncodeToString(b[:len(b)-n])
}

// withVersion returns token with its version byte replaced, re-signed
// under key1, so that only the version is wrong.
func withVersion(token string, v byte) string {
	b, _ := encoding.DecodeString(token)
	body := append([]byte{v}, b[1:len(b)-macBytes]...)
	return encoding.EncodeToString(append(body, mac([]byte(key1), body)...))
}
