package dkim

import (
	"crypto/ed25519"
	"crypto/sha256"
	"strings"
	"testing"
	"time"
)

// BenchmarkSign measures Sign (Ed25519) on a message with 1 and 100 KiB of
// body in lines of text, as the worker renders mail.
func BenchmarkSign(b *testing.B) {
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	k, err := newKey("example.org", "ed1", priv, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	const line = "The quick brown fox jumps over the lazy dog, again and again and again.\r\n"
	for _, size := range []struct {
		name string
		n    int
	}{{"1KiB", 1 << 10}, {"100KiB", 100 << 10}} {
		msg := []byte("From: a@example.org\r\nTo: b@example.test\r\nSubject: s\r\nDate: d\r\nMessage-ID: <m@x>\r\n" +
			"MIME-Version: 1.0\r\nContent-Type: text/plain\r\n\r\n" + strings.Repeat(line, size.n/len(line)))
		b.Run(size.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(msg)))
			for b.Loop() {
				if _, err := k.Sign(msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzRelaxedBodyHash holds the body hash, which hashes a clean body where
// it lies, to the hash of the body canonicalized line by line.
func FuzzRelaxedBodyHash(f *testing.F) {
	for _, s := range []string{"", "\r\n", "abc", "abc\r", "abc\r\n", "abc\r\n\r\n\r\n", "a  b\r\n", "a\tb", "a \r\nb",
		"abc ", "abc \r\n", " \r\n", "x\r\n \r\n", "a\nb \n", "\r\n\r\nx", "line\r\n\r\n\t\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var sc scratch
		if got, want := sc.relaxedBodyHash(body), sha256.Sum256(appendRelaxedBody(nil, body)); got != want {
			t.Fatalf("relaxedBodyHash(%q) differs from the hash of %q", body, appendRelaxedBody(nil, body))
		}
	})
}
