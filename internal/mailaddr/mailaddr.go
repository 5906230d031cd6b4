// Package mailaddr recognises, without parsing, the mail address forms that
// are nearly all of the traffic: a bare addr-spec and a display name of
// plain words before one. net/mail's parser was several allocations per
// address, and every address is looked at by validation, the envelope, the
// suppression check and the message's headers; what these functions accept
// is exactly what net/mail would return (the fuzz tests hold them to it),
// and everything else is left to net/mail.
package mailaddr

import "strings"

// Bare reports whether s is a bare addr-spec: local@domain with both
// sides dot-atoms of ASCII atext (RFC 5322 3.2.3), so no display name,
// angle brackets, quotes, comments, spaces or non-ASCII. mail.ParseAddress
// accepts such an address and returns it unchanged as Address, with no
// Name (FuzzBare holds it to that), so the hot path can skip
// parsing the common case: parsing was several allocations per address,
// and each address is looked at by validation, the envelope, the
// suppression check and the message's headers.
func Bare(s string) bool {
	at := -1
	for i := 0; i < len(s); i++ {
		if s[i] == '@' {
			if at >= 0 {
				return false
			}
			at = i
		}
	}
	return at > 0 && dotAtom(s[:at]) && dotAtom(s[at+1:])
}

// Simple splits s when it is a bare addr-spec (Bare) or a
// display name of plain words before one in angle brackets, "Jane Doe
// <jane@example.com>": words of ASCII atext (not RFC 2047 encoded words,
// which start with "=?") separated by single spaces. mail.ParseAddress
// gives such an address back as exactly this name and addr-spec
// (FuzzSimple holds it to that), so the hot path need not parse it.
// ok is false for anything else: parse it.
func Simple(s string) (name, addr string, ok bool) {
	if Bare(s) {
		return "", s, true
	}
	lt := strings.LastIndex(s, " <")
	if lt <= 0 || s[len(s)-1] != '>' {
		return "", "", false
	}
	name, addr = s[:lt], s[lt+2:len(s)-1]
	if !Bare(addr) || !plainPhrase(name) {
		return "", "", false
	}
	return name, addr, true
}

// plainPhrase reports whether s is words of atext joined by single
// spaces, none of them an RFC 2047 encoded word.
func plainPhrase(s string) bool {
	start := 0 // of the current word
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != ' ' {
			if !atext(s[i]) {
				return false
			}
			continue
		}
		if i == start || strings.HasPrefix(s[start:i], "=?") {
			return false // an empty word (a leading, trailing or double space) or an encoded word
		}
		start = i + 1
	}
	return true
}

// dotAtom reports whether s is one or more runs of atext joined by single
// dots.
func dotAtom(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if s[i-1] == '.' {
				return false
			}
		case !atext(c):
			return false
		}
	}
	return true
}

// atext reports whether c is an RFC 5322 atext character.
func atext(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '/', '=', '?', '^', '_', '`', '{', '|', '}', '~':
		return true
	}
	return false
}
