package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Decode parses and validates one job document, as read from a Kafka record
// value. Every rejection is a *ValidationError, found in this order:
//
//  1. the document exceeds limits.MaxMessageBytes (oversize_message);
//  2. in document order: it is not one well-formed JSON object, has
//     trailing data (malformed_json), or nests objects and arrays deeper
//     than limits.MaxDepth (too_deep; reading stops there, so nothing after
//     that point is reported);
//  3. "version" is missing or not SchemaVersion (unsupported_version),
//     checked before any other field so that a newer document reports its
//     version rather than its new fields;
//  4. in document order: a key the schema does not define (unknown_field,
//     matched exactly, so "From" is unknown), a duplicate key or a null
//     where the schema allows none (malformed_json);
//  5. a value of the wrong type (malformed_json);
//  6. a required key is absent (missing_field);
//  7. Validate.
//
// Time and memory are linear in len(data): steps 1 to 4 read the document
// once as tokens, and only a document that passes them is decoded into a
// Job.
//
// Decode returns a valid message ID in its canonical form, without angle
// brackets, because the worker keys deduplication on it and the sender adds
// the brackets itself: "<a@b>" and "a@b" are the same job. It does not
// otherwise Normalize: an empty priority stays empty. When only Validate
// fails, the decoded job is returned with the error so the caller can log
// its message ID; otherwise the Job is zero.
func Decode(data []byte, limits Limits) (Job, error) {
	return decode(data, limits, unmarshalJob)
}

// decode is Decode with the second pass injected, so that a test can prove
// a document rejected by the scanner never reaches encoding/json.
func decode(data []byte, limits Limits, unmarshal func([]byte, *Job) error) (Job, error) {
	limits = limits.WithDefaults()
	if len(data) > limits.MaxMessageBytes {
		return Job{}, invalid(ReasonOversizeMessage, "", "%d bytes, limit %d", len(data), limits.MaxMessageBytes)
	}
	s := scanner{dec: json.NewDecoder(bytes.NewReader(data)), maxDepth: limits.MaxDepth}
	s.dec.UseNumber()
	if err := s.document(); err != nil {
		if errors.Is(err, errTooDeep) {
			return Job{}, invalid(ReasonTooDeep, s.render(""), "objects and arrays nest deeper than %d", limits.MaxDepth)
		}
		return Job{}, invalid(ReasonMalformedJSON, "", "%v", err)
	}
	if err := checkVersion(s.version, s.hasVersion); err != nil {
		return Job{}, err
	}
	if s.problem != nil {
		return Job{}, s.problem
	}
	if s.typeProblem != nil {
		return Job{}, s.typeProblem
	}
	var j Job
	if err := unmarshal(data, &j); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return Job{}, invalid(ReasonMalformedJSON, te.Field, "%s is not %s", te.Value, te.Type)
		}
		return Job{}, invalid(ReasonMalformedJSON, "", "%v", err)
	}
	if s.missing != "" {
		return Job{}, invalid(ReasonMissingField, s.missing, "required key is absent")
	}
	err := j.Validate(limits)
	if validateMessageID(j.MessageID) == nil {
		// An invalid ID ("<>", "<a@b") is left as written, for the log.
		j.MessageID = trimAngle(j.MessageID)
	}
	if err != nil {
		return j, err
	}
	return j, nil
}

// unmarshalJob is the second pass of Decode: the document has passed the
// scanner, so it is one object of bounded depth whose keys are all known.
func unmarshalJob(data []byte, j *Job) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(j)
}

func checkVersion(tok json.Token, present bool) error {
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

// scanner walks a document token by token before it is decoded, to find
// what encoding/json does not report: the version ahead of everything else,
// keys that differ from the schema only in case (encoding/json matches
// them), duplicate keys (encoding/json keeps the last), nulls (encoding/json
// reads them as zero values), absent required keys and nesting deeper than
// the limit. It checks syntax and trailing data too; types are left to the
// decoder.
//
// A hostile document must cost no more than its size, so the scanner keeps
// the path of the current value as a stack of segments and renders it only
// when it notes a problem, and it reuses one duplicate-key set per depth.
type scanner struct {
	dec         *json.Decoder
	maxDepth    int
	path        []segment             // from the document down to the current value
	seen        []map[string]struct{} // duplicate-key sets, reused per depth
	version     json.Token
	hasVersion  bool
	problem     *ValidationError // first structural problem in document order
	typeProblem *ValidationError // first value of the wrong kind in document order
	missing     string           // first absent required key
}

// segment is one step of a path: an object key, or an array index when
// index >= 0.
type segment struct {
	key   string
	index int
}

// maxReusedKeys bounds the duplicate-key set kept for reuse: clearing a set
// costs its capacity, so a large one is dropped rather than cleared for
// every small object after it.
const maxReusedKeys = 64

func (s *scanner) document() error {
	tok, err := s.dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("not a JSON object")
	}
	if err := s.object(jobType); err != nil {
		return err
	}
	switch _, err := s.dec.Token(); {
	case err == io.EOF:
		return nil
	case err != nil:
		return err
	default:
		return errors.New("trailing data after the object")
	}
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
		b.WriteString(truncate(seg.key))
	}
	if child != "" {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(child)
	}
	return b.String()
}

// note records a problem at the current path unless an earlier one is
// recorded.
func (s *scanner) note(reason Reason, detail string) {
	if s.problem == nil {
		s.problem = &ValidationError{Reason: reason, Field: s.render(""), Detail: detail}
	}
}

// rest reads the remainder of the value that starts with tok, which the
// schema says has type t (nil: unknown).
func (s *scanner) rest(tok json.Token, t reflect.Type) error {
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && tok != nil && s.typeProblem == nil && !kindFits(tok, t) {
		s.typeProblem = &ValidationError{Reason: ReasonMalformedJSON, Field: s.render(""),
			Detail: fmt.Sprintf("%s is not %s", jsonKind(tok), t)}
		t = nil // what is inside the value has no schema type
	}
	switch tok := tok.(type) {
	case json.Delim:
		// The document object is depth 1, so this value is at len(path)+1.
		if len(s.path)+1 > s.maxDepth {
			return errTooDeep
		}
		if tok == '{' {
			return s.object(t)
		}
		return s.array(t)
	case nil:
		if t != nil && t != bytesType {
			s.note(ReasonMalformedJSON, "null is not allowed")
		}
	}
	return nil
}

// kindFits reports whether a value that starts with tok may decode into t,
// looking only at the kind of JSON value. It answers false only for values
// encoding/json certainly rejects, so that the scanner can report them
// without the second pass: a hostile record of a million numbers where
// strings belong would otherwise cost an UnmarshalTypeError each. What it
// lets through (base64, time syntax, numbers in a byte array) the second
// pass still checks.
func kindFits(tok json.Token, t reflect.Type) bool {
	var want string
	switch {
	case t == bytesType:
		_, isString := tok.(string)
		return isString || tok == json.Delim('[')
	case t == timeType:
		want = "string"
	case t.Kind() == reflect.String:
		want = "string"
	case t.Kind() == reflect.Slice:
		want = "["
	case t.Kind() == reflect.Map, t.Kind() == reflect.Struct:
		want = "{"
	default:
		return true
	}
	switch tok := tok.(type) {
	case string:
		return want == "string"
	case json.Delim:
		return want == string(rune(tok))
	default: // json.Number, bool
		return false
	}
}

// jsonKind names the kind of JSON value that starts with tok, as
// encoding/json's UnmarshalTypeError does.
func jsonKind(tok json.Token) string {
	switch tok := tok.(type) {
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "bool"
	case json.Delim:
		if tok == '{' {
			return "object"
		}
		return "array"
	}
	return "null"
}

// object reads the members of an object whose '{' has been read.
func (s *scanner) object(t reflect.Type) error {
	info := schemaObjects()[t]
	isMap := t != nil && t.Kind() == reflect.Map
	depth := len(s.path)
	seen := s.keySet(depth)
	s.path = append(s.path, segment{index: -1})
	for s.dec.More() {
		tok, err := s.dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		s.path[depth].key = key
		if _, dup := seen[key]; dup {
			s.note(ReasonMalformedJSON, "duplicate key")
		}
		seen[key] = struct{}{}
		var ft reflect.Type
		switch {
		case info != nil:
			f, ok := info.byName[key]
			if !ok && s.problem == nil {
				s.note(ReasonUnknownField, fmt.Sprintf("not in schema version %d", SchemaVersion))
			}
			ft = f.typ
		case isMap:
			ft = t.Elem()
		}
		tok, err = s.dec.Token()
		if err != nil {
			return err
		}
		if t == jobType && key == "version" {
			s.version, s.hasVersion = tok, true
		}
		if err := s.rest(tok, ft); err != nil {
			return err
		}
	}
	if _, err := s.dec.Token(); err != nil { // '}'
		return err
	}
	s.path = s.path[:depth]
	if info != nil && s.missing == "" {
		for _, f := range info.fields {
			if _, ok := seen[f.name]; f.required && !ok {
				s.missing = s.render(f.name)
				break
			}
		}
	}
	if len(seen) > maxReusedKeys {
		s.seen[depth] = nil
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

// array reads the elements of an array whose '[' has been read.
func (s *scanner) array(t reflect.Type) error {
	var elem reflect.Type
	if t != nil && t.Kind() == reflect.Slice && t != bytesType {
		elem = t.Elem()
	}
	depth := len(s.path)
	s.path = append(s.path, segment{})
	for i := 0; s.dec.More(); i++ {
		s.path[depth].index = i
		tok, err := s.dec.Token()
		if err != nil {
			return err
		}
		if err := s.rest(tok, elem); err != nil {
			return err
		}
	}
	s.path = s.path[:depth]
	_, err := s.dec.Token() // ']'
	return err
}

var (
	jobType   = reflect.TypeFor[Job]()
	bytesType = reflect.TypeFor[[]byte]()
	timeType  = reflect.TypeFor[time.Time]()
)

// schemaField is one JSON field of an object in the job document.
type schemaField struct {
	name     string
	typ      reflect.Type
	required bool // no omitempty: the encoder always writes it
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
			sf := schemaField{name: name, typ: f.Type, required: !strings.Contains(opts, "omitempty")}
			o.fields = append(o.fields, sf)
			o.byName[name] = sf
		}
		m[t] = o
	}
	return m
})
