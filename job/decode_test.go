package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// validDoc is a minimal valid document.
const validDoc = `{"version":1,"message_id":"a.1@postline.test","from":"noreply@example.com","to":["ada@example.test"],"subject":"Hi","text":"Hello"}`

// doc returns validDoc with its closing brace replaced by extra.
func doc(extra string) string {
	return strings.TrimSuffix(validDoc, "}") + extra + "}"
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name   string
		data   string
		limits Limits
		reason Reason // empty: valid
		field  string
	}{
		{name: "minimal", data: validDoc},
		{name: "whitespace around", data: " \n" + validDoc + "\n\t "},
		{name: "all fields", data: doc(`,"cc":["b@example.test"],"bcc":["c@example.test"],"reply_to":["r@example.com"],"html":"<p>x</p>","headers":{"X-A":"1"},"attachments":[{"filename":"a.txt","content_type":"text/plain","content":"aGk="},{"filename":"e","content":null}],"priority":"urgent","tenant":"acme","template":{"name":"w","version":"2"},"not_after":"2030-01-01T00:00:00Z","metadata":{"k":"v"}`)},
		{name: "unsubscribe true", data: doc(`,"unsubscribe":true`)},
		{name: "unsubscribe false", data: doc(`,"unsubscribe":false`)},
		{name: "unsubscribe null", data: doc(`,"unsubscribe":null`), reason: ReasonMalformedJSON, field: "unsubscribe"},
		{name: "unsubscribe as a string", data: doc(`,"unsubscribe":"true"`), reason: ReasonMalformedJSON, field: "unsubscribe"},
		{name: "unsubscribe as a number", data: doc(`,"unsubscribe":1`), reason: ReasonMalformedJSON, field: "unsubscribe"},
		{name: "unsubscribe twice", data: doc(`,"unsubscribe":true,"unsubscribe":false`), reason: ReasonMalformedJSON, field: "unsubscribe"},
		{name: "unsubscribe with own header", data: doc(`,"unsubscribe":true,"headers":{"List-Unsubscribe":"<mailto:u@example.com>"}`),
			reason: ReasonHeaderNotAllowed, field: "headers.List-Unsubscribe"},
		{name: "message id in brackets", data: strings.Replace(validDoc, `"a.1@postline.test"`, `"<a.1@postline.test>"`, 1)},

		{name: "oversize", data: validDoc, limits: Limits{MaxMessageBytes: 50}, reason: ReasonOversizeMessage},
		{name: "empty", data: "", reason: ReasonMalformedJSON},
		{name: "array", data: "[" + validDoc + "]", reason: ReasonMalformedJSON},
		{name: "null", data: "null", reason: ReasonMalformedJSON},
		{name: "syntax error", data: `{"version":1,}`, reason: ReasonMalformedJSON},
		{name: "truncated", data: validDoc[:len(validDoc)-5], reason: ReasonMalformedJSON},
		{name: "trailing object", data: validDoc + validDoc, reason: ReasonMalformedJSON},
		{name: "trailing garbage", data: validDoc + "x", reason: ReasonMalformedJSON},
		{name: "syntax error beats version", data: `{"version":2,"x":}`, reason: ReasonMalformedJSON},

		{name: "missing version", data: strings.Replace(validDoc, `"version":1,`, "", 1), reason: ReasonUnsupportedVersion, field: "version"},
		{name: "version zero", data: strings.Replace(validDoc, `"version":1`, `"version":0`, 1), reason: ReasonUnsupportedVersion, field: "version"},
		{name: "version two", data: strings.Replace(validDoc, `"version":1`, `"version":2`, 1), reason: ReasonUnsupportedVersion, field: "version"},
		{name: "version string", data: strings.Replace(validDoc, `"version":1`, `"version":"1"`, 1), reason: ReasonUnsupportedVersion, field: "version"},
		{name: "version float", data: strings.Replace(validDoc, `"version":1`, `"version":1.0`, 1), reason: ReasonUnsupportedVersion, field: "version"},
		{name: "version null", data: strings.Replace(validDoc, `"version":1`, `"version":null`, 1), reason: ReasonUnsupportedVersion, field: "version"},
		{name: "v2 with new fields says version", data: `{"recipients":[{"to":"a@b.c"}],"version":2}`, reason: ReasonUnsupportedVersion, field: "version"},
		{name: "escaped keys are read as encoding/json reads them", data: `{"\u0076ersion":1,"message_id":"a@b","fr\u006fm":"a@b.c","to":["d@e.f"],"subject":"","text":"x"}`},
		{name: "escaped duplicate key", data: doc(`,"\u0066rom":"evil@example.com"`), reason: ReasonMalformedJSON, field: "from"},
		{name: "content as a byte array", data: doc(`,"attachments":[{"filename":"a","content":[104,105]}]`)},
		{name: "byte out of range", data: doc(`,"attachments":[{"filename":"a","content":[256]}]`), reason: ReasonMalformedJSON, field: "attachments[0].content[0]"},
		{name: "a type error beats an earlier missing key", data: doc(`,"attachments":[{"filename":"a"},{"filename":"b","content":"!!"}]`), reason: ReasonMalformedJSON, field: "attachments[1].content"},
		{name: "number syntax", data: doc(`,"metadata":{"k":01}`), reason: ReasonMalformedJSON},
		{name: "control character in string", data: doc(`,"tenant":"a` + "\x01" + `"`), reason: ReasonMalformedJSON},
		{name: "bad escape", data: doc(`,"tenant":"\x"`), reason: ReasonMalformedJSON},
		{name: "version last still read", data: `{"message_id":"a@b","from":"a@b.c","to":["d@e.f"],"subject":"","text":"x","version":1}`},

		{name: "unknown field", data: doc(`,"sender":"x"`), reason: ReasonUnknownField, field: "sender"},
		{name: "unknown field differs in case", data: doc(`,"Tenant":"x"`), reason: ReasonUnknownField, field: "Tenant"},
		{name: "unknown nested field", data: doc(`,"attachments":[{"filename":"a","content":"","size":1}]`), reason: ReasonUnknownField, field: "attachments[0].size"},
		{name: "unknown template field", data: doc(`,"template":{"name":"a","lang":"en"}`), reason: ReasonUnknownField, field: "template.lang"},
		{name: "first structural problem in document order", data: `{"version":1,"a":1,"from":null}`, reason: ReasonUnknownField, field: "a"},
		{name: "duplicate key", data: doc(`,"from":"evil@example.com"`), reason: ReasonMalformedJSON, field: "from"},
		{name: "duplicate key differing in case", data: doc(`,"FROM":"evil@example.com"`), reason: ReasonUnknownField, field: "FROM"},
		{name: "duplicate header key", data: doc(`,"headers":{"X-A":"1","X-A":"2"}`), reason: ReasonMalformedJSON, field: "headers.X-A"},
		{name: "null subject", data: strings.Replace(validDoc, `"subject":"Hi"`, `"subject":null`, 1), reason: ReasonMalformedJSON, field: "subject"},
		{name: "null list", data: doc(`,"cc":null`), reason: ReasonMalformedJSON, field: "cc"},
		{name: "null in list", data: strings.Replace(validDoc, `["ada@example.test"]`, `[null]`, 1), reason: ReasonMalformedJSON, field: "to[0]"},
		{name: "null template", data: doc(`,"template":null`), reason: ReasonMalformedJSON, field: "template"},
		{name: "null header value", data: doc(`,"headers":{"X-A":null}`), reason: ReasonMalformedJSON, field: "headers.X-A"},

		{name: "wrong type", data: strings.Replace(validDoc, `"subject":"Hi"`, `"subject":5`, 1), reason: ReasonMalformedJSON, field: "subject"},
		{name: "to not a list", data: strings.Replace(validDoc, `["ada@example.test"]`, `"ada@example.test"`, 1), reason: ReasonMalformedJSON, field: "to"},
		{name: "bad base64", data: doc(`,"attachments":[{"filename":"a","content":"!!"}]`), reason: ReasonMalformedJSON},
		{name: "bad time", data: doc(`,"not_after":"tomorrow"`), reason: ReasonMalformedJSON},

		{name: "missing subject key", data: strings.Replace(validDoc, `"subject":"Hi",`, "", 1), reason: ReasonMissingField, field: "subject"},
		{name: "missing attachment content", data: doc(`,"attachments":[{"filename":"a"}]`), reason: ReasonMissingField, field: "attachments[0].content"},
		{name: "missing message id key", data: strings.Replace(validDoc, `"message_id":"a.1@postline.test",`, "", 1), reason: ReasonMissingField, field: "message_id"},

		{name: "validate runs", data: strings.Replace(validDoc, `"ada@example.test"`, `"ada"`, 1), reason: ReasonInvalidAddress, field: "to[0]"},
		{name: "header injection", data: strings.Replace(validDoc, `"Hi"`, `"Hi\r\nBcc: x@y.z"`, 1), reason: ReasonHeaderInjection, field: "subject"},
		{name: "limits passed to validate", data: validDoc, limits: Limits{MaxBodyBytes: 2}, reason: ReasonOversizeBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := Decode([]byte(tt.data), tt.limits)
			checkReason(t, err, tt.reason, tt.field)
			if tt.reason == "" && j.Version != SchemaVersion {
				t.Fatalf("decoded job has version %d", j.Version)
			}
		})
	}
}

func TestDecodeReturnsJobOnValidationError(t *testing.T) {
	j, err := Decode([]byte(strings.Replace(validDoc, `"text":"Hello"`, `"text":""`, 1)), Limits{})
	checkReason(t, err, ReasonMissingBody, "")
	if j.MessageID != "a.1@postline.test" {
		t.Fatalf("got message ID %q, want the decoded one for logging", j.MessageID)
	}
	j, err = Decode([]byte(`{"version":2,"message_id":"x@y"}`), Limits{})
	checkReason(t, err, ReasonUnsupportedVersion, "version")
	if !reflect.DeepEqual(j, Job{}) {
		t.Fatalf("got %+v, want the zero Job when parsing failed", j)
	}
}

// TestDecodeCanonicalMessageID is the regression test for message IDs in
// angle brackets: the worker keys its Postgres row on the decoded ID and
// the sender adds the brackets, so Decode must give the bare form whatever
// the producer wrote, and nothing else is normalised.
func TestDecodeCanonicalMessageID(t *testing.T) {
	withID := func(id string) []byte {
		quoted, err := json.Marshal(id)
		if err != nil {
			t.Fatal(err)
		}
		return []byte(strings.Replace(validDoc, `"a.1@postline.test"`, string(quoted), 1))
	}
	bare, err := Decode(withID("a.1@postline.test"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	bracketed, err := Decode(withID("<a.1@postline.test>"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if bracketed.MessageID != "a.1@postline.test" {
		t.Fatalf("Decode(<a.1@postline.test>).MessageID = %q, want the bare form", bracketed.MessageID)
	}
	if !reflect.DeepEqual(bare, bracketed) || !bytes.Equal(bare.Hash(), bracketed.Hash()) {
		t.Fatalf("the same job with and without brackets decodes differently:\n %+v\n %+v", bare, bracketed)
	}
	if bracketed.Priority != "" {
		t.Fatalf("Decode normalised the priority to %q", bracketed.Priority)
	}
	// A job that fails Validate for another reason still carries the
	// canonical ID, for the log line that reports it.
	j, err := Decode([]byte(strings.Replace(string(withID("<a@b>")), `"text":"Hello"`, `"text":""`, 1)), Limits{})
	checkReason(t, err, ReasonMissingBody, "")
	if j.MessageID != "a@b" {
		t.Fatalf("rejected job carries message ID %q, want a@b", j.MessageID)
	}

	for _, tt := range []struct {
		id     string
		reason Reason
	}{
		{"<>", ReasonInvalidMessageID},
		{"<", ReasonInvalidMessageID},
		{">", ReasonInvalidMessageID},
		{"<a@b", ReasonInvalidMessageID},
		{"a@b>", ReasonInvalidMessageID},
		{"<<a@b>>", ReasonInvalidMessageID},
		{"<a@b>>", ReasonInvalidMessageID},
		{"<a@b> ", ReasonInvalidMessageID},
		{" <a@b>", ReasonInvalidMessageID},
		{"< a@b>", ReasonInvalidMessageID},
		{"<a @b>", ReasonInvalidMessageID},
		{"a@b\t", ReasonInvalidMessageID},
		{"a@b\u00a0", ReasonInvalidMessageID},
		{"<a@b>\r\n", ReasonHeaderInjection},
		{"<a@b\n>", ReasonHeaderInjection},
		{"<a@b\x00>", ReasonHeaderInjection},
		{"", ReasonMissingField},
	} {
		j, err := Decode(withID(tt.id), Limits{})
		if err == nil {
			t.Errorf("Decode accepted message ID %q as %q", tt.id, j.MessageID)
			continue
		}
		checkReason(t, err, tt.reason, "message_id")
		if j.MessageID != tt.id {
			t.Errorf("rejected message ID %q came back as %q, want it as written", tt.id, j.MessageID)
		}
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	notAfter := time.Date(2030, 5, 6, 7, 8, 9, 10, time.UTC)
	in := validJob()
	in.Cc = []string{"c@example.test"}
	in.HTML = "<b>hi</b> & bye"
	in.Headers = map[string]string{"X-A": "1", "References": "<a@b> <c@d>"}
	in.Attachments = []Attachment{{Filename: "a.bin", ContentType: "application/octet-stream", Content: []byte{0, 1, 2, 255}}, {Filename: "empty"}}
	in.Priority = PriorityUrgent
	in.Tenant = "t"
	in.Template = &TemplateRef{Name: "n"}
	in.NotAfter = &notAfter
	in.Metadata = map[string]string{"k": "v"}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(data, Limits{})
	if err != nil {
		t.Fatalf("Decode(Marshal(job)): %v\n%s", err, data)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip changed the job:\n in  %+v\n out %+v", in, out)
	}
}

func BenchmarkDecode(b *testing.B) {
	j := validJob()
	j.Normalize()
	j.Text = strings.Repeat("Hello, this is a typical body line.\n", 50)
	j.HTML = "<p>" + j.Text + "</p>"
	j.Headers = map[string]string{"X-Campaign": "spring", "List-Unsubscribe": "<mailto:u@example.com>"}
	j.Metadata = map[string]string{"order": "42", "customer": "7"}
	data, err := json.Marshal(j)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(data, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// Invalid UTF-8 anywhere is malformed JSON, not text encoding/json would
// quietly repair with U+FFFD before it is mailed.
func TestDecodeRejectsInvalidUTF8(t *testing.T) {
	valid := `{"version":1,"message_id":"a@b.c","from":"x@y.z","to":["r@s.t"],"subject":"S","text":"T"}`
	tests := []struct {
		name, doc string
		at        string
	}{
		{"in the subject", strings.Replace(valid, `"S"`, "\"S\xff\"", 1), "at byte"},
		{"overlong encoding", strings.Replace(valid, `"T"`, "\"T\xc0\xaf\"", 1), "at byte"},
		{"in a key", strings.Replace(valid, `"subject"`, "\"subject\xfe\"", 1), "at byte"},
		{"surrogate half", strings.Replace(valid, `"T"`, "\"T\xed\xa0\x80\"", 1), "at byte"},
	}
	for _, tt := range tests {
		_, err := Decode([]byte(tt.doc), Limits{})
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Reason != ReasonMalformedJSON || !strings.Contains(ve.Detail, tt.at) {
			t.Errorf("%s: Decode = %v, want malformed_json naming the byte", tt.name, err)
		}
	}
	if _, err := Decode([]byte(strings.Replace(valid, `"S"`, `"Grüße ✉"`, 1)), Limits{}); err != nil {
		t.Errorf("valid multi-byte UTF-8 rejected: %v", err)
	}
}
