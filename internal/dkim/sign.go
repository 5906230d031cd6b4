package dkim

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// maxLineLength is where a DKIM-Signature line is folded.
const maxLineLength = 76

// Sign returns msg, a whole message with CRLF line endings, with a
// DKIM-Signature field prepended: relaxed/relaxed, over the fields of
// SignedHeaders that msg carries with From over-signed, and the whole
// body. msg must have a From field.
//
// The field is folded at tag boundaries, between the names of h= and
// inside b=, where RFC 6376 allows folding whitespace, and the header hash
// is computed over the field exactly as emitted (with b= empty), so the
// folding cannot differ between what is signed and what is sent.
//
// It runs once per mail, so it canonicalizes into a pooled buffer instead
// of building strings per line and field: what it allocates is the signed
// message, the signature and a few small values.
func (k *Key) Sign(msg []byte) ([]byte, error) {
	return k.AppendSign(nil, msg)
}

// AppendSign is Sign appending the signed message to dst, for a caller
// that keeps a buffer from message to message rather than have each
// signed copy allocated; with a nil dst the copy is allocated to size.
// dst must not overlap msg.
func (k *Key) AppendSign(dst, msg []byte) ([]byte, error) {
	header, body, ok := splitMessage(msg)
	if !ok {
		return nil, errors.New("dkim sign: message has no end of header (CRLF CRLF)")
	}
	sc := scratchPool.Get().(*scratch)
	defer sc.putBack()
	sc.fields = parseFields(sc.fields[:0], header)
	fields := sc.fields
	if !hasField(fields, "From") {
		return nil, errors.New("dkim sign: message has no From field")
	}
	names := sc.names[:0]
	for _, h := range SignedHeaders {
		if hasField(fields, h) {
			names = append(names, h)
		}
	}
	names = append(names, "From") // over-signed: one more From than the message has
	sc.names = names

	bh := sc.relaxedBodyHash(body)
	var bhText [44]byte // base64 of 32 bytes
	base64.StdEncoding.Encode(bhText[:], bh[:])

	f := folder{b: append(sc.field[:0], "DKIM-Signature:"...)}
	f.col = len(f.b)
	f.atom(" ", "v=1;")
	f.atom(" ", "a=", k.algorithm, ";")
	f.atom(" ", "c=relaxed/relaxed;")
	f.atom(" ", "d=", k.domain, ";")
	f.atom(" ", "s=", k.selector, ";")
	f.atom(" ", "t=", strconv.FormatInt(k.now().Unix(), 10), ";")
	for i, n := range names {
		sep, prefix, end := "", "", ":"
		if i == 0 {
			sep, prefix = " ", "h="
		}
		if i == len(names)-1 {
			end = ";"
		}
		f.atom(sep, prefix, n, end)
	}
	f.atom(" ", "bh=", string(bhText[:]), ";")
	f.atom(" ", "b=")
	unsigned := f.b
	sc.field = unsigned

	// The header hash: the signed fields, bottom-most instance first for
	// repeated names (RFC 6376 section 5.4.2), then this field with b=
	// empty and without its CRLF.
	canon := sc.canon[:0]
	for _, n := range names {
		if i := lastUnused(fields, n); i >= 0 {
			fields[i].used = true
			canon = appendRelaxedHeader(canon, fields[i].raw)
			canon = append(canon, '\r', '\n')
		}
	}
	canon = appendRelaxedHeader(canon, unsigned)
	sc.canon = canon
	digest := sha256.Sum256(canon)

	var sig []byte
	var err error
	switch key := k.signer.(type) {
	case ed25519.PrivateKey:
		sig = ed25519.Sign(key, digest[:]) // RFC 8463: Ed25519 over the SHA-256 hash
	case *rsa.PrivateKey:
		sig, err = rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest[:])
	default:
		err = fmt.Errorf("%T keys are not supported", k.signer)
	}
	if err != nil {
		return nil, fmt.Errorf("dkim sign with %s (selector %s): %w", k.domain, k.selector, err)
	}

	b64Len := base64.StdEncoding.EncodedLen(len(sig))
	// b= folds every maxLineLength-1 characters at most, 3 bytes a fold.
	out := slices.Grow(dst, len(unsigned)+b64Len+3*(b64Len/(maxLineLength-1)+1)+2+len(msg))
	out = append(out, unsigned...)
	b64 := base64.StdEncoding.AppendEncode(sc.sig[:0], sig)
	sc.sig = b64
	col := f.col
	for len(b64) > 0 {
		room := maxLineLength - col
		if room < 1 {
			out = append(out, "\r\n "...)
			col, room = 1, maxLineLength-1
		}
		n := min(room, len(b64))
		out = append(out, b64[:n]...)
		col += n
		b64 = b64[n:]
	}
	out = append(out, '\r', '\n')
	return append(out, msg...), nil
}

// scratch is what one Sign call works in, pooled across calls.
type scratch struct {
	fields []field
	names  []string
	canon  []byte // the canonical body, then the canonical header
	field  []byte // the DKIM-Signature field without its b= value
	sig    []byte // the b= value
}

// maxPooledScratch bounds the canonical buffer kept for reuse, so that one
// large message does not pin its size in the pool.
const maxPooledScratch = 256 << 10

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func (sc *scratch) putBack() {
	if cap(sc.canon) > maxPooledScratch {
		sc.canon = nil
	}
	clear(sc.fields) // they point into the message
	scratchPool.Put(sc)
}

// folder lays atoms out, starting a continuation line (CRLF and a space)
// before an atom that would end past maxLineLength. col is the column its
// last line ends at.
type folder struct {
	b   []byte
	col int
}

// atom appends one unbreakable piece, the concatenation of parts, after
// sep when it fits on the line.
func (f *folder) atom(sep string, parts ...string) {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if f.col > 1 && f.col+len(sep)+n > maxLineLength {
		f.b = append(f.b, "\r\n "...)
		f.col = 1
	} else {
		f.b = append(f.b, sep...)
		f.col += len(sep)
	}
	for _, p := range parts {
		f.b = append(f.b, p...)
	}
	f.col += n
}

// field is one header field: its name as written (without the whitespace
// before the colon) and its raw text, continuation lines included, without
// the final CRLF. Both point into the message unless a field's lines are
// not contiguous.
type field struct {
	name, raw []byte
	used      bool // already in the header hash
}

// parseFields appends the fields of a header block (ending in CRLF) to
// out; lines that are neither a field nor a continuation are skipped.
func parseFields(out []field, header []byte) []field {
	contiguous := false // the last line read is the end of the last field
	for len(header) > 0 {
		line := header
		next := len(header)
		if i := bytes.Index(header, []byte("\r\n")); i >= 0 {
			line, next = header[:i], i+2
		}
		rest := header[next:]
		switch {
		case len(line) == 0:
		case line[0] == ' ' || line[0] == '\t':
			if len(out) > 0 {
				last := &out[len(out)-1]
				if contiguous {
					// line follows the field's CRLF in the message.
					last.raw = last.raw[:len(last.raw)+2+len(line)]
				} else {
					raw := make([]byte, 0, len(last.raw)+2+len(line))
					raw = append(append(append(raw, last.raw...), '\r', '\n'), line...)
					last.raw = raw
				}
			}
			header = rest
			continue
		default:
			if name, _, ok := bytes.Cut(line, []byte(":")); ok {
				out = append(out, field{name: bytes.TrimRight(name, " \t"), raw: line})
				contiguous = true
				header = rest
				continue
			}
		}
		contiguous = false
		header = rest
	}
	return out
}

// sameName reports whether a field's name is name once both are in lower
// case, as RFC 6376 compares them. SignedHeaders are ASCII, so an ASCII
// field name compares byte by byte; any other is lower-cased first.
func sameName(fieldName []byte, name string) bool {
	for _, c := range fieldName {
		if c >= 0x80 {
			return strings.ToLower(string(fieldName)) == strings.ToLower(name)
		}
	}
	if len(fieldName) != len(name) {
		return false
	}
	for i, c := range fieldName {
		d := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

func hasField(fields []field, name string) bool {
	for i := range fields {
		if sameName(fields[i].name, name) {
			return true
		}
	}
	return false
}

// lastUnused returns the index of the bottom-most field named name not yet
// used, -1 if none.
func lastUnused(fields []field, name string) int {
	for i := len(fields) - 1; i >= 0; i-- {
		if !fields[i].used && sameName(fields[i].name, name) {
			return i
		}
	}
	return -1
}

// appendRelaxedHeader appends one field canonicalized (RFC 6376 section
// 3.4.2): name in lower case, folding removed, runs of whitespace made one
// space, and whitespace around the value and before the colon dropped.
func appendRelaxedHeader(b, raw []byte) []byte {
	name, value, _ := bytes.Cut(raw, []byte(":"))
	name = bytes.TrimRight(name, " \t")
	ascii := true
	for _, c := range name {
		if c >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		for _, c := range name {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b = append(b, c)
		}
	} else {
		b = append(b, strings.ToLower(string(name))...)
	}
	b = append(b, ':')
	// Unfolded, trimmed and collapsed: collapsing first leaves at most
	// one space at either end to trim.
	start := len(b)
	b = appendCollapsed(b, value)
	if len(b) > start && b[start] == ' ' {
		b = append(b[:start], b[start+1:]...)
	}
	if len(b) > start && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	return b
}

// relaxedBodyHash is the SHA-256 of the body canonicalized (see
// appendRelaxedBody). A body with no tab, no two spaces in a row and no
// space before a line end, as a rendered message's mostly is, is its own
// canonical form up to its empty lines at the end: three searches over it
// find that, and it is hashed where it lies, not copied line by line.
func (sc *scratch) relaxedBodyHash(body []byte) [sha256.Size]byte {
	if bytes.IndexByte(body, '\t') >= 0 || bytes.Index(body, []byte("  ")) >= 0 || bytes.Index(body, []byte(" \r\n")) >= 0 {
		sc.canon = appendRelaxedBody(sc.canon[:0], body)
		return sha256.Sum256(sc.canon)
	}
	trimmed := body
	for bytes.HasSuffix(trimmed, []byte("\r\n")) {
		trimmed = trimmed[:len(trimmed)-2]
	}
	switch {
	case len(trimmed) == 0:
		return sha256.Sum256(nil)
	case trimmed[len(trimmed)-1] == ' ':
		sc.canon = appendRelaxedBody(sc.canon[:0], body) // the last line ends in a space
		return sha256.Sum256(sc.canon)
	case len(body) > len(trimmed):
		return sha256.Sum256(body[:len(trimmed)+2]) // one CRLF kept
	}
	sc.canon = append(append(sc.canon[:0], body...), '\r', '\n') // a CRLF added
	return sha256.Sum256(sc.canon)
}

// appendRelaxedBody appends a body canonicalized (RFC 6376 section
// 3.4.4): runs of whitespace within lines made one space, whitespace at
// line ends and empty lines at the end dropped, and a final CRLF ensured on
// a body that is not empty.
func appendRelaxedBody(b, body []byte) []byte {
	pendingEmpty := 0
	for {
		line, rest, more := bytes.Cut(body, []byte("\r\n"))
		start := len(b)
		b = appendCollapsedLine(b, line)
		if len(b) > start && b[len(b)-1] == ' ' {
			b = b[:len(b)-1]
		}
		empty := len(b) == start
		if !more && empty {
			return b // what follows the last CRLF
		}
		if empty {
			pendingEmpty++
		} else {
			// The line goes after the empty lines before it.
			if pendingEmpty > 0 {
				n := len(b) - start
				b = append(b, make([]byte, 2*pendingEmpty)...)
				copy(b[start+2*pendingEmpty:], b[start:start+n])
				for i := range pendingEmpty {
					b[start+2*i], b[start+2*i+1] = '\r', '\n'
				}
				pendingEmpty = 0
			}
			b = append(b, '\r', '\n')
		}
		if !more {
			return b
		}
		body = rest
	}
}

// appendCollapsedLine is appendCollapsed for a body line, which has no
// CRLF: a line without a tab or two spaces in a row, as most are, is
// appended as it is, found so with two SIMD searches rather than a loop
// over its bytes.
func appendCollapsedLine(b, line []byte) []byte {
	if bytes.IndexByte(line, '\t') < 0 && bytes.Index(line, []byte("  ")) < 0 {
		return append(b, line...)
	}
	return appendCollapsed(b, line)
}

// appendCollapsed appends s unfolded (each CRLF dropped; a body line has
// none) with each run of spaces and tabs made one space.
func appendCollapsed(b, s []byte) []byte {
	inWSP := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			i++
			continue
		}
		if c == ' ' || c == '\t' {
			if !inWSP {
				b = append(b, ' ')
			}
			inWSP = true
			continue
		}
		inWSP = false
		b = append(b, c)
	}
	return b
}

// splitMessage splits msg after its header's final CRLF; body is what
// follows the empty line.
func splitMessage(msg []byte) (header, body []byte, ok bool) {
	i := bytes.Index(msg, []byte("\r\n\r\n"))
	if i < 0 {
		return nil, nil, false
	}
	return msg[:i+2], msg[i+4:], true
}
