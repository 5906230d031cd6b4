package job

import (
	"encoding/binary"
	"math/bits"
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
	swarLow7s = 0x7f7f7f7f7f7f7f7f
	swarHighs = 0x8080808080808080
)

// bytesBelow sets the high bit of exactly the bytes of x below n (n at
// most 0x80): the low seven bits plus 0x80-n reach the high bit when they
// are at least n, without a carry into the next byte.
func bytesBelow(x uint64, n byte) uint64 {
	return ^((x&swarLow7s + swarOnes*uint64(0x80-n)) | x) & swarHighs
}

// bytesEqual sets the high bit of exactly the bytes of x equal to c.
func bytesEqual(x uint64, c byte) uint64 {
	return bytesBelow(x^(swarOnes*uint64(c)), 1)
}

// firstMarked is the index of the lowest byte whose high bit is set in
// mask, which is not zero.
func firstMarked(mask uint64) int {
	return bits.TrailingZeros64(mask) >> 3
}

// plainStringRun returns the length of the prefix of b that a JSON string
// body holds as is (no quote, backslash or control character) and whether
// a byte of that prefix is not ASCII.
func plainStringRun(b []byte) (n int, nonASCII bool) {
	var seen uint64 // the bytes of the run, OR-ed, for their high bits
	i := 0
	for ; len(b)-i >= 8; i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if stop := stringStops(x); stop != 0 {
			k := firstMarked(stop)
			seen |= x & (1<<(8*k) - 1)
			return i + k, seen&swarHighs != 0
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

// stringStops marks (sets the high bit of) the bytes of x that end a
// plain run of a JSON string: a control character, a quote or a
// backslash. Only its lowest mark is sure to be one, which is all that
// finding the first needs, in fewer operations than bytesBelow and
// bytesEqual: a byte below c less c borrows, and that may mark bytes
// above it, never below. Flipping bit 1 takes the quote (0x22) to 0x20
// and no other byte from 0x21 up below 0x21, nor a control out of it, so
// one subtraction finds both controls and quotes.
func stringStops(x uint64) uint64 {
	controlOrQuote, backslash := x^(swarOnes*0x02), x^(swarOnes*'\\')
	return ((controlOrQuote-swarOnes*0x21)&^controlOrQuote |
		(backslash-swarOnes)&^backslash) & swarHighs
}

// safeCanonicalRun returns the length of the prefix of s that json.Marshal
// writes as is in a string: printable ASCII other than the quote, the
// backslash and the HTML-unsafe <, > and &.
func safeCanonicalRun(s string) int {
	b := unsafe.Slice(unsafe.StringData(s), len(s)) // read only
	i := 0
	for ; len(b)-i >= 8; i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if stop := x&swarHighs | bytesBelow(x, ' ') | bytesEqual(x, '"') | bytesEqual(x, '\\') |
			bytesEqual(x, '<') | bytesEqual(x, '>') | bytesEqual(x, '&'); stop != 0 {
			return i + firstMarked(stop)
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c < ' ' || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			break
		}
	}
	return i
}
