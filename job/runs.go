package job

import (
	"encoding/binary"
	"unsafe"
)

// The decoder and the canonical hash walk string bodies that are, in mail,
// mostly long runs of bytes they copy as they are. These find the end of
// such a run eight bytes at a time (SWAR: a byte test done on every byte
// of a 64-bit word at once), then byte by byte for the last few, so a
// body costs a fraction of a per-byte loop; the per-byte work is left to
// the bytes that need it.

const (
	swarOnes  = 0x0101010101010101
	swarHighs = 0x8080808080808080
)

// hasByteBelow reports, in the high bit of each byte, a byte of x below n
// (n at most 0x80). The high bit of the lowest such byte is always set, and
// none is set when there is no such byte, so the result is non-zero
// exactly when x has one.
func hasByteBelow(x uint64, n byte) uint64 {
	return (x - swarOnes*uint64(n)) &^ x & swarHighs
}

// hasByte is hasByteBelow for bytes equal to c.
func hasByte(x uint64, c byte) uint64 {
	return hasByteBelow(x^(swarOnes*uint64(c)), 1)
}

// plainStringRun returns the length of the prefix of b that a JSON string
// body holds as is (no quote, backslash or control character) and whether
// a byte of that prefix is not ASCII.
func plainStringRun(b []byte) (n int, nonASCII bool) {
	var seen uint64 // the bytes read, OR-ed, for their high bits
	i := 0
	for ; len(b)-i >= 8; i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if hasByteBelow(x, ' ')|hasByte(x, '"')|hasByte(x, '\\') != 0 {
			break
		}
		seen |= x
	}
	for ; i < len(b); i++ {
		c := b[i]
		if c < ' ' || c == '"' || c == '\\' {
			break
		}
		seen |= uint64(c)
	}
	return i, seen&swarHighs != 0
}

// safeCanonicalRun returns the length of the prefix of s that json.Marshal
// writes as is in a string: printable ASCII other than the quote, the
// backslash and the HTML-unsafe <, > and &.
func safeCanonicalRun(s string) int {
	b := unsafe.Slice(unsafe.StringData(s), len(s)) // read only
	i := 0
	for ; len(b)-i >= 8; i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if x&swarHighs|hasByteBelow(x, ' ')|hasByte(x, '"')|hasByte(x, '\\')|
			hasByte(x, '<')|hasByte(x, '>')|hasByte(x, '&') != 0 {
			break
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < ' ' || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			break
		}
	}
	return i
}
