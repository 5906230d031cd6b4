package console

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// storable reports whether s can go into a PostgreSQL text or jsonb value
// (the audit log, a query): UTF-8 without NUL.
func storable(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// field is one text field of a request, checked by checkFields.
type field struct {
	name  string
	value string
	max   int
}

// checkFields refuses a field too long or not storable, naming it.
func checkFields(fields ...field) error {
	for _, f := range fields {
		if len(f.value) > f.max {
			return inputError{fmt.Sprintf("%s is %d bytes long: at most %d.", f.name, len(f.value), f.max)}
		}
		if !storable(f.value) {
			return inputError{f.name + " holds bytes that are not text (not UTF-8, or NUL)."}
		}
	}
	return nil
}

// bareMessageID is a Message-ID as typed or pasted, without the angle
// brackets of its header.
func bareMessageID(s string) string {
	s = strings.TrimSpace(s)
	for len(s) >= 2 && s[0] == '<' && s[len(s)-1] == '>' {
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	return s
}

// auditedName is a login's name as the audit log keeps it: text, at most
// maxNameBytes, cut at a character boundary.
func auditedName(name string) string {
	name = strings.ToValidUTF8(strings.ReplaceAll(name, "\x00", ""), "?")
	for len(name) > maxNameBytes {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	return name
}
