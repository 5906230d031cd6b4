package sender

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// FuzzAppend7bitMatchesReference holds append7bit to the single-pass
// encoder it replaced: the same verdict on every body, and the same bytes
// appended after what dst held.
func FuzzAppend7bitMatchesReference(f *testing.F) {
	for _, s := range []string{"", "plain\n", "a\r\nb\r\n", "tab\there\n", "trailing \n", "trailing\t", "\r", "x\r\r\n",
		"\x7f", "caf\xc3\xa9\n", strings.Repeat("y", 998) + "\n", strings.Repeat("y", 999), "1234567\n12345678\n123456789",
		strings.Repeat("<p class=\"body\">The quick brown fox</p>\n", 20)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		prefix := []byte("Content-Type: text/plain\r\n\r\n")
		got, ok := append7bit(bytes.Clone(prefix), s)
		want, wantOK := reference7bit(bytes.Clone(prefix), s)
		if ok != wantOK || !bytes.Equal(got, want) {
			t.Fatalf("append7bit(%q) = %q, %v; the reference says %q, %v", s, got, ok, want, wantOK)
		}
	})
}

// FuzzOutside7bit holds the word test to the byte test: non-zero exactly
// when a byte is not printable ASCII.
func FuzzOutside7bit(f *testing.F) {
	for _, x := range []uint64{0, 0x2020202020202020, 0x7e7e7e7e7e7e7e7e, 0x7f20202020202020, 0x202020202020201f, 0xff00ff00ff00ff00} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x uint64) {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], x)
		want := false
		for _, c := range b {
			want = want || c < 0x20 || c > 0x7e
		}
		if got := outside7bit(x) != 0; got != want {
			t.Fatalf("outside7bit(%#x) = %#x, want a mark: %v", x, outside7bit(x), want)
		}
	})
}

// reference7bit is append7bit as it was written before it went line by
// line: one pass, eight bytes at a time up to the word with a line break
// or a byte 7bit does not carry, that word byte by byte.
func reference7bit(dst []byte, body string) ([]byte, bool) {
	b := bytesOf(body)
	start := len(dst)
	lineStart := 0 // of the current line in b; b[:lineStart] is in dst
	// endLine checks the line b[lineStart:end] (without its line break).
	endLine := func(end int) bool {
		n := end - lineStart
		return n <= maxLineOctets && (n == 0 || b[end-1] != ' ' && b[end-1] != '\t')
	}
	for i := 0; i < len(b); {
		for ; len(b)-i >= 8; i += 8 {
			x := binary.LittleEndian.Uint64(b[i:])
			if x&swarHighs|hasByteBelow(x, 0x20)|hasByte(x, 0x7f) != 0 {
				break
			}
		}
		for end := min(i+8, len(b)); i < end; i++ {
			c := b[i]
			if c >= 0x20 && c < 0x7f || c == '\t' {
				continue
			}
			if c == '\r' && i+1 < len(b) && b[i+1] == '\n' {
				continue // the LF ends the line
			}
			if c != '\n' {
				return dst[:start], false
			}
			lineEnd := i
			if lineEnd > lineStart && b[lineEnd-1] == '\r' {
				lineEnd--
			}
			if !endLine(lineEnd) {
				return dst[:start], false
			}
			dst = append(dst, b[lineStart:lineEnd]...)
			dst = append(dst, '\r', '\n')
			lineStart = i + 1
		}
	}
	if !endLine(len(b)) {
		return dst[:start], false
	}
	return append(dst, b[lineStart:]...), true
}
