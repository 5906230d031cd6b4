package mailquery

import (
	"testing"
	"time"
)

func TestCursorRoundTrip(t *testing.T) {
	f := Filter{Recipient: "@example.com"}
	tests := []cursor{
		{createdAt: time.Date(2026, 12, 5, 12, 0, 0, 123456000, time.UTC), messageID: "order-1@shop.example"},
		{createdAt: time.UnixMicro(0).UTC(), messageID: "x"},
		{createdAt: time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), messageID: "ünïcødé@例え.jp", filter: f.fingerprint()},
	}
	for _, c := range tests {
		s := c.encode()
		got, err := decodeCursor(s)
		if err != nil || !got.createdAt.Equal(c.createdAt) || got.messageID != c.messageID || got.filter != c.filter {
			t.Errorf("decode(encode(%+v)) = %+v, %v", c, got, err)
		}
	}
}

func TestCursorRefusesWhatItDidNotWrite(t *testing.T) {
	good := cursor{createdAt: time.Now(), messageID: "a@x"}.encode()
	flip := []byte(good)
	flip[5] ^= 1 // another base64 letter
	for name, s := range map[string]string{
		"empty": "", "garbage": "hello", "not base64": "!!!!", "cut": good[:len(good)-1],
		"one letter changed": string(flip), "padded": good + "=", "standard alphabet": "+/" + good[2:],
	} {
		if c, err := decodeCursor(s); err == nil {
			t.Errorf("%s: decodeCursor(%q) = %+v, want an error", name, s, c)
		}
	}
}

func TestFingerprintIgnoresPageSizeTimesAndDomainCase(t *testing.T) {
	a := Filter{Recipient: "Ada@EXAMPLE.com", Limit: 10, Cursor: "x", Since: time.Unix(1, 0)}
	b := Filter{Recipient: "Ada@example.com", Limit: 20, Since: time.Unix(2, 0), Until: time.Unix(3, 0)}
	if a.fingerprint() != b.fingerprint() {
		t.Error("filters that list the same mail have different fingerprints")
	}
	for _, other := range []Filter{
		{Recipient: "ada@example.com"}, {Recipient: "Ada@example.com", Tenant: "t"},
		{Recipient: "Ada@example.com", Reason: "hard"}, {Recipient: "Ada@example.com", State: "sent"},
	} {
		if other.fingerprint() == b.fingerprint() {
			t.Errorf("%+v has the fingerprint of %+v", other, b)
		}
	}
}

// FuzzCursor checks that a cursor decodes to what was encoded, and that
// no change to its text decodes to another cursor: it is refused instead.
func FuzzCursor(f *testing.F) {
	f.Add(int64(1764936000123456), "order-1@shop.example", []byte("filter!!"), 3, byte('B'))
	f.Add(int64(-62135596800000000), "x", []byte{}, 0, byte('-'))
	f.Fuzz(func(t *testing.T, micros int64, id string, fp []byte, pos int, letter byte) {
		if id == "" {
			return // no mail has an empty ID
		}
		c := cursor{createdAt: time.UnixMicro(micros).UTC(), messageID: id}
		copy(c.filter[:], fp)
		s := c.encode()
		got, err := decodeCursor(s)
		if err != nil {
			t.Fatalf("decode(encode(%+v)): %v", c, err)
		}
		if !got.createdAt.Equal(c.createdAt) || got.messageID != c.messageID || got.filter != c.filter {
			t.Fatalf("decode(encode(%+v)) = %+v", c, got)
		}
		pos = int(uint(pos) % uint(len(s)))
		if s[pos] == letter {
			return
		}
		tampered := s[:pos] + string(letter) + s[pos+1:]
		if bad, err := decodeCursor(tampered); err == nil {
			t.Fatalf("tampered cursor %q (from %q) decoded to %+v", tampered, s, bad)
		}
	})
}
