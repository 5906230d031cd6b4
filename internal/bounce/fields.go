package bounce

import (
	"bytes"
	"strings"
)

// Bounds of the lenient field parser.
const (
	maxFieldsPerGroup = 200
	maxFieldBytes     = 8 << 10 // a longer field value is cut
)

// field is one "Name: value" line of a header or of a report group, with
// its continuation lines unfolded. name is lower case.
type field struct{ name, value string }

// fields is a header block or one group of a report body.
type fields []field

// get returns the value of the first field called name (lower case).
func (fs fields) get(name string) string {
	for _, f := range fs {
		if f.name == name {
			return f.value
		}
	}
	return ""
}

// all returns the values of every field called name (lower case).
func (fs fields) all(name string) []string {
	var out []string
	for _, f := range fs {
		if f.name == name {
			out = append(out, f.value)
		}
	}
	return out
}

// lines calls fn with each line of b without its line ending, until fn
// returns false; it returns the number of bytes consumed.
func lines(b []byte, fn func(line []byte) bool) int {
	off := 0
	for off < len(b) {
		end := bytes.IndexByte(b[off:], '\n')
		next := len(b)
		if end >= 0 {
			next = off + end + 1
			end += off
		} else {
			end = len(b)
		}
		line := b[off:end]
		line = bytes.TrimSuffix(line, []byte("\r"))
		off = next
		if !fn(line) {
			return off
		}
	}
	return off
}

// fieldBuilder accumulates one block of fields.
type fieldBuilder struct {
	fs  fields
	cur []byte
	nam string
}

func (fb *fieldBuilder) flush() {
	if fb.nam != "" && len(fb.fs) < maxFieldsPerGroup {
		fb.fs = append(fb.fs, field{name: fb.nam, value: strings.TrimSpace(string(fb.cur))})
	}
	fb.nam, fb.cur = "", fb.cur[:0]
}

// add takes one non-blank line; it reports whether the line was a field or
// a continuation.
func (fb *fieldBuilder) add(line []byte) bool {
	if line[0] == ' ' || line[0] == '\t' {
		if fb.nam == "" {
			return false
		}
		if len(fb.cur)+len(line) <= maxFieldBytes {
			fb.cur = append(fb.cur, ' ')
			fb.cur = append(fb.cur, bytes.TrimSpace(line)...)
		}
		return true
	}
	i := bytes.IndexByte(line, ':')
	if i <= 0 || !validName(line[:i]) {
		fb.flush()
		return false
	}
	fb.flush()
	fb.nam = strings.ToLower(string(bytes.TrimRight(line[:i], " \t")))
	v := bytes.TrimSpace(line[i+1:])
	if len(v) > maxFieldBytes {
		v = v[:maxFieldBytes]
	}
	fb.cur = append(fb.cur, v...)
	return true
}

func validName(b []byte) bool {
	b = bytes.TrimRight(b, " \t")
	if len(b) == 0 || len(b) > 76 {
		return false
	}
	for _, c := range b {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// parseGroups splits the body of a machine-readable report part
// (message/delivery-status, message/feedback-report) into its groups of
// fields, separated by blank lines. Lines that are not fields are skipped.
// At most maxGroups groups are returned.
func parseGroups(b []byte, maxGroups int) []fields {
	var groups []fields
	var fb fieldBuilder
	end := func() {
		fb.flush()
		if len(fb.fs) > 0 {
			groups = append(groups, fb.fs)
		}
		fb.fs = nil
	}
	lines(b, func(line []byte) bool {
		if len(bytes.TrimSpace(line)) == 0 {
			end()
			return len(groups) < maxGroups
		}
		fb.add(line)
		return true
	})
	if len(groups) < maxGroups {
		end()
	}
	return groups
}

// parseHeader reads the header block at the start of b (after any blank
// lines), up to the first blank line or the first line that is neither a
// field nor a continuation after at least one field. It is lenient: the
// returned headers of a report are often cut or reformatted.
func parseHeader(b []byte) fields {
	var fb fieldBuilder
	started := false
	lines(b, func(line []byte) bool {
		if len(bytes.TrimSpace(line)) == 0 {
			return !started
		}
		if !fb.add(line) {
			return !started
		}
		started = true
		return len(fb.fs) < maxFieldsPerGroup
	})
	fb.flush()
	return fb.fs
}
