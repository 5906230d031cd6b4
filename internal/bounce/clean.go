package bounce

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of the other strings a report carries. They come from a remote
// server's text like the diagnostic and are cut the same way.
const (
	maxAddressBytes   = 320 // RFC 5321: 64 for the local part, 255 for the domain
	maxMessageIDBytes = 998 // one header line
	maxTokenBytes     = 255 // MTA names, feedback types, envelope ids
)

// OneLine returns s on one line of at most max bytes: runs of white space
// (CR and LF included) become one space, control and format characters,
// NUL and invalid UTF-8 are dropped, leading and trailing space is trimmed,
// and the result is cut at a UTF-8 boundary.
func OneLine(s string, max int) string {
	var b strings.Builder
	b.Grow(min(len(s), max))
	space := false
	for _, r := range s {
		switch {
		case r == utf8.RuneError:
			continue
		case unicode.IsSpace(r):
			space = true
			continue
		case unicode.IsControl(r), unicode.Is(unicode.Cf, r):
			continue
		}
		n := utf8.RuneLen(r)
		if space && b.Len() > 0 {
			n++
		}
		if b.Len()+n > max {
			break
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	return b.String()
}

// cleanAddress returns an address from a report field or header without
// angle brackets, on one line and bounded.
func cleanAddress(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '<'); i >= 0 {
		if j := strings.IndexByte(s[i:], '>'); j > 0 {
			s = s[i+1 : i+j]
		}
	}
	s = strings.Trim(strings.TrimSpace(s), "<>")
	return OneLine(s, maxAddressBytes)
}

// cleanMessageID returns a Message-ID without angle brackets.
func cleanMessageID(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '<'); i >= 0 {
		if j := strings.IndexByte(s[i:], '>'); j > 0 {
			s = s[i+1 : i+j]
		}
	}
	return OneLine(strings.Trim(s, "<>"), maxMessageIDBytes)
}

// stripType drops the address or diagnostic type of a report field
// ("rfc822; a@b" -> "a@b", "smtp; 550 ..." -> "550 ..."). A field without
// a type, or whose part before the first semicolon is not a single token,
// is returned whole.
func stripType(s string) string {
	s = strings.TrimSpace(s)
	i := strings.IndexByte(s, ';')
	if i <= 0 || i > 32 {
		return s
	}
	for _, c := range s[:i] {
		if !(c == '-' || c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return s
		}
	}
	return strings.TrimSpace(s[i+1:])
}
