package returnpath

import (
	"strings"
	"testing"
)

func newSigner(t testing.TB, keys ...string) *Signer {
	t.Helper()
	var kb [][]byte
	for _, k := range keys {
		kb = append(kb, []byte(k))
	}
	s, err := New("Bounces.Example.TEST", kb)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAddressRoundTrip(t *testing.T) {
	s := newSigner(t, "0123456789abcdef0123")
	for _, idx := range []int{0, 1, 42, MaxRecipients - 1} {
		id := "a.b.c@example.com"
		addr := s.Address(id, idx)
		local, domain, _ := strings.Cut(addr, "@")
		if len(local) > 64 || domain != "bounces.example.test" || local != strings.ToLower(local) {
			t.Fatalf("Address = %q: want a lower-case local part of at most 64 characters at the domain", addr)
		}
		for _, form := range []string{addr, strings.ToUpper(addr), "<" + addr + ">"} {
			token, ok := s.TokenOf(form)
			if !ok {
				t.Fatalf("TokenOf(%q) refused its own address", form)
			}
			ref, got, ok := s.Verify(token)
			if !ok || got != idx || ref != RefOf(id) {
				t.Fatalf("Verify(%q) = %x, %d, %v; want %x, %d, true", token, ref, got, ok, RefOf(id), idx)
			}
		}
	}
}

func TestVerifyRefusesForgeries(t *testing.T) {
	s := newSigner(t, "0123456789abcdef0123")
	other := newSigner(t, "another key, long enough")
	good := s.Token("m@example.com", 3)
	flip := []byte(good)
	flip[len(flip)-1] = map[bool]byte{true: 'a', false: 'b'}[flip[len(flip)-1] != 'a']
	tests := map[string]string{
		"another key":        other.Token("m@example.com", 3),
		"last character":     string(flip),
		"recipient changed":  withIndex(t, good, 4),
		"too short":          good[:TokenLen-1],
		"not base32":         strings.Repeat("1", TokenLen),
		"empty":              "",
		"spare bits set":     good[:TokenLen-1] + string(spareBitsSet(good[TokenLen-1])),
		"index out of range": encoding.EncodeToString(append(append(make([]byte, refBytes), 200), make([]byte, macBytes)...)),
	}
	for name, token := range tests {
		if _, _, ok := s.Verify(token); ok {
			t.Errorf("%s: Verify(%q) accepted a token it did not make", name, token)
		}
	}
}

func TestRotatedKeysStillVerify(t *testing.T) {
	old := newSigner(t, "the old key, 16+ bytes")
	rotated := newSigner(t, "the new key, 16+ bytes", "the old key, 16+ bytes")
	if _, _, ok := rotated.Verify(old.Token("m@example.com", 0)); !ok {
		t.Error("a token of the old key does not verify after rotation")
	}
	if rotated.Token("m@example.com", 0) == old.Token("m@example.com", 0) {
		t.Error("the rotated signer still signs with the old key")
	}
}

func TestTokenOfRefusesOtherAddresses(t *testing.T) {
	s := newSigner(t, "0123456789abcdef0123")
	token := s.Token("m@example.com", 0)
	for _, addr := range []string{
		"fbl@bounces.example.test",
		"bounce+" + token + "@other.example",
		"bounce-" + token + "@bounces.example.test",
		"bounce+" + token + "x@bounces.example.test",
		"bounce+" + token,
		"",
	} {
		if _, ok := s.TokenOf(addr); ok {
			t.Errorf("TokenOf(%q) accepted it", addr)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for name, tt := range map[string]struct {
		domain string
		keys   [][]byte
	}{
		"no keys":   {"b.example", nil},
		"short key": {"b.example", [][]byte{[]byte("short")}},
		"no domain": {"", [][]byte{make([]byte, 16)}},
		"an @":      {"a@b.example", [][]byte{make([]byte, 16)}},
	} {
		if _, err := New(tt.domain, tt.keys); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// FuzzVerify checks that no input but a token the signer made verifies,
// and that TokenOf only returns strings of the token's shape.
func FuzzVerify(f *testing.F) {
	s := newSigner(f, "0123456789abcdef0123")
	f.Add(s.Token("m@example.com", 1))
	f.Add("bounce+" + s.Token("x@y", 2) + "@bounces.example.test")
	f.Add(strings.Repeat("a", TokenLen))
	f.Fuzz(func(t *testing.T, in string) {
		if token, ok := s.TokenOf(in); ok && len(token) != TokenLen {
			t.Fatalf("TokenOf(%q) = %q, not %d characters", in, token, TokenLen)
		}
		ref, idx, ok := s.Verify(in)
		if !ok {
			return
		}
		var want [tokenBytes]byte
		copy(want[:], ref[:])
		want[refBytes] = byte(idx)
		copy(want[refBytes+1:], mac(s.keys[0], ref, byte(idx)))
		if encoding.EncodeToString(want[:]) != strings.ToLower(in) {
			t.Fatalf("Verify accepted %q, which the signer would not make", in)
		}
	})
}

// withIndex returns token with its recipient index replaced, the HMAC
// left as it was.
func withIndex(t *testing.T, token string, idx byte) string {
	b, err := encoding.DecodeString(token)
	if err != nil {
		t.Fatal(err)
	}
	b[refBytes] = idx
	return encoding.EncodeToString(b)
}

// spareBitsSet returns the base32 digit c with its three low bits (beyond
// the token's 19 bytes) flipped on.
func spareBitsSet(c byte) byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	i := strings.IndexByte(alphabet, c)
	return alphabet[i|7]
}
