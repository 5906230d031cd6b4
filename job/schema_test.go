package job

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

type schemaNode struct {
	Properties    map[string]schemaNode `json:"properties"`
	Required      []string              `json:"required"`
	RawAdditional json.RawMessage       `json:"additionalProperties"`
	Defs          map[string]schemaNode `json:"$defs"`
}

func parseSchema(t *testing.T) schemaNode {
	t.Helper()
	var root schemaNode
	if err := json.Unmarshal(SchemaJSON, &root); err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
	return root
}

// TestSchemaMatchesGoTypes keeps job.v1.schema.json in step with the Go
// types: the same properties, no others allowed, the same required keys.
func TestSchemaMatchesGoTypes(t *testing.T) {
	root := parseSchema(t)
	objects := map[string]struct {
		typ  reflect.Type
		node schemaNode
	}{
		"Job":         {jobType, root},
		"Attachment":  {reflect.TypeFor[Attachment](), root.Defs["attachment"]},
		"TemplateRef": {reflect.TypeFor[TemplateRef](), root.Defs["template"]},
	}
	if root.Properties["attachments"].Properties != nil || root.Defs["attachment"].Properties == nil {
		t.Fatal("schema layout changed: update this test")
	}
	for name, o := range objects {
		info := schemaObjects()[o.typ]
		var goFields, goRequired []string
		for _, f := range info.fields {
			goFields = append(goFields, f.name)
			if f.required {
				goRequired = append(goRequired, f.name)
			}
		}
		var schemaFields []string
		for k := range o.node.Properties {
			schemaFields = append(schemaFields, k)
		}
		slices.Sort(goFields)
		slices.Sort(schemaFields)
		if !slices.Equal(goFields, schemaFields) {
			t.Errorf("%s: Go fields %q, schema properties %q", name, goFields, schemaFields)
		}
		required := slices.Clone(o.node.Required)
		slices.Sort(goRequired)
		slices.Sort(required)
		if !slices.Equal(goRequired, required) {
			t.Errorf("%s: Go fields without omitempty %q, schema required %q", name, goRequired, required)
		}
		if string(o.node.RawAdditional) != "false" {
			t.Errorf("%s: additionalProperties is %s, want false", name, o.node.RawAdditional)
		}
	}
	if !bytes.Contains(SchemaJSON, []byte(`"https://json-schema.org/draft/2020-12/schema"`)) {
		t.Error("schema does not declare draft 2020-12")
	}
}

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.AssertContent()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(SchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("job.v1.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("job.v1.schema.json")
	if err != nil {
		t.Fatalf("schema does not compile: %v", err)
	}
	return sch
}

// TestSchemaAgreesWithDecode checks documents against the compiled schema:
// what Decode accepts the schema accepts, and what Decode rejects for a
// reason the schema can express the schema rejects too.
func TestSchemaAgreesWithDecode(t *testing.T) {
	sch := compileSchema(t)
	notAfter := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	full := validJob()
	full.Normalize()
	full.Cc, full.Bcc, full.ReplyTo = []string{"c@example.test"}, []string{"d@example.test"}, []string{"r@example.com"}
	full.HTML = "<p>x</p>"
	full.Headers = map[string]string{"X-A": "1", "List-Unsubscribe": "<mailto:u@example.com>"}
	full.Attachments = []Attachment{{Filename: "a.pdf", ContentType: "application/pdf", Content: []byte("%PDF-1.7")}, {Filename: "empty"}}
	full.Tenant = "acme"
	full.Template = &TemplateRef{Name: "w", Version: "1"}
	full.NotAfter = &notAfter
	full.Metadata = map[string]string{"k": "v"}
	full.Unsubscribe = true
	full.Headers = map[string]string{"X-A": "1", "List-Id": "<news.example.com>"}
	fullDoc, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		data string
	}{
		{"minimal", validDoc},
		{"full, as Publisher writes it", string(fullDoc)},
		{"brackets", strings.Replace(validDoc, `"a.1@postline.test"`, `"<a.1@postline.test>"`, 1)},
		{"missing version", strings.Replace(validDoc, `"version":1,`, "", 1)},
		{"version two", strings.Replace(validDoc, `"version":1`, `"version":2`, 1)},
		{"unknown", doc(`,"sender":"x"`)},
		{"unknown by case", doc(`,"Tenant":"x"`)},
		{"unknown nested", doc(`,"template":{"name":"a","lang":"en"}`)},
		{"null subject", strings.Replace(validDoc, `"subject":"Hi"`, `"subject":null`, 1)},
		{"null list", doc(`,"cc":null`)},
		{"null content", doc(`,"attachments":[{"filename":"a","content":null}]`)},
		{"wrong type", strings.Replace(validDoc, `"subject":"Hi"`, `"subject":5`, 1)},
		{"bad base64", doc(`,"attachments":[{"filename":"a","content":"!!"}]`)},
		{"bad time", doc(`,"not_after":"tomorrow"`)},
		{"missing subject", strings.Replace(validDoc, `"subject":"Hi",`, "", 1)},
		{"missing content", doc(`,"attachments":[{"filename":"a"}]`)},
		{"bad message id", strings.Replace(validDoc, `"a.1@postline.test"`, `"a b@c"`, 1)},
		{"unbalanced message id", strings.Replace(validDoc, `"a.1@postline.test"`, `"<a@b"`, 1)},
		{"subject CRLF", strings.Replace(validDoc, `"Hi"`, `"Hi\r\nBcc: x@y.z"`, 1)},
		{"subject NUL", strings.Replace(validDoc, `"Hi"`, `"Hi\u0000"`, 1)},
		{"header value LF", doc(`,"headers":{"X-A":"1\n"}`)},
		{"header name colon", doc(`,"headers":{"X-A:":"1"}`)},
		{"filename slash", doc(`,"attachments":[{"filename":"a/b","content":""}]`)},
		{"bad priority", doc(`,"priority":"high"`)},
		{"empty template name", doc(`,"template":{"name":""}`)},
		{"metadata LF", doc(`,"metadata":{"k":"\n"}`)},
		{"unsubscribe", doc(`,"unsubscribe":true`)},
		{"unsubscribe not a boolean", doc(`,"unsubscribe":"yes"`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			schemaErr := sch.Validate(inst)
			_, decodeErr := Decode([]byte(tt.data), Limits{})
			if (schemaErr == nil) != (decodeErr == nil) {
				t.Fatalf("schema says %v, Decode says %v", schemaErr, decodeErr)
			}
		})
	}
}
