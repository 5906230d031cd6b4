package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
)

// Decode parses and validates one job document, as read from a Kafka record
// value. Every rejection is a *ValidationError, found in this order:
//
//  1. the document exceeds limits.MaxMessageBytes (oversize_message);
//  2. it is not one well-formed JSON object, has trailing data
//     (malformed_json);
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
// Decode does not Normalize: the job is returned as the producer wrote it.
// When only Validate fails, the decoded job is returned with the error so
// the caller can log its message ID; otherwise the Job is zero.
func Decode(data []byte, limits Limits) (Job, error) {
	limits = limits.WithDefaults()
	if len(data) > limits.MaxMessageBytes {
		return Job{}, invalid(ReasonOversizeMessage, "", "%d bytes, limit %d", len(data), limits.MaxMessageBytes)
	}
	s := scanner{dec: json.NewDecoder(bytes.NewReader(data))}
	s.dec.UseNumber()
	if err := s.document(); err != nil {
		return Job{}, invalid(ReasonMalformedJSON, "", "%v", err)
	}
	if err := checkVersion(s.version, s.hasVersion); err != nil {
		return Job{}, err
	}
	if s.problem != nil {
		return Job{}, s.problem
	}
	var j Job
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return Job{}, invalid(ReasonMalformedJSON, te.Field, "%s is not %s", te.Value, te.Type)
		}
		return Job{}, invalid(ReasonMalformedJSON, "", "%v", err)
	}
	if s.missing != "" {
		return Job{}, invalid(ReasonMissingField, s.missing, "required key is absent")
	}
	if err := j.Validate(limits); err != nil {
		return j, err
	}
	return j, nil
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

// scanner walks a document token by token before it is decoded, to find
// what encoding/json does not report: the version ahead of everything else,
// keys that differ from the schema only in case (encoding/json matches
// them), duplicate keys (encoding/json keeps the last), nulls (encoding/json
// reads them as zero values) and absent required keys. It checks syntax and
// trailing data too; types are left to the decoder.
type scanner struct {
	dec        *json.Decoder
	version    json.Token
	hasVersion bool
	problem    *ValidationError // first structural problem in document order
	missing    string           // first absent required key
}

func (s *scanner) document() error {
	tok, err := s.dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("not a JSON object")
	}
	if err := s.object(jobType, ""); err != nil {
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

func (s *scanner) note(reason Reason, field, detail string) {
	if s.problem == nil {
		s.problem = &ValidationError{Reason: reason, Field: field, Detail: detail}
	}
}

// value reads one value that the schema says has type t (nil: unknown).
func (s *scanner) value(t reflect.Type, path string) error {
	tok, err := s.dec.Token()
	if err != nil {
		return err
	}
	return s.rest(tok, t, path)
}

// rest reads the remainder of the value that starts with tok.
func (s *scanner) rest(tok json.Token, t reflect.Type, path string) error {
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch tok := tok.(type) {
	case json.Delim:
		if tok == '{' {
			return s.object(t, path)
		}
		return s.array(t, path)
	case nil:
		if t != nil && t != bytesType {
			s.note(ReasonMalformedJSON, path, "null is not allowed")
		}
	}
	return nil
}

func (s *scanner) object(t reflect.Type, path string) error {
	info := schemaObjects()[t]
	isMap := t != nil && t.Kind() == reflect.Map
	seen := make(map[string]bool)
	for s.dec.More() {
		tok, err := s.dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		child := key
		if path != "" {
			child = path + "." + key
		}
		if seen[key] {
			s.note(ReasonMalformedJSON, child, "duplicate key")
		}
		seen[key] = true
		var ft reflect.Type
		switch {
		case info != nil:
			f, ok := info.byName[key]
			if !ok {
				s.note(ReasonUnknownField, child, fmt.Sprintf("not in schema version %d", SchemaVersion))
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
		if err := s.rest(tok, ft, child); err != nil {
			return err
		}
	}
	if _, err := s.dec.Token(); err != nil { // '}'
		return err
	}
	if info != nil && s.missing == "" {
		for _, f := range info.fields {
			if f.required && !seen[f.name] {
				s.missing = strings.TrimPrefix(path+"."+f.name, ".")
				break
			}
		}
	}
	return nil
}

func (s *scanner) array(t reflect.Type, path string) error {
	var elem reflect.Type
	if t != nil && t.Kind() == reflect.Slice && t != bytesType {
		elem = t.Elem()
	}
	for i := 0; s.dec.More(); i++ {
		if err := s.value(elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	_, err := s.dec.Token() // ']'
	return err
}

var (
	jobType   = reflect.TypeFor[Job]()
	bytesType = reflect.TypeFor[[]byte]()
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
