package sender

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"math/bits"
	"strings"
	"unsafe"
)

// A body part goes out in the lightest transfer encoding that carries it
// intact through any relay: 7bit when it is ASCII text in lines of at most
// 998 octets (RFC 5322's limit), quoted-printable when it is mostly ASCII
// but is not that, base64 when quoted-printable would outgrow base64. Never
// 8bit, even to a relay that takes 8BITMIME: a later hop that does not
// would re-encode the part and break its DKIM signature.
//
// Bodies are mostly long runs of plain ASCII, so each encoder finds the end
// of a run eight bytes at a time (a byte test on a 64-bit word at once) and
// copies the run whole; only the bytes that need work are looked at one by
// one. The quoted-printable encoder writes what mime/quotedprintable's
// Writer writes, byte for byte.

// transferEncoding is a body part's Content-Transfer-Encoding.
type transferEncoding uint8

const (
	enc7bit transferEncoding = iota
	encQuotedPrintable
	encBase64
)

func (e transferEncoding) String() string {
	return [...]string{enc7bit: "7bit", encQuotedPrintable: "quoted-printable", encBase64: "base64"}[e]
}

// maxLineOctets is the longest line, without its CRLF, that a message may
// carry (RFC 5322 section 2.1.1).
const maxLineOctets = 998

// appendBodyPart appends body to dst in the transfer encoding it picks
// (see above), lines ending in CRLF, and returns that encoding.
func appendBodyPart(dst []byte, body string) ([]byte, transferEncoding) {
	return appendEncodedPart(dst, body, nil)
}

// appendEncodedPart is appendBodyPart with header(dst, encoding), when not
// nil, appended before the body: the part's headers, which name the
// encoding. 7bit is tried first, written as it is checked; the others
// only when it fails, which leaves dst as it was.
func appendEncodedPart(dst []byte, body string, header func([]byte, transferEncoding) []byte) ([]byte, transferEncoding) {
	start := len(dst)
	withHeader := func(enc transferEncoding) []byte {
		if header == nil {
			return dst[:start]
		}
		return header(dst[:start], enc)
	}
	if out, ok := append7bit(withHeader(enc7bit), body); ok {
		return out, enc7bit
	}
	if preferBase64(body) {
		return appendBase64Lines(withHeader(encBase64), crlfLines(body)), encBase64
	}
	return appendQuotedPrintable(withHeader(encQuotedPrintable), body), encQuotedPrintable
}

const (
	swarOnes  = 0x0101010101010101
	swarHighs = 0x8080808080808080
)

// hasByteBelow is non-zero exactly when a byte of x is below n (n at most
// 0x80): the high bit of the lowest such byte is set, and none is set when
// there is none.
func hasByteBelow(x uint64, n byte) uint64 {
	return (x - swarOnes*uint64(n)) &^ x & swarHighs
}

// hasByte is hasByteBelow for bytes equal to c.
func hasByte(x uint64, c byte) uint64 {
	return hasByteBelow(x^(swarOnes*uint64(c)), 1)
}

// bytesOf is s's bytes, without a copy: read only.
func bytesOf(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// printableRun returns the length of the prefix of b made of printable
// ASCII, spaces and tabs: what 7bit carries as it is. except is one more
// byte that ends the run ('=' for quoted-printable; 0x7f, which ends it
// anyway, for none).
func printableRun(b []byte, except byte) int {
	i := 0
	for {
		for ; len(b)-i >= 8; i += 8 {
			x := binary.LittleEndian.Uint64(b[i:])
			if x&swarHighs|hasByteBelow(x, 0x20)|hasByte(x, 0x7f)|hasByte(x, except) != 0 {
				break
			}
		}
		// The word that failed, byte by byte: a tab in it, which 7bit and
		// quoted-printable carry too, does not end the run.
		for end := min(i+8, len(b)); i < end; i++ {
			if c := b[i]; (c < 0x20 && c != '\t') || c >= 0x7f || c == except {
				return i
			}
		}
		if i == len(b) {
			return i
		}
	}
}

// append7bit appends body as 7bit, each line break (LF or CRLF) as CRLF,
// and reports whether body is 7bit text: ASCII without controls but tab,
// no line longer than maxLineOctets, none ending in a space or tab (which
// relays may strip: quoted-printable keeps it). When it is not, dst comes
// back as it was. Line by line: bytes.IndexByte finds the line feed, many
// bytes at a time, and is7bitLine checks the line eight bytes at a time
// before it is copied whole.
func append7bit(dst []byte, body string) ([]byte, bool) {
	b := bytesOf(body)
	start := len(dst)
	for {
		lf := bytes.IndexByte(b, '\n')
		if lf < 0 {
			if !is7bitLine(b) {
				return dst[:start], false
			}
			return append(dst, b...), true
		}
		line := b[:lf]
		if lf > 0 && line[lf-1] == '\r' {
			line = line[:lf-1] // the CR of a CRLF
		}
		if !is7bitLine(line) {
			return dst[:start], false
		}
		dst = append(dst, line...)
		dst = append(dst, '\r', '\n')
		b = b[lf+1:]
	}
}

// is7bitLine reports whether line, without its line break, goes out as it
// is in 7bit: at most maxLineOctets of printable ASCII and tabs, not
// ending in a space or tab. Its words are tested together (outside7bit),
// with the last, which may overlap the one before, for the bytes past the
// last whole word; a tab, which the word test takes for a control, sends
// the line to the byte by byte test.
func is7bitLine(line []byte) bool {
	n := len(line)
	switch {
	case n == 0:
		return true
	case n > maxLineOctets || line[n-1] == ' ' || line[n-1] == '\t':
		return false
	case n < 8:
		return printableRun(line, 0x7f) == n
	}
	var bad uint64
	for i := 0; i < n-8; i += 8 {
		x := binary.LittleEndian.Uint64(line[i:])
		bad |= outside7bit(x)
	}
	bad |= outside7bit(binary.LittleEndian.Uint64(line[n-8:]))
	return bad == 0 || printableRun(line, 0x7f) == n
}

// outside7bit is non-zero exactly when a byte of x is not printable ASCII
// (0x20 to 0x7e): adding one takes 0x7f and up to the high bit, taking
// 0x20 away takes the bytes below it there, and neither carries from a
// byte in the range, so the lowest byte out of it is marked whatever
// carries past it.
func outside7bit(x uint64) uint64 {
	return ((x + swarOnes) | (x - swarOnes*0x20)) & swarHighs
}

// preferBase64 reports whether body would come out larger in
// quoted-printable than in base64: when more than one byte in six needs
// escaping (each escape is three bytes; base64 is four for three). It
// counts the bytes that are not ASCII eight at a time, and the controls
// in the words that have one.
func preferBase64(body string) bool {
	b := bytesOf(body)
	escaped := bytes.Count(b, []byte("="))
	i := 0
	for ; len(b)-i >= 8; i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		escaped += bits.OnesCount64(x & swarHighs)
		if hasByteBelow(x, 0x20) != 0 {
			escaped += escapedControls(b[i : i+8])
		}
	}
	for _, c := range b[i:] {
		if c >= 0x80 {
			escaped++
		}
	}
	return escaped+escapedControls(b[i:]) > len(b)/6
}

// escapedControls counts the bytes of b that quoted-printable escapes for
// being controls: all but tab, CR and LF.
func escapedControls(b []byte) int {
	n := 0
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\r' && c != '\n' || c == 0x7f {
			n++
		}
	}
	return n
}

// crlfLines is body with its line breaks in a text part's canonical form
// (RFC 2046 section 4.1.1), as quoted-printable writes them: CRLF for each
// CRLF, and for each CR or LF on its own.
func crlfLines(body string) string {
	breaks := strings.Count(body, "\r") + strings.Count(body, "\n")
	if crlf := strings.Count(body, "\r\n"); breaks == 2*crlf {
		return body // every break is a CRLF already
	}
	b := make([]byte, 0, len(body)+breaks)
	for i := 0; i < len(body); i++ {
		switch c := body[i]; c {
		case '\r', '\n':
			b = append(b, '\r', '\n')
			if c == '\r' && i+1 < len(body) && body[i+1] == '\n' {
				i++
			}
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

// base64LineBytes is the input of one 76-character base64 line.
const base64LineBytes = 57

// appendBase64Lines appends body in base64, in lines of 76 characters each
// ending in CRLF, as go-mail writes a base64 part.
func appendBase64Lines(dst []byte, body string) []byte {
	b := bytesOf(body)
	for len(b) > 0 {
		n := min(len(b), base64LineBytes)
		dst = base64.StdEncoding.AppendEncode(dst, b[:n])
		dst = append(dst, '\r', '\n')
		b = b[n:]
	}
	return dst
}

// qpLineMax is quoted-printable's longest line, without its CRLF, as
// mime/quotedprintable writes it: 75 characters and a soft break's '='.
const qpLineMax = 76

const upperHex = "0123456789ABCDEF"

// appendQuotedPrintable appends body in quoted-printable, exactly as
// mime/quotedprintable's Writer (text mode) writes it in one Write and a
// Close: each CR, LF or CRLF a line break (and an LF after a CR that only
// escaped bytes followed, dropped, as the Writer does), a space or tab
// that ends a line escaped, lines soft-broken at 76 characters.
func appendQuotedPrintable(dst []byte, body string) []byte {
	b := bytesOf(body)
	lineStart := len(dst) // where the current output line starts
	cr := false           // the Writer's cr: the last line break was a CR
	for i := 0; i < len(b); {
		if n := printableRun(b[i:], '='); n > 0 {
			// Literal bytes, soft-broken before the 76th column.
			run := b[i : i+n]
			for len(run) > 0 {
				room := qpLineMax - 1 - (len(dst) - lineStart)
				if room == 0 {
					dst = append(dst, '=', '\r', '\n')
					lineStart = len(dst)
					room = qpLineMax - 1
				}
				k := min(room, len(run))
				dst = append(dst, run[:k]...)
				run = run[k:]
			}
			cr = false
			i += n
			continue
		}
		switch c := b[i]; c {
		case '\n', '\r':
			if cr && c == '\n' {
				cr = false
				i++
				continue
			}
			cr = c == '\r'
			dst, lineStart = escapeTrailingSpace(dst, lineStart)
			dst = append(dst, '\r', '\n')
			lineStart = len(dst)
		default:
			dst, lineStart = appendQPEscape(dst, lineStart, c)
		}
		i++
	}
	dst, _ = escapeTrailingSpace(dst, lineStart)
	return dst
}

// escapeTrailingSpace escapes a space or tab that ends the line begun at
// lineStart, as the Writer does before a line break.
func escapeTrailingSpace(dst []byte, lineStart int) ([]byte, int) {
	n := len(dst)
	if n == lineStart {
		return dst, lineStart
	}
	if c := dst[n-1]; c == ' ' || c == '\t' {
		return appendQPEscape(dst[:n-1], lineStart, c)
	}
	return dst, lineStart
}

// appendQPEscape appends c as =XX to the line begun at lineStart, after a
// soft line break when the line has no room for it, and returns where the
// line now starts.
func appendQPEscape(dst []byte, lineStart int, c byte) ([]byte, int) {
	if qpLineMax-1-(len(dst)-lineStart) < 3 {
		dst = append(dst, '=', '\r', '\n')
		lineStart = len(dst)
	}
	return append(dst, '=', upperHex[c>>4], upperHex[c&0x0f]), lineStart
}
