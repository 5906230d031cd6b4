package unsubscribe

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/postline/postline/event"
)

// FuzzRoundTrip signs what a token can carry and checks that it verifies
// to exactly that, in upper case too, and that changing any one character
// of it, or cutting or extending it, never verifies.
func FuzzRoundTrip(f *testing.F) {
	f.Add("acme", "ada@example.net", "m.1@shop.example", 3, int64(7), true, 10, byte('q'))
	f.Add("", "a@b.c", "m@x", 0, int64(0), false, 0, byte('a'))
	f.Add("Zoë", "zoë@exämple.test", "<x@y>", 99, int64(-1), true, 1000, byte('7'))
	s := newSigner(f, key1)
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	f.Fuzz(func(t *testing.T, tenant, address, messageID string, idx int, life int64, bulk bool, pos int, c byte) {
		tok := Token{Tenant: tenant, Stream: event.StreamTransactional, Address: address, MessageID: messageID, Recipient: idx, Life: life}
		if bulk {
			tok.Stream = event.StreamBulk
		}
		signed, err := s.Sign(tok)
		if err != nil {
			if tok.check() == nil {
				t.Fatalf("Sign refused %+v, which check accepts: %v", tok, err)
			}
			return
		}
		if len(signed) > MaxTokenLen {
			t.Fatalf("token of %d characters, limit %d", len(signed), MaxTokenLen)
		}
		for _, form := range []string{signed, strings.ToUpper(signed)} {
			got, err := s.Verify(form)
			if err != nil || got != tok {
				t.Fatalf("Verify = %+v, %v; want %+v", got, err, tok)
			}
		}
		// One character replaced by another of the alphabet.
		i := uint(pos) % uint(len(signed))
		repl := alphabet[int(c)%len(alphabet)]
		if repl == signed[i] {
			repl = alphabet[(int(c)+1)%len(alphabet)]
		}
		changed := signed[:i] + string(repl) + signed[i+1:]
		for name, bad := range map[string]string{"changed": changed, "cut": signed[:i], "extended": signed + string(repl)} {
			if got, err := s.Verify(bad); !errors.Is(err, ErrForged) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s token %q verified: %+v, %v", name, bad, got, err)
			}
		}
	})
}

// FuzzVerify feeds Verify any string: it fails with ErrMalformed or
// ErrForged, or returns a token that signs back to the same string; its
// time and allocations are bounded by the token's length, which is
// bounded before anything is decoded.
func FuzzVerify(f *testing.F) {
	s := newSigner(f, key1)
	good, _ := s.Sign(sampleToken())
	for _, seed := range []string{good, strings.ToUpper(good), "", "a", strings.Repeat("a", MaxTokenLen+1), good + "a", "aebagbaf", "\xff"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var (
			got Token
			err error
		)
		alloc := allocatedDuring(func() { got, err = s.Verify(in) })
		// Lower-casing, decoding and the canonical spelling each hold at
		// most MaxTokenLen bytes; the HMACs and the fields a fixed amount
		// more.
		if limit := uint64(8*min(len(in), MaxTokenLen) + 8<<10); alloc > limit {
			t.Fatalf("Verify of %d bytes allocated %d bytes, limit %d", len(in), alloc, limit)
		}
		if err != nil {
			if !errors.Is(err, ErrForged) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("Verify error %v is neither ErrForged nor ErrMalformed", err)
			}
			if got != (Token{}) {
				t.Fatalf("Verify failed and returned %+v", got)
			}
			return
		}
		if !utf8.ValidString(got.Address) || got.check() != nil {
			t.Fatalf("Verify returned a token that does not check: %+v", got)
		}
		again, err := s.Sign(got)
		if err != nil || again != strings.ToLower(in) {
			t.Fatalf("the verified token signs to %q, %v; want %q", again, err, strings.ToLower(in))
		}
	})
}

// allocatedDuring returns the bytes the heap allocated while f ran
// (TotalAlloc counts allocations, not live memory).
func allocatedDuring(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
