package job

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"
)

// referenceDecode is Decode as it was before it decoded in one pass: the
// scanner checks the document without filling a Job, then encoding/json
// decodes it. The tests hold Decode to it, value for value.
func referenceDecode(data []byte, limits Limits) (Job, error) {
	limits = limits.WithDefaults()
	if len(data) > limits.MaxMessageBytes {
		return Job{}, invalid(ReasonOversizeMessage, "", "%d bytes, limit %d", len(data), limits.MaxMessageBytes)
	}
	if !utf8.Valid(data) {
		return Job{}, invalid(ReasonMalformedJSON, "", "not valid UTF-8 at byte %d", firstInvalidUTF8(data))
	}
	s := scanner{data: data, maxDepth: limits.MaxDepth}
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
	if s.missing != "" {
		return Job{}, invalid(ReasonMissingField, s.missing, "required key is absent")
	}
	var j Job
	if err := unmarshalJob(data, &j); err != nil {
		return Job{}, fmt.Errorf("encoding/json rejects what the scanner accepts: %w", err)
	}
	err := j.Validate(limits)
	if validateMessageID(j.MessageID) == nil {
		j.MessageID = trimAngle(j.MessageID)
	}
	return j, err
}

// unmarshalJob decodes data into j with encoding/json as the worker once
// did: unknown fields refused, numbers in template data kept as
// json.Number.
func unmarshalJob(data []byte, j *Job) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	return dec.Decode(j)
}

// checkDecodeMatchesReference fails t unless Decode and referenceDecode
// agree on data: the same error, and the same Job down to nil versus empty
// slices and maps.
func checkDecodeMatchesReference(t *testing.T, data []byte) {
	t.Helper()
	got, gotErr := Decode(data, Limits{})
	want, wantErr := referenceDecode(data, Limits{})
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("Decode says %v, the reference %v: %q", gotErr, wantErr, data)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode and the reference differ on %q:\n got  %#v\n want %#v", data, got, want)
	}
}

func TestDecodeMatchesEncodingJSON(t *testing.T) {
	for _, d := range []string{
		validDoc,
		doc(`,"cc":[],"bcc":[],"reply_to":[],"headers":{},"metadata":{},"attachments":[]`),
		doc(`,"text":"line 1\nline 2\r\n\t\"quoted\" \\ \/ \b\f \u00e9 \u2028 \ud83d\ude00 \ud800 \udc00x \ud800\u0041"`),
		doc(`,"html":"\u003cp\u003eA \u0026 B\u003c/p\u003e"`),
		doc(`,"attachments":[{"filename":"a","content":""},{"filename":"b","content":null},{"filename":"c","content":[]},{"filename":"d","content":[1,null,255]},{"filename":"e","content_type":"text/plain","content":"aGk\u003d"}]`),
		doc(`,"not_after":"2030-01-01T00:00:00+02:00","priority":"bulk","tenant":"t\u0041"`),
		doc(`,"not_after":"2030-01-01T00:00:00Z"`),
		doc(`,"headers":{"X-A":"1","X-\u0042":"2"},"metadata":{"k":"v","\u006b2":"w"}`),
		doc(`,"template":{"name":"w","version":"audit","locale":"fr-CA","data":{}}`),
		noBodyDoc(`,"template":{"name":"order","data":{"n":12345678901234567890123,"f":-1.5e-3,"z":null,"t":true,"s":"\u00e9","a":[{"b":{}},[],false,[1,[2]]]}}`),
		doc(`,"to":["a@b.c","<bad"]`),
		doc(`,"unsubscribe":true`),
		doc(`,"unsubscribe":false,"priority":"bulk"`),
		doc(`,"unsubscribe":null`),
		doc(`,"unsubscribe":"true"`),
	} {
		checkDecodeMatchesReference(t, []byte(d))
	}
}

// referenceHash is Hash as it was before it wrote the canonical encoding
// by hand: json.Marshal of the normalised job.
func referenceHash(j Job) []byte {
	j.Normalize()
	sum := sha256.Sum256(marshalCanonical(j))
	return sum[:]
}

// checkHashMatchesReference fails t unless Hash and referenceHash agree on j.
func checkHashMatchesReference(t *testing.T, j Job) {
	t.Helper()
	if got, want := j.Hash(), referenceHash(j); !bytes.Equal(got, want) {
		var buf []byte
		n := j
		n.Normalize()
		buf, _ = appendCanonical(buf, &n)
		t.Fatalf("Hash differs from json.Marshal's:\n ours    %s\n marshal %s", buf, marshalCanonical(n))
	}
}

func TestHashMatchesJSONMarshal(t *testing.T) {
	nanos := time.Date(2030, 1, 2, 3, 4, 5, 600700800, time.FixedZone("X", -3*3600-1800))
	whole := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ancient := time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC)
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name   string
		mutate func(*Job)
	}{
		{"valid job", func(*Job) {}},
		{"zero job", func(j *Job) { *j = Job{} }},
		{"escapes", func(j *Job) {
			j.Subject = "<b> & \"q\" \\ / \b\f\n\r\t \x00\x01\x1f\x7f é \u2028\u2029 😀"
			j.Text = "bad \xff\xfe utf-8 \xe2\x82 cut"
			j.HTML = "<p>a&amp;b</p>"
		}},
		{"every field", func(j *Job) {
			j.Cc, j.Bcc, j.ReplyTo = []string{"c@d.e", ""}, []string{"b@c.d"}, []string{"r@s.t"}
			j.Headers = map[string]string{"X-B": "2", "X-A": "<1>", "List-Id": "l"}
			j.Attachments = []Attachment{{Filename: "a", ContentType: "text/plain", Content: []byte("hi\x00")},
				{Filename: "b", Content: nil}, {Filename: "c", Content: []byte{}}}
			j.Priority, j.Tenant = PriorityUrgent, "acme"
			j.Template = &TemplateRef{Name: "w", Version: "3", Locale: "fr-CA"}
			j.NotAfter = &nanos
			j.Metadata = map[string]string{"z": "1", "a": "&"}
			j.Unsubscribe = true
		}},
		{"whole-second deadline", func(j *Job) { j.NotAfter = &whole }},
		{"year before 0", func(j *Job) { j.NotAfter = &ancient }},
		{"year after 9999", func(j *Job) { j.NotAfter = &far }},
		{"empty template", func(j *Job) { j.Template = &TemplateRef{} }},
		{"template data", func(j *Job) {
			j.Template = &TemplateRef{Name: "w", Data: map[string]any{
				"n": json.Number("12345678901234567890123"), "f": json.Number("-1.5e-3"), "e": json.Number(""),
				"z": nil, "t": true, "s": "<é>", "nested": map[string]any{"b": []any{}, "a": map[string]any{}},
				"list":   []any{json.Number("1"), "x", false, nil, []any{map[string]any{"k": "v"}}},
				"nilmap": map[string]any(nil), "nillist": []any(nil),
			}}
		}},
		{"template data of Go types", func(j *Job) {
			j.Template = &TemplateRef{Name: "w", Data: map[string]any{"f": 1.5, "i": 3, "m": map[string]string{"a": "b"}}}
		}},
		{"invalid json.Number", func(j *Job) {
			j.Template = &TemplateRef{Name: "w", Data: map[string]any{"n": json.Number("1x")}}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := validJob()
			tt.mutate(&j)
			checkHashMatchesReference(t, j)
		})
	}
	for _, n := range []string{"0", "-0", "1.5", "1e5", "1E+5", "-1.0e-10", "01", "1.", ".1", "-", "1e", "+1", "1x", " 1"} {
		j := validJob()
		j.Template = &TemplateRef{Name: "w", Data: map[string]any{"n": json.Number(n)}}
		checkHashMatchesReference(t, j)
	}
}

// FuzzHash checks Hash against json.Marshal for jobs that Decode never
// produces: any bytes in the strings, Go-typed template data aside.
func FuzzHash(f *testing.F) {
	f.Add("a@b", "<x> & y", "\xff\u2028", "k", "v", []byte{0, 1}, "1.5e3", int64(0))
	f.Add("", "", "", "", "", []byte(nil), "", int64(1<<62))
	f.Fuzz(func(t *testing.T, id, subject, text, key, value string, content []byte, number string, unix int64) {
		deadline := time.Unix(unix%(1<<40), unix%1e9).In(time.FixedZone("F", int(unix%50_000)))
		j := Job{MessageID: id, From: key, To: []string{value}, Subject: subject, Text: text, HTML: value,
			Headers:     map[string]string{key: value, value: key},
			Attachments: []Attachment{{Filename: key, ContentType: value, Content: content}},
			Priority:    Priority(value), Tenant: subject, NotAfter: &deadline,
			Template: &TemplateRef{Name: key, Version: value, Locale: text,
				Data: map[string]any{key: json.Number(number), value: []any{text, map[string]any{subject: nil}}}},
			Metadata: map[string]string{text: subject}}
		checkHashMatchesReference(t, j)
	})
}
