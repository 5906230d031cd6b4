package job

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// Decode parses and validates one job document, as read from a Kafka record
// value. Every rejection is a *ValidationError, found in this order:
//
//  1. the document exceeds limits.MaxMessageBytes (oversize_message), or is
//     not valid UTF-8 (malformed_json: RFC 8259 requires it, and
//     encoding/json would silently replace the bad bytes in a subject or a
//     body, sending text the producer never wrote);
//  2. in document order: it is not one well-formed JSON object, has
//     trailing data (malformed_json), or nests objects and arrays deeper
//     than limits.MaxDepth (too_deep; reading stops there, so nothing after
//     that point is reported);
//  3. "version" is missing or not SchemaVersion (unsupported_version),
//     checked before any other field so that a newer document reports its
//     version rather than its new fields;
//  4. in document order: a key the schema does not define (unknown_field,
//     matched exactly, so "From" is unknown), a duplicate key or a null
//     where the schema allows none (malformed_json), template data nesting
//     deeper than 16 (too_deep) or with more than 1000 keys
//     (oversize_field), both at "template.data";
//  5. a value of the wrong type (malformed_json);
//  6. a required key is absent (missing_field);
//  7. Validate.
//
// Time and memory are linear in len(data): one pass reads the document,
// checks steps 1 to 6 and fills the Job as it goes, allocating only what the
// Job holds (and nothing more once a problem is noted, so a hostile document
// costs no more than its size). encoding/json is not involved: the tests
// check, value for value, that the Job is the one encoding/json decodes
// (with DisallowUnknownFields and UseNumber) from any document Decode
// accepts.
//
// Decode returns a valid message ID in its canonical form, without angle
// brackets, because the worker keys deduplication on it and the sender adds
// the brackets itself: "<a@b>" and "a@b" are the same job. It does not
// otherwise Normalize: an empty priority stays empty. When only Validate
// fails, the decoded job is returned with the error so the caller can log
// its message ID; otherwise the Job is zero.
func Decode(data []byte, limits Limits) (Job, error) {
	var j Job
	err := DecodeInto(&j, data, limits)
	return j, err
}

// DecodeInto is Decode into *j, for a caller that keeps the Job in a
// struct of its own: Decode's Job escapes to the heap (the pooled scanner
// holds it) and is then copied out, one Job-sized allocation per record
// for nothing. *j is overwritten whatever the outcome, as Decode's result
// would be: zero unless the document decoded.
func DecodeInto(j *Job, data []byte, limits Limits) error {
	return decodeInto(j, data, limits, nil)
}

// DecodeHashInto is DecodeInto followed by Hash of the Job it leaves in
// *j, with the same results, in less work: a text or HTML body that the
// document holds already as the canonical encoding writes it (as
// json.Marshal wrote it: a producer in Go) goes into the hash as it
// stands in data instead of being escaped again.
func DecodeHashInto(j *Job, data []byte, limits Limits) ([]byte, error) {
	var bodies canonicalBodies
	err := decodeInto(j, data, limits, &bodies)
	return j.hash(&bodies), err
}

// canonicalBodies holds the text and HTML bodies of a decoded job as the
// document wrote them, quotes included, when that is their canonical
// encoding (appendString's); nil otherwise.
type canonicalBodies struct {
	text, html []byte
}

func decodeInto(j *Job, data []byte, limits Limits, bodies *canonicalBodies) error {
	*j = Job{}
	limits = limits.WithDefaults()
	if len(data) > limits.MaxMessageBytes {
		return invalid(ReasonOversizeMessage, "", "%d bytes, limit %d", len(data), limits.MaxMessageBytes)
	}
	// The scanner checks the UTF-8 of the strings as it reads them, which
	// leaves the document's other bytes ASCII once it parses: a rejected
	// document is checked whole, so that invalid UTF-8 is still reported
	// ahead of what comes after it in the order above, and an accepted
	// one is not walked a second time.
	if err := scan(data, limits.MaxDepth, j, bodies); err != nil {
		*j = Job{}
		if bodies != nil {
			*bodies = canonicalBodies{}
		}
		if !utf8.Valid(data) {
			return invalid(ReasonMalformedJSON, "", "not valid UTF-8 at byte %d", firstInvalidUTF8(data))
		}
		return err
	}
	err := j.Validate(limits)
	if validateMessageID(j.MessageID) == nil {
		// An invalid ID ("<>", "<a@b") is left as written, for the log.
		j.MessageID = trimAngle(j.MessageID)
	}
	return err
}

// scan reads the document into j (steps 2 to 6 of Decode) with a pooled
// scanner, whose path and buffers are reused from mail to mail.
func scan(data []byte, maxDepth int, j *Job, bodies *canonicalBodies) *ValidationError {
	s := scanners.Get().(*scanner)
	defer s.putBack()
	*s = scanner{data: data, maxDepth: maxDepth, job: j, path: s.path[:0], scratch: s.scratch[:0],
		unescaped: s.unescaped[:0], utf8Strict: true, bodies: bodies}
	if err := s.document(); err != nil {
		if errors.Is(err, errTooDeep) {
			return invalid(ReasonTooDeep, s.render(""), "objects and arrays nest deeper than %d", maxDepth)
		}
		return invalid(ReasonMalformedJSON, "", "%v", err)
	}
	if err := checkVersion(s.version, s.hasVersion); err != nil {
		return err
	}
	if s.problem != nil {
		return s.problem
	}
	if s.typeProblem != nil {
		return s.typeProblem
	}
	if s.missing != "" {
		return invalid(ReasonMissingField, s.missing, "required key is absent")
	}
	return nil
}

var scanners = sync.Pool{New: func() any { return new(scanner) }}

// maxPooledScratch bounds the base64 buffer a pooled scanner keeps.
const maxPooledScratch = 64 << 10

// maxPooledUnescaped bounds the unescaping buffer a pooled scanner keeps:
// a body of some 100 KiB, not a rare large one.
const maxPooledUnescaped = 256 << 10

// putBack returns s to the pool without what points into the document or
// the Job.
func (s *scanner) putBack() {
	clear(s.path[:cap(s.path)]) // the keys point into the document
	scratch := s.scratch
	if cap(scratch) > maxPooledScratch {
		scratch = nil
	}
	unescaped := s.unescaped
	if cap(unescaped) > maxPooledUnescaped {
		unescaped = nil
	}
	*s = scanner{path: s.path[:0], scratch: scratch, unescaped: unescaped}
	scanners.Put(s)
}

// firstInvalidUTF8 is the offset of the first byte of data that does not
// start a valid UTF-8 sequence.
func firstInvalidUTF8(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(data)
}

func checkVersion(tok json.Token, present bool) *ValidationError {
	if !present {
		return invalid(ReasonUnsupportedVersion, "version", "missing, want %d", SchemaVersion)
	}
	n, ok := tok.(json.Number)
	if !ok {
		return invalid(ReasonUnsupportedVersion, "version", "not a number, want %d", SchemaVersion)
	}
	if v, err := n.Int64(); err != nil || v != SchemaVersion {
		return invalid(ReasonUnsupportedVersion, "version", "version %s, want %d", truncate(n.String()), SchemaVersion)
	}
	return nil
}

// errTooDeep stops the scanner at the first value nested deeper than
// Limits.MaxDepth.
var errTooDeep = errors.New("nested too deep")

// scanner reads a document once and decodes it into a Job as it goes:
// the grammar byte by byte, the bodies of strings eight bytes at a time
// (see str), unescaped as they are read. It finds what encoding/json would not report or would report
// at a cost: the version ahead of everything else, keys that differ from
// the schema only in case (encoding/json matches them), duplicate keys
// (encoding/json keeps the last), nulls (encoding/json reads them as zero
// values), absent required keys, nesting deeper than the limit, values of
// the wrong type, and template data that nests deeper than
// maxTemplateDataDepth or holds more than maxTemplateDataKeys keys. It
// checks the syntax and trailing data too.
//
// It fills the Job as encoding/json would: strings unescaped the same way
// (a lone surrogate becomes U+FFFD), an empty list or object a non-nil
// empty slice or map, base64 content decoded, template data as
// map[string]any with json.Number numbers. From the first problem on it
// stops filling, since the Job is dropped.
//
// A hostile document must cost no more than its size: the scanner
// allocates nothing per value except what the Job keeps, keeps the path of
// the current value as a stack of segments rendered only when it notes a
// problem, and reuses one duplicate-key set per depth and its unescaping
// and base64 buffers.
//
// It is a hand-written parser, not encoding/json plus checks afterwards,
// for speed and a bounded cost per byte: the worker decodes every record it
// reads, and one pass that looks at each byte once (a string's bulk a
// word at a time), decodes into the Job
// directly and allocates only what the Job keeps does less work than
// unmarshalling and then re-reading the document for the checks above, and
// keeps a hostile document's cost linear in its size.
type scanner struct {
	data      []byte
	pos       int
	maxDepth  int
	job       *Job                  // filled until a problem is noted; nil: check only
	path      []segment             // from the document down to the current value
	seen      []map[string]struct{} // duplicate-key sets of maps, reused per depth
	scratch   []byte                // base64 output, reused
	unescaped []byte                // unescaped strings, reused
	// hasUnescaped: unescaped holds the value of the string str read last.
	hasUnescaped bool
	utf8Checked  bool // the document is valid UTF-8
	// utf8Strict: a string that is not valid UTF-8 fails the scan
	// (errNotUTF8), instead of being read with U+FFFD for its bad bytes.
	utf8Strict bool
	// canonicalEscapes: the escapes of the string str read last are the
	// ones appendString writes; nonASCII: it has a byte that is not ASCII.
	canonicalEscapes, nonASCII bool
	bodies                     *canonicalBodies // filled when not nil
	str1                       string           // a map[string]string value on its way into the map
	version                    json.Token
	hasVersion                 bool
	problem                    *ValidationError // first structural problem in document order
	dataBase                   int              // len(path) at the template data object
	dataKeys                   int              // keys read in template data so far
	typeProblem                *ValidationError // first value of the wrong type in document order
	missing                    string           // first absent required key
}

// failed reports whether the document is already known to be rejected:
// nothing more is decoded into the Job from then on.
func (s *scanner) failed() bool {
	return s.problem != nil || s.typeProblem != nil || s.missing != ""
}

// segment is one step of a path: an object key, or an array index when
// index >= 0.
type segment struct {
	key   []byte // the key as written, quotes included
	plain bool   // key has no escapes and is valid UTF-8: its bytes are its value
	index int
}

// kind is the kind of a JSON value, told by its first byte.
type kind uint8

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

// String names the kind as encoding/json's UnmarshalTypeError does.
func (k kind) String() string {
	return [...]string{"null", "bool", "number", "string", "array", "object"}[k]
}

// maxReusedKeys bounds the duplicate-key set kept for reuse: clearing a set
// costs its capacity, so a large one is dropped rather than cleared for
// every small object after it.
const maxReusedKeys = 64

var errEnd = errors.New("unexpected end of JSON input")

func (s *scanner) document() error {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return errEnd
	}
	if s.data[s.pos] != '{' {
		return errors.New("not a JSON object")
	}
	s.pos++
	var dst any
	if s.job != nil {
		dst = s.job
	}
	if err := s.object(jobType, dst); err != nil {
		return err
	}
	if s.skipSpace(); s.pos < len(s.data) {
		return errors.New("trailing data after the object")
	}
	return nil
}

func (s *scanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the byte at the read position, 0 at the end.
func (s *scanner) peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// syntaxError describes the byte at the read position, which the grammar
// does not allow there.
func (s *scanner) syntaxError(context string) error {
	if s.pos >= len(s.data) {
		return errEnd
	}
	return fmt.Errorf("invalid character %q %s at offset %d", s.data[s.pos], context, s.pos)
}

// render formats the current path, with child appended when not empty, as
// "attachments[0].filename". Each key is shortened as in error details, so
// the field stays small whatever the producer wrote.
func (s *scanner) render(child string) string {
	var b strings.Builder
	for _, seg := range s.path {
		if seg.index >= 0 {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(seg.index))
			b.WriteByte(']')
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(truncate(unquote(seg.key, seg.plain)))
	}
	if child != "" {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(child)
	}
	return b.String()
}

// unquote returns the value of the JSON string raw (quotes included) as
// encoding/json reads it.
func unquote(raw []byte, plain bool) string {
	if plain {
		return string(raw[1 : len(raw)-1])
	}
	return string(appendUnescaped(nil, raw[1:len(raw)-1]))
}

// stringValue returns the value of the JSON string raw (quotes included),
// which str has just read, in one allocation: unescaping never lengthens valid UTF-8 (Decode checked
// it), so the buffer is allocated at the escaped length and becomes the
// string without a copy.
func (s *scanner) stringValue(raw []byte, plain bool) string {
	if plain {
		return string(raw[1 : len(raw)-1])
	}
	if s.hasUnescaped {
		return string(s.unescaped) // str unescaped raw as it read it
	}
	body := raw[1 : len(raw)-1]
	b := appendUnescaped(make([]byte, 0, len(body)), body)
	// b is not kept anywhere else, so the string is its only reference.
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// note records a problem at the current path unless an earlier one is
// recorded.
func (s *scanner) note(reason Reason, detail string) {
	if s.problem == nil {
		s.problem = &ValidationError{Reason: reason, Field: s.render(""), Detail: detail}
	}
}

// noteAt records a problem at field unless an earlier one is recorded.
func (s *scanner) noteAt(reason Reason, field, detail string) {
	if s.problem == nil {
		s.problem = &ValidationError{Reason: reason, Field: field, Detail: detail}
	}
}

// noteType records a value of the wrong type at the current path unless an
// earlier one is recorded.
func (s *scanner) noteType(format string, args ...any) {
	if s.typeProblem == nil {
		s.typeProblem = &ValidationError{Reason: ReasonMalformedJSON, Field: s.render(""), Detail: fmt.Sprintf(format, args...)}
	}
}

// value reads one value that the schema says has type t (nil: unknown) and
// returns its kind and where it starts. dst, when not nil, is a pointer to
// where the value goes: a field of the Job (*string, *[]string, ...), an
// element of a list, or an *any in template data. Objects and arrays
// recurse through object and array; scalars go to a reader of their kind.
func (s *scanner) value(t reflect.Type, dst any) (kind, int, error) {
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	s.skipSpace()
	start := s.pos
	var k kind
	switch c := s.peek(); {
	case c == '{':
		k = kindObject
	case c == '[':
		k = kindArray
	case c == '"':
		k = kindString
	case c == 't' || c == 'f':
		k = kindBool
	case c == 'n':
		k = kindNull
	case c == '-' || '0' <= c && c <= '9':
		k = kindNumber
	default:
		return 0, start, s.syntaxError("looking for the beginning of a value")
	}
	if t != nil && k != kindNull && !kindFits(k, t) {
		s.noteType("%s is not %s", k, t)
		t = nil // what is inside the value has no schema type
	}
	if s.failed() {
		dst = nil
	}
	switch k {
	case kindObject, kindArray:
		// The document object is depth 1, so this value is at len(path)+1.
		if len(s.path)+1 > s.maxDepth {
			return k, start, errTooDeep
		}
		if t == dataType {
			s.dataBase = len(s.path)
		}
		if (t == dataType || t == anyType) && len(s.path)+1-s.dataBase > maxTemplateDataDepth {
			s.noteAt(ReasonTooDeep, "template.data", fmt.Sprintf("objects and arrays nest deeper than %d", maxTemplateDataDepth))
		}
		s.pos++
		if k == kindObject {
			return k, start, s.object(t, dst)
		}
		return k, start, s.array(t, dst)
	case kindString:
		return k, start, s.stringValueInto(t, dst, start)
	case kindNumber:
		return k, start, s.numberInto(t, dst, start)
	case kindBool, kindNull:
		return k, start, s.literalInto(k, t, dst)
	}
	return k, start, nil
}

// stringValueInto reads the string that starts at start, checks it
// against t and stores it in dst (*string, *Priority or *any).
func (s *scanner) stringValueInto(t reflect.Type, dst any, start int) error {
	plain, err := s.str()
	if err != nil {
		return err
	}
	raw := s.data[start:s.pos]
	if t != nil && s.typeProblem == nil {
		s.checkString(t, raw, plain, dst)
	}
	if s.failed() {
		return nil
	}
	switch d := dst.(type) {
	case *string:
		*d = s.stringValue(raw, plain)
		s.noteCanonicalBody(d, raw)
	case *Priority:
		*d = Priority(s.stringValue(raw, plain))
	case *any:
		*d = s.stringValue(raw, plain)
	}
	return nil
}

// numberInto reads the number that starts at start into dst: a byte of
// an array read into []byte, the version (*int), or template data (*any).
func (s *scanner) numberInto(t reflect.Type, dst any, start int) error {
	if err := s.number(); err != nil {
		return err
	}
	raw := s.data[start:s.pos]
	if t == byteType {
		// encoding/json reads an array into []byte element by element.
		b, err := strconv.ParseUint(string(raw), 10, 8)
		if err != nil {
			s.noteType("number %s is not a byte", truncate(string(raw)))
		} else if d, ok := dst.(*byte); ok {
			*d = byte(b)
		}
		return nil
	}
	switch d := dst.(type) {
	case *int:
		// Only the version is an int: checkVersion judges it.
		if n, err := strconv.Atoi(string(raw)); err == nil {
			*d = n
		}
	case *any:
		*d = json.Number(raw)
	}
	return nil
}

// literalInto reads true, false or null (k) into dst. A null leaves its
// destination zero, as encoding/json does: a nil content, a nil data
// value, a zero byte.
func (s *scanner) literalInto(k kind, t reflect.Type, dst any) error {
	lit := [...]string{kindNull: "null", kindBool: "false"}[k]
	if s.data[s.pos] == 't' {
		lit = "true"
	}
	if !bytes.HasPrefix(s.data[s.pos:], []byte(lit)) {
		return s.syntaxError("in literal " + lit)
	}
	s.pos += len(lit)
	// Template data is the producer's JSON: null is one of its values.
	if k == kindNull && t != nil && t != bytesType && t != byteType && t.Kind() != reflect.Interface {
		s.note(ReasonMalformedJSON, "null is not allowed")
	}
	if k == kindBool {
		switch d := dst.(type) {
		case *any:
			*d = lit == "true"
		case *bool:
			*d = lit == "true"
		}
	}
	return nil
}

// kindFits reports whether a value of kind k may decode into t, as
// encoding/json decides it by kind: a number is never a string, a string
// never a list.
func kindFits(k kind, t reflect.Type) bool {
	switch {
	case t == bytesType: // base64 or, as encoding/json allows, an array of bytes
		return k == kindString || k == kindArray
	case t == timeType:
		return k == kindString
	}
	switch t.Kind() {
	case reflect.String:
		return k == kindString
	case reflect.Slice:
		return k == kindArray
	case reflect.Map, reflect.Struct:
		return k == kindObject
	case reflect.Int, reflect.Uint8:
		return k == kindNumber
	case reflect.Bool:
		return k == kindBool
	}
	return true
}

// checkString checks what encoding/json checks in a string of type t: that
// content is base64 and not_after is RFC 3339, and decodes those two into
// dst (a **time.Time or a *[]byte) when it is not nil. raw is the string as
// written, quotes included.
func (s *scanner) checkString(t reflect.Type, raw []byte, plain bool, dst any) {
	switch t {
	case timeType:
		var tm time.Time
		if err := tm.UnmarshalJSON(raw); err != nil {
			s.noteType("%v", err)
			return
		}
		if d, ok := dst.(**time.Time); ok && !s.failed() {
			*d = &tm
		}
	case bytesType:
		content := raw[1 : len(raw)-1]
		if !plain {
			if !s.hasUnescaped {
				s.unescaped = appendUnescaped(s.unescaped[:0], content)
			}
			content = s.unescaped
		}
		n := base64.StdEncoding.DecodedLen(len(content))
		d, keep := dst.(*[]byte)
		keep = keep && !s.failed()
		out := s.scratch
		if keep {
			// The Job keeps the bytes: encoding/json allocates DecodedLen
			// too, and "" decodes to an empty, not a nil, slice.
			out = make([]byte, n)
		} else if cap(out) < n {
			s.scratch = make([]byte, n)
			out = s.scratch
		}
		m, err := base64.StdEncoding.Decode(out[:n], content)
		if err != nil {
			s.noteType("not base64: %v", err)
			return
		}
		if keep {
			*d = out[:m]
		}
	}
}

// str reads a string whose opening quote is at the read position and
// reports whether it is plain: no escapes and valid UTF-8, so that its
// bytes are its value. A plain string is skipped eight bytes at a time
// (plainStringRun), and checked for UTF-8 only when it has a byte that is
// not ASCII and the document was not checked as a whole; a strict scanner
// (s.utf8Strict) fails on one that is not UTF-8. A string with an escape
// is read on by escapedStr.
func (s *scanner) str() (plain bool, err error) {
	s.pos++
	start := s.pos
	s.hasUnescaped = false
	n, nonASCII := plainStringRun(s.data[start:])
	s.pos += n
	if s.pos >= len(s.data) {
		return false, errEnd
	}
	if s.data[s.pos] != '"' {
		return false, s.escapedStr(start, nonASCII)
	}
	s.canonicalEscapes, s.nonASCII = true, nonASCII
	s.pos++
	switch {
	case !nonASCII || s.utf8Checked || utf8.Valid(s.data[start:s.pos-1]):
		return true, nil
	case s.utf8Strict:
		return false, errNotUTF8
	}
	return false, nil
}

// errNotUTF8 stops a strict scanner at a string that is not valid UTF-8.
var errNotUTF8 = errors.New("string is not valid UTF-8")

// escapedStr reads on the string that starts at start from the read
// position, the first byte that ends its first plain run and is not its
// closing quote, with nonASCII telling whether that run has a byte that
// is not ASCII.
//
// The string is unescaped as it is read, into s.unescaped, as
// appendUnescaped would (s.hasUnescaped then says so), when its bytes
// need no UTF-8 repair: the document was checked (s.utf8Checked), the
// string is checked (s.utf8Strict), or the string is ASCII. Unescaping it
// afterwards would walk it again. HTML as json.Marshal writes it has an
// escape every few bytes (\\u003c for each <), so the cost per escape
// counts as much as the cost per byte: the runs between escapes are
// copied a word at a time as they are scanned, each word whole, the bytes
// past the run overwritten next (out keeps 8 bytes spare for it), and the
// two-byte escapes and those of one byte (\\u00XX) are read without the
// general escape's switch and call.
func (s *scanner) escapedStr(start int, nonASCII bool) error {
	data := s.data
	pos := s.pos
	canonical := true // every escape so far is one appendString writes
	out := append(s.unescaped[:0], data[start:pos]...)
	o := len(out) // out[:o] is the value so far
	out = out[:cap(out)]
	var seen uint64 // the bytes of the runs after the first, OR-ed, for their high bits
escapes:
	for {
		switch c := data[pos]; {
		case c == '\\':
			if len(out)-o < 8 {
				out = growSpare(out, o)
			}
			if pos+1 < len(data) && shortEscapes[data[pos+1]] != 0 {
				out[o] = shortEscapes[data[pos+1]]
				o++
				canonical = canonical && data[pos+1] != '/'
				pos += 2
				break
			}
			if r, upper, ok := byteEscapeAt(data, pos); ok {
				canonical = canonical && !upper && escapedAsU(rune(r))
				if r < utf8.RuneSelf {
					out[o] = r
					o++
				} else {
					out[o], out[o+1] = 0xc0|r>>6, 0x80|r&0x3f
					o += 2
				}
				pos += len(`\u00XX`)
				break
			}
			s.pos = pos
			// s.unescaped keeps its buffer for the next string even when
			// this one fails: out is dropped with it.
			value, escCanonical, err := s.escape(out[:o])
			if err != nil {
				return err
			}
			canonical = canonical && escCanonical
			o, out = len(value), value[:cap(value)]
			pos = s.pos
		case c == '"':
			nonASCII = nonASCII || seen&swarHighs != 0
			s.canonicalEscapes, s.nonASCII = canonical, nonASCII
			if nonASCII && !s.utf8Checked && s.utf8Strict && !utf8.Valid(data[start:pos]) {
				s.pos = pos
				return errNotUTF8
			}
			if s.utf8Checked || s.utf8Strict || !nonASCII {
				s.unescaped = out[:o]
				s.hasUnescaped = true
			}
			s.pos = pos + 1
			return nil
		default: // a control character
			s.pos = pos
			return s.syntaxError("in string literal")
		}
		// The run that follows, as copyPlainRun copies it, inlined: the
		// call costs as much as an HTML run.
		for len(data)-pos >= 8 {
			if len(out)-o < 8 {
				out = growSpare(out, o)
			}
			x := binary.LittleEndian.Uint64(data[pos:])
			binary.LittleEndian.PutUint64(out[o:], x)
			if stop := stringStops(x); stop != 0 {
				k := firstMarked(stop)
				seen |= x & (1<<(8*k) - 1)
				pos += k
				o += k
				continue escapes
			}
			seen |= x
			pos += 8
			o += 8
		}
		var n int // the document's last few bytes
		out, n, seen = copyPlainRun(out, o, data[pos:], seen)
		pos += n
		o += n
		if pos >= len(data) {
			s.pos = pos
			return errEnd
		}
	}
}

// copyPlainRun copies the plain run that starts b (see plainStringRun)
// to out[o:], a word at a time, and returns out, grown when it had to be,
// with its length at its capacity, the run's length and seen OR-ed with
// the run's bytes.
func copyPlainRun(out []byte, o int, b []byte, seen uint64) ([]byte, int, uint64) {
	i := 0
	for ; len(b)-i >= 8; i += 8 {
		if len(out)-(o+i) < 8 {
			out = growSpare(out, o+i)
		}
		x := binary.LittleEndian.Uint64(b[i:])
		binary.LittleEndian.PutUint64(out[o+i:], x)
		if stop := stringStops(x); stop != 0 {
			k := firstMarked(stop)
			return out, i + k, seen | x&(1<<(8*k)-1)
		}
		seen |= x
	}
	// The document's last few bytes.
	for ; i < len(b); i++ {
		c := b[i]
		if c < ' ' || c == '"' || c == '\\' {
			break
		}
		if len(out)-(o+i) < 8 {
			out = growSpare(out, o+i)
		}
		out[o+i] = c
		seen |= uint64(c)
	}
	return out, i, seen
}

// growSpare returns b[:n] grown to at least 8 bytes of capacity past n,
// its length at its capacity.
func growSpare(b []byte, n int) []byte {
	b = slices.Grow(b[:n], 8)
	return b[:cap(b)]
}

// shortEscapes maps the letter of each two-byte escape (\\n, \\", ...)
// to the byte it stands for, and other bytes to 0.
var shortEscapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// byteEscapeAt reads the \u escape of a character below U+0100 at
// data[i:] (\\u00XX), reporting whether one of its hexadecimal digits is
// an upper-case letter and whether there is such an escape there.
func byteEscapeAt(data []byte, i int) (r byte, upper, ok bool) {
	if len(data)-i < 6 {
		return 0, false, false
	}
	e := data[i : i+6]
	if binary.LittleEndian.Uint32(e) != '\\'|'u'<<8|'0'<<16|'0'<<24 {
		return 0, false, false
	}
	hi, lo := hexValues[e[4]], hexValues[e[5]]
	return hi<<4 | lo&0x0f, (hi|lo)&hexUpper != 0, (hi|lo)&hexInvalid == 0
}

// escape appends the value of the escape whose backslash is at the read
// position to out and reads past it, reporting whether appendString
// writes that escape. A \u escape of a surrogate takes the escape of the
// other half with it when the two make a pair, as appendUnescaped reads
// them; a lone one is U+FFFD.
func (s *scanner) escape(out []byte) ([]byte, bool, error) {
	s.pos++
	canonical := true
	switch e := s.peek(); {
	case shortEscapes[e] != 0:
		canonical = e != '/'
		out = append(out, shortEscapes[e])
	case e == 'u':
		s.pos++
		r, upper, ok := hex4At(s.data, s.pos)
		if !ok {
			for isHexDigit(s.peek()) {
				s.pos++ // to the digit to report
			}
			return out, false, s.syntaxError("in \\u escape")
		}
		s.pos += 4
		canonical = !upper && escapedAsU(r)
		if utf16.IsSurrogate(r) {
			if low, ok := s.lowSurrogate(r); ok {
				s.pos += 6
				return utf8.AppendRune(out, low), canonical, nil
			}
			r = unicode.ReplacementChar
		}
		if r < utf8.RuneSelf {
			return append(out, byte(r)), canonical, nil
		}
		return utf8.AppendRune(out, r), canonical, nil
	default:
		return out, false, s.syntaxError("in string escape")
	}
	s.pos++
	return out, canonical, nil
}

// escapedAsU reports whether appendString writes r as a \\u escape.
func escapedAsU(r rune) bool {
	switch r {
	case '\b', '\t', '\n', '\f', '\r':
		return false // a short escape
	case '<', '>', '&', '\u2028', '\u2029':
		return true
	}
	return r < ' '
}

// noteCanonicalBody records raw, the string just read into *d, in
// s.bodies when d is the Job's text or HTML body and raw is what
// appendString writes for it: only escapes appendString writes, and none
// of the characters it escapes left as they are. U+FFFD needs no thought:
// a \\ufffd escape is not one appendString writes, and a document with
// invalid UTF-8 is not read.
func (s *scanner) noteCanonicalBody(d *string, raw []byte) {
	if s.bodies == nil || s.job == nil || !s.canonicalEscapes || (d != &s.job.Text && d != &s.job.HTML) {
		return
	}
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '<') >= 0 || bytes.IndexByte(body, '>') >= 0 || bytes.IndexByte(body, '&') >= 0 {
		return
	}
	if s.nonASCII && (bytes.Contains(body, []byte("\u2028")) || bytes.Contains(body, []byte("\u2029"))) {
		return
	}
	if d == &s.job.Text {
		s.bodies.text = raw
	} else {
		s.bodies.html = raw
	}
}

// lowSurrogate decodes the pair of high, a surrogate just read, and the
// \\u escape at the read position, and reports whether there is one such
// escape that makes a pair with it.
func (s *scanner) lowSurrogate(high rune) (rune, bool) {
	d := s.data[s.pos:]
	if len(d) < 6 || d[0] != '\\' || d[1] != 'u' {
		return 0, false
	}
	var low rune
	for _, c := range d[2:6] {
		if !isHexDigit(c) {
			return 0, false // the syntax error is reported when it is read
		}
		low = low<<4 | rune(hexValue(c))
	}
	if dec := utf16.DecodeRune(high, low); dec != unicode.ReplacementChar {
		return dec, true
	}
	return 0, false
}

// hex4At reads the 4 hexadecimal digits of a \\u escape at data[i:],
// reporting whether one is an upper-case letter and whether all 4 are
// there and digits.
func hex4At(data []byte, i int) (r rune, upper, ok bool) {
	if i+4 > len(data) {
		return 0, false, false
	}
	var bad, up byte
	for _, c := range data[i : i+4] {
		v := hexValues[c]
		bad |= v & hexInvalid
		up |= v & hexUpper
		r = r<<4 | rune(v&0x0f)
	}
	return r, up != 0, bad == 0
}

// hexValues maps a byte to its value as a hexadecimal digit, with
// hexUpper for A to F and hexInvalid for a byte that is not a digit.
var hexValues = func() (t [256]byte) {
	for i := range t {
		c := byte(i)
		switch {
		case isHexDigit(c):
			t[i] = hexValue(c)
			if 'A' <= c && c <= 'F' {
				t[i] |= hexUpper
			}
		default:
			t[i] = hexInvalid
		}
	}
	return t
}()

const (
	hexUpper   = 0x10
	hexInvalid = 0x20
)

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// hexValue is the value of a hexadecimal digit.
func hexValue(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// number reads a number as RFC 8259 defines it.
func (s *scanner) number() error {
	digits := func() bool {
		start := s.pos
		for c := s.peek(); '0' <= c && c <= '9'; c = s.peek() {
			s.pos++
		}
		return s.pos > start
	}
	if s.peek() == '-' {
		s.pos++
	}
	if s.peek() == '0' {
		s.pos++
	} else if !digits() {
		return s.syntaxError("in numeric literal")
	}
	if s.peek() == '.' {
		s.pos++
		if !digits() {
			return s.syntaxError("after decimal point in numeric literal")
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.pos++
		if c := s.peek(); c == '+' || c == '-' {
			s.pos++
		}
		if !digits() {
			return s.syntaxError("in exponent of numeric literal")
		}
	}
	return nil
}

// object reads the members of an object whose '{' has been read, into dst
// when not nil: a *Job, *Attachment or **TemplateRef for the schema's
// objects, a *map[string]string, a *map[string]any (template data) or an
// *any (an object inside template data). Keys, duplicates, the version and
// the template data's limits are checked here in the one pass.
func (s *scanner) object(t reflect.Type, dst any) error {
	o := objectState{info: schemaObjects()[t], t: t, isMap: t != nil && t.Kind() == reflect.Map}
	depth := len(s.path)
	if o.info == nil {
		o.seen = s.keySet(depth)
	}
	o.target(dst)
	s.path = append(s.path, segment{index: -1})
	s.skipSpace()
	if s.peek() == '}' {
		s.pos++
	} else {
		for {
			s.skipSpace()
			if s.peek() != '"' {
				return s.syntaxError("looking for the beginning of an object key")
			}
			start := s.pos
			plain, err := s.str()
			if err != nil {
				return err
			}
			raw := s.data[start:s.pos]
			s.path[depth] = segment{key: raw, plain: plain, index: -1}
			var m member
			if o.info != nil {
				m = s.schemaMember(&o, raw, plain)
			} else {
				m = s.mapMember(&o, raw, plain)
			}
			if s.skipSpace(); s.peek() != ':' {
				return s.syntaxError("after object key")
			}
			s.pos++
			k, vstart, err := s.value(m.typ, m.dst)
			if err != nil {
				return err
			}
			if m.isVersion {
				s.version, s.hasVersion = versionToken(k, s.data[vstart:s.pos]), true
			}
			if !s.failed() {
				switch {
				case o.strMap != nil:
					o.strMap[m.key] = s.str1
				case o.anyMap != nil:
					o.anyMap[m.key] = *m.slot
				}
			}
			s.skipSpace()
			if c := s.peek(); c == ',' {
				s.pos++
				continue
			} else if c == '}' {
				s.pos++
				break
			}
			return s.syntaxError("after object key:value pair")
		}
	}
	s.path = s.path[:depth]
	if o.info != nil && s.missing == "" {
		for _, f := range o.info.fields {
			if f.required && o.seenFields&(1<<f.index) == 0 {
				s.missing = s.render(f.name)
				break
			}
		}
	}
	if len(o.seen) > maxReusedKeys {
		s.seen[depth] = nil
	}
	return nil
}

// objectState is what object keeps while it reads one object.
type objectState struct {
	info       *schemaObject // the object's schema; nil for maps and template data
	t          reflect.Type
	isMap      bool
	seenFields uint64              // schema objects: a bit per field
	seen       map[string]struct{} // other objects: the keys
	fields     reflect.Value       // schema objects: the struct decoded into
	strMap     map[string]string   // headers, metadata
	anyMap     map[string]any      // template data
}

// target sets up where the object's members go: dst's fields, or a new
// map stored in dst.
func (o *objectState) target(dst any) {
	switch d := dst.(type) {
	case *Job, *Attachment:
		o.fields = reflect.ValueOf(d).Elem()
	case **TemplateRef:
		*d = new(TemplateRef)
		o.fields = reflect.ValueOf(*d).Elem()
	case *map[string]string:
		o.strMap = make(map[string]string)
		*d = o.strMap
	case *map[string]any:
		o.anyMap = make(map[string]any)
		*d = o.anyMap
	case *any:
		o.anyMap = make(map[string]any)
		*d = o.anyMap
	}
}

// member is one key of an object and where its value goes.
type member struct {
	typ       reflect.Type
	dst       any // nil: the value is checked, not kept
	key       string
	slot      *any // template data: the value's place
	isVersion bool
}

// schemaMember looks a key up in the object's schema, noting an unknown
// or repeated field; a plain key is looked up without a copy.
func (s *scanner) schemaMember(o *objectState, raw []byte, plain bool) member {
	var (
		f  schemaField
		ok bool
	)
	if plain {
		f, ok = o.info.byName[string(raw[1:len(raw)-1])]
	} else {
		f, ok = o.info.byName[unquote(raw, plain)]
	}
	switch {
	case !ok:
		if s.problem == nil {
			s.note(ReasonUnknownField, fmt.Sprintf("not in schema version %d", SchemaVersion))
		}
	case o.seenFields&(1<<f.index) != 0:
		s.note(ReasonMalformedJSON, "duplicate key")
	}
	m := member{typ: f.typ, isVersion: ok && o.t == jobType && f.name == "version"}
	if ok {
		o.seenFields |= 1 << f.index
		if o.fields.IsValid() {
			m.dst = o.fields.Field(f.goIndex).Addr().Interface()
		}
	}
	return m
}

// mapMember reads a key of a map (headers, metadata) or of template data,
// noting a repeated key and counting template data's keys.
func (s *scanner) mapMember(o *objectState, raw []byte, plain bool) member {
	m := member{key: unquote(raw, plain)}
	if _, dup := o.seen[m.key]; dup {
		s.note(ReasonMalformedJSON, "duplicate key")
	}
	o.seen[m.key] = struct{}{}
	if o.isMap {
		m.typ = o.t.Elem()
	}
	if o.t == dataType || o.t == anyType {
		// Template data: counted so that its maps stay bounded, and
		// typed all the way down.
		m.typ = anyType
		if s.dataKeys++; s.dataKeys > maxTemplateDataKeys {
			s.noteAt(ReasonOversizeField, "template.data", fmt.Sprintf("more than %d keys", maxTemplateDataKeys))
		}
	}
	switch {
	case o.strMap != nil:
		s.str1 = ""
		m.dst = &s.str1
	case o.anyMap != nil:
		m.slot = new(any)
		m.dst = m.slot
	}
	return m
}

// versionToken returns the version value as checkVersion reads it.
func versionToken(k kind, raw []byte) json.Token {
	switch k {
	case kindNumber:
		return json.Number(raw)
	case kindString:
		return ""
	case kindBool:
		return raw[0] == 't'
	case kindArray:
		return json.Delim('[')
	case kindObject:
		return json.Delim('{')
	}
	return nil
}

// keySet returns an empty duplicate-key set for an object at depth, reusing
// the one the last object at that depth left.
func (s *scanner) keySet(depth int) map[string]struct{} {
	for len(s.seen) <= depth {
		s.seen = append(s.seen, nil)
	}
	if s.seen[depth] == nil {
		s.seen[depth] = make(map[string]struct{})
	} else {
		clear(s.seen[depth])
	}
	return s.seen[depth]
}

// array reads the elements of an array whose '[' has been read, into dst
// when not nil: a *[]string, *[]Attachment, *[]byte or an *any (a list in
// template data). An empty list is a non-nil empty slice, as encoding/json
// makes it.
func (s *scanner) array(t reflect.Type, dst any) error {
	var elem reflect.Type
	switch {
	case t == bytesType:
		elem = byteType
	case t != nil && t.Kind() == reflect.Slice:
		elem = t.Elem()
	case t == anyType:
		elem = anyType
	}
	var list []any // template data
	switch d := dst.(type) {
	case *[]string:
		*d = []string{}
	case *[]Attachment:
		*d = []Attachment{}
	case *[]byte:
		*d = []byte{}
	case *any:
		list = []any{}
	}
	depth := len(s.path)
	s.path = append(s.path, segment{})
	s.skipSpace()
	if s.peek() == ']' {
		s.pos++
		s.path = s.path[:depth]
		if d, ok := dst.(*any); ok {
			*d = list
		}
		return nil
	}
	for i := 0; ; i++ {
		s.path[depth].index = i
		var edst any
		if !s.failed() {
			switch d := dst.(type) {
			case *[]string:
				*d = append(*d, "")
				edst = &(*d)[i]
			case *[]Attachment:
				*d = append(*d, Attachment{})
				edst = &(*d)[i]
			case *[]byte:
				*d = append(*d, 0)
				edst = &(*d)[i]
			case *any:
				list = append(list, nil)
				edst = &list[i]
			}
		}
		if _, _, err := s.value(elem, edst); err != nil {
			return err
		}
		s.skipSpace()
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			s.path = s.path[:depth]
			if d, ok := dst.(*any); ok && !s.failed() {
				*d = list
			}
			return nil
		default:
			return s.syntaxError("after array element")
		}
	}
}

var (
	jobType   = reflect.TypeFor[Job]()
	bytesType = reflect.TypeFor[[]byte]()
	byteType  = reflect.TypeFor[byte]()
	timeType  = reflect.TypeFor[time.Time]()
	dataType  = reflect.TypeFor[map[string]any]()
	anyType   = reflect.TypeFor[any]()
)

// schemaField is one JSON field of an object in the job document.
type schemaField struct {
	name     string
	typ      reflect.Type
	required bool // no omitempty: the encoder always writes it
	index    int  // position in the object, at most 63
	goIndex  int  // index of the struct field, for reflect.Value.Field
}

type schemaObject struct {
	fields []schemaField // in struct order
	byName map[string]schemaField
}

// schemaObjects describes the objects of the document, read from the struct
// tags, so that the Go types stay the one definition. The schema test checks
// job.v1.schema.json against the same description.
var schemaObjects = sync.OnceValue(func() map[reflect.Type]*schemaObject {
	m := make(map[reflect.Type]*schemaObject)
	for _, t := range []reflect.Type{jobType, reflect.TypeFor[Attachment](), reflect.TypeFor[TemplateRef]()} {
		o := &schemaObject{byName: make(map[string]schemaField)}
		for f := range t.Fields() {
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			sf := schemaField{name: name, typ: f.Type, required: !strings.Contains(opts, "omitempty"), index: len(o.fields), goIndex: f.Index[0]}
			o.fields = append(o.fields, sf)
			o.byName[name] = sf
		}
		m[t] = o
	}
	return m
})

// appendUnescaped appends the value of the body of a JSON string (between
// its quotes, which the scanner checked) to b, exactly as encoding/json
// reads it: a \\u escape of a lone or misordered surrogate becomes U+FFFD,
// and so does a byte that is not UTF-8 (which Decode rules out first). The
// runs between backslashes are copied whole.
func appendUnescaped(b, str []byte) []byte {
	for {
		i := bytes.IndexByte(str, '\\')
		if i < 0 {
			return appendUTF8(b, str)
		}
		b = appendUTF8(b, str[:i])
		r := i + 1
		if e := shortEscapes[str[r]]; e != 0 {
			b = append(b, e)
			str = str[r+1:]
			continue
		}
		// \uXXXX: the scanner lets no other escape through.
		rr := hex4(str[r+1:])
		r += 5
		if utf16.IsSurrogate(rr) {
			if r+6 <= len(str) && str[r] == '\\' && str[r+1] == 'u' {
				if dec := utf16.DecodeRune(rr, hex4(str[r+2:])); dec != unicode.ReplacementChar {
					b = utf8.AppendRune(b, dec)
					str = str[r+6:]
					continue
				}
			}
			rr = unicode.ReplacementChar
		}
		b = utf8.AppendRune(b, rr)
		str = str[r:]
	}
}

// appendUTF8 appends run, which holds no escape, with each byte that is
// not UTF-8 replaced by U+FFFD, as encoding/json reads it.
func appendUTF8(b, run []byte) []byte {
	if utf8.Valid(run) {
		return append(b, run...)
	}
	for r := 0; r < len(run); {
		rr, size := utf8.DecodeRune(run[r:])
		b = utf8.AppendRune(b, rr)
		r += size
	}
	return b
}

// hex4 reads the 4 hexadecimal digits the scanner checked after a \u.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
