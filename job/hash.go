package job

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Hash returns the SHA-256 of the canonical JSON encoding of the normalised
// job. Two documents that differ only in whitespace, key order, angle
// brackets around the message ID, an empty versus "normal" priority or the
// time zone of not_after hash the same; any other difference does not,
// template data (keys sorted) and locale included, so two template jobs
// that differ only in their data are two jobs.
//
// The canonical encoding is what json.Marshal writes for the normalised job
// (so hashes stored by earlier versions still match), but it is written
// here by hand into a pooled buffer: json.Marshal's reflection and copies
// were a large share of the worker's per-mail cost. A job holding what
// Decode never produces (template data of other Go types than JSON's, a
// deadline outside the years 0 to 9999) is encoded by json.Marshal itself.
func (j Job) Hash() []byte {
	return j.hash(nil)
}

// hash is Hash with the bodies the document held in canonical form, which
// it copies instead of escaping them again (bodies may be nil).
func (j Job) hash(bodies *canonicalBodies) []byte {
	j.Normalize()
	bp := hashBuffers.Get().(*[]byte)
	if bodies == nil {
		bodies = &canonicalBodies{}
	}
	digest := digests.Get().(hash.Hash)
	digest.Reset()
	data, ok := appendCanonicalBodies((*bp)[:0], &j, bodies, digest)
	if !ok {
		digest.Reset()
		data = marshalCanonical(j)
	}
	_, _ = digest.Write(data) // a hash.Hash never fails
	sum := digest.Sum(make([]byte, 0, sha256.Size))
	digests.Put(digest)
	if ok && cap(data) <= maxPooledHashBuffer {
		*bp = data[:0]
		hashBuffers.Put(bp)
	}
	return sum
}

// digests are SHA-256 digests for hash, reused from job to job.
var digests = sync.Pool{New: func() any { return sha256.New() }}

// maxPooledHashBuffer bounds the buffers kept for reuse: a job with
// megabytes of attachments should not pin its encoding in every pool slot.
const maxPooledHashBuffer = 256 << 10

var hashBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, 4<<10)
	return &b
}}

// marshalCanonical is the canonical encoding by json.Marshal, for what
// appendCanonical does not write.
func marshalCanonical(j Job) []byte {
	if j.NotAfter != nil {
		t := j.NotAfter.UTC()
		j.NotAfter = &t
	}
	data, err := json.Marshal(j)
	if err != nil {
		// Job holds strings, byte slices, maps of strings, a time and
		// template data; Marshal fails only for a year outside [0,9999]
		// or data Validate rejects.
		data = fmt.Appendf(nil, "unencodable job %q: %v", j.MessageID, err)
	}
	return data
}

// appendCanonical appends json.Marshal's encoding of the normalised j, its
// deadline in UTC, and reports false, with b in an unspecified state, for
// a job it leaves to json.Marshal.
func appendCanonical(b []byte, j *Job) ([]byte, bool) {
	return appendCanonicalBodies(b, j, &canonicalBodies{}, nil)
}

// appendCanonicalBodies is appendCanonical with the bodies held in
// canonical form taken from bodies where they are not nil: copied into b,
// or, when digest is not nil, written to digest as they stand in the
// document, b (the encoding up to the body) first, and b restarted
// empty, so that a body of 100 KiB is not copied just to be hashed. With
// a digest, b comes back holding what follows the last body written to
// it.
func appendCanonicalBodies(b []byte, j *Job, bodies *canonicalBodies, digest io.Writer) ([]byte, bool) {
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(j.Version), 10)
	b = appendKey(b, "message_id")
	b = appendString(b, j.MessageID)
	b = appendKey(b, "from")
	b = appendString(b, j.From)
	b = appendList(b, "to", j.To)
	b = appendList(b, "cc", j.Cc)
	b = appendList(b, "bcc", j.Bcc)
	b = appendList(b, "reply_to", j.ReplyTo)
	b = appendKey(b, "subject")
	b = appendString(b, j.Subject)
	b = appendBody(b, "text", j.Text, bodies.text, digest)
	b = appendBody(b, "html", j.HTML, bodies.html, digest)
	b = appendStringMap(b, "headers", j.Headers)
	if len(j.Attachments) > 0 {
		b = appendKey(b, "attachments")
		for i, a := range j.Attachments {
			b = append(b, "[,"[min(i, 1)], '{')
			b = append(b, `"filename":`...)
			b = appendString(b, a.Filename)
			b = appendOptional(b, "content_type", a.ContentType)
			b = appendKey(b, "content")
			if a.Content == nil {
				b = append(b, "null"...)
			} else {
				b = append(b, '"')
				b = base64.StdEncoding.AppendEncode(b, a.Content)
				b = append(b, '"')
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendOptional(b, "priority", string(j.Priority))
	b = appendOptional(b, "tenant", j.Tenant)
	if t := j.Template; t != nil {
		b = appendKey(b, "template")
		b = append(b, `{"name":`...)
		b = appendString(b, t.Name)
		b = appendOptional(b, "version", t.Version)
		if len(t.Data) > 0 {
			b = appendKey(b, "data")
			var ok bool
			if b, ok = appendAny(b, t.Data, 0); !ok {
				return b, false
			}
		}
		b = appendOptional(b, "locale", t.Locale)
		b = append(b, '}')
	}
	if j.NotAfter != nil {
		t := j.NotAfter.UTC()
		if y := t.Year(); y < 0 || y > 9999 {
			return b, false // json.Marshal refuses it; its error is hashed
		}
		b = appendKey(b, "not_after")
		b = append(b, '"')
		b = t.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = appendStringMap(b, "metadata", j.Metadata)
	if j.Unsubscribe {
		b = append(b, `,"unsubscribe":true`...)
	}
	return append(b, '}'), true
}

// appendKey appends ,"name": after a member.
func appendKey(b []byte, name string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

// appendOptional appends an omitempty string member.
func appendOptional(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	return appendString(appendKey(b, name), v)
}

// appendBody appends an omitempty body, as canonical (its encoding, quotes
// included) when that is not nil; that is written to digest instead, when
// not nil, after b, and b comes back empty (see appendCanonicalBodies).
func appendBody(b []byte, name, v string, canonical []byte, digest io.Writer) []byte {
	if v == "" || canonical == nil {
		return appendOptional(b, name, v)
	}
	b = appendKey(b, name)
	if digest == nil {
		return append(b, canonical...)
	}
	_, _ = digest.Write(b) // a hash.Hash never fails
	_, _ = digest.Write(canonical)
	return b[:0]
}

// appendList appends an omitempty list of strings.
func appendList(b []byte, name string, l []string) []byte {
	if len(l) == 0 {
		return b
	}
	b = appendKey(b, name)
	for i, s := range l {
		b = append(b, "[,"[min(i, 1)])
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendStringMap appends an omitempty map of strings, keys sorted.
func appendStringMap(b []byte, name string, m map[string]string) []byte {
	if len(m) == 0 {
		return b
	}
	b = appendKey(b, name)
	for i, k := range sortedKeys(m) {
		b = append(b, "{,"[min(i, 1)])
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, m[k])
	}
	return append(b, '}')
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// appendAny appends a template data value of the types Decode produces
// (and the nil maps and slices of them a producer may write), reporting
// false for any other. depth stops a self-referencing value, which
// json.Marshal rejects, from recursing forever.
func appendAny(b []byte, v any, depth int) ([]byte, bool) {
	if depth > maxTemplateDataDepth {
		return b, false
	}
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), true
	case string:
		return appendString(b, v), true
	case bool:
		return strconv.AppendBool(b, v), true
	case json.Number:
		if v == "" {
			return append(b, '0'), true
		}
		if !validNumber(string(v)) {
			return b, false
		}
		return append(b, v...), true
	case map[string]any:
		if v == nil {
			return append(b, "null"...), true
		}
		if len(v) == 0 {
			return append(b, '{', '}'), true
		}
		for i, k := range sortedKeys(v) {
			b = append(b, "{,"[min(i, 1)])
			b = appendString(b, k)
			b = append(b, ':')
			var ok bool
			if b, ok = appendAny(b, v[k], depth+1); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	case []any:
		if v == nil {
			return append(b, "null"...), true
		}
		if len(v) == 0 {
			return append(b, '[', ']'), true
		}
		for i, e := range v {
			b = append(b, "[,"[min(i, 1)])
			var ok bool
			if b, ok = appendAny(b, e, depth+1); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	}
	return b, false
}

// validNumber reports whether s is a JSON number, as json.Marshal checks a
// json.Number.
func validNumber(s string) bool {
	s2 := s
	if s2 != "" && s2[0] == '-' {
		s2 = s2[1:]
	}
	digits := func() int {
		n := 0
		for n < len(s2) && '0' <= s2[n] && s2[n] <= '9' {
			n++
		}
		d := s2[:n]
		s2 = s2[n:]
		return len(d)
	}
	switch {
	case s2 == "":
		return false
	case s2[0] == '0':
		s2 = s2[1:]
	case digits() == 0:
		return false
	}
	if s2 != "" && s2[0] == '.' {
		s2 = s2[1:]
		if digits() == 0 {
			return false
		}
	}
	if s2 != "" && (s2[0] == 'e' || s2[0] == 'E') {
		s2 = s2[1:]
		if s2 != "" && (s2[0] == '+' || s2[0] == '-') {
			s2 = s2[1:]
		}
		if digits() == 0 {
			return false
		}
	}
	return s2 == ""
}

const hexDigits = "0123456789abcdef"

// appendString appends s quoted as json.Marshal quotes it: HTML-safe (<, >
// and & escaped), U+2028 and U+2029 escaped, bytes that are not UTF-8
// replaced by U+FFFD. The bytes it writes as they are go out in runs: the
// ASCII ones found eight at a time (safeCanonicalRun), the others rune by
// rune.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0 // of the run not yet appended
	for i := 0; ; {
		i += safeCanonicalRun(s[i:])
		if i == len(s) {
			break
		}
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				b = append(b, s[start:i]...)
				b = append(b, `\ufffd`...)
			case r == '\u2028' || r == '\u2029':
				b = append(b, s[start:i]...)
				b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			default:
				i += size
				continue
			}
			i += size
			start = i
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '\\', '"':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default: // other controls, <, > and &
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
