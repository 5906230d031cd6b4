package render

import (
	"testing"
)

// TestFastSchemaNeverAcceptsWhatTheValidatorRefuses checks the fast form
// against the validator on schemas it takes and data around their edges.
func TestFastSchemaNeverAcceptsWhatTheValidatorRefuses(t *testing.T) {
	schemas := []struct {
		doc  string
		fast bool
	}{
		{`{"type": "object", "required": ["name", "order", "items", "total"],
			"properties": {"name": {"type": "string"}, "order": {"type": "string"}, "total": {"type": "string"},
			"items": {"type": "array", "items": {"type": "object", "required": ["sku", "title", "qty", "price"]}}}}`, true},
		{`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": ["object", "null"],
			"properties": {"n": {"type": ["number", "boolean"]}, "l": {"items": true}, "z": {"type": "null"}}}`, true},
		{`{"$schema": "http://json-schema.org/draft-07/schema#", "properties": {"a": {"items": {"type": "string"}}}}`, true},
		{`{"type": "object", "properties": {"n": {"type": "integer"}}}`, false},
		{`{"type": "object", "additionalProperties": false}`, false},
		{`{"properties": {"s": {"type": "string", "maxLength": 3}}}`, false},
		{`{"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "string"}]}`, false},
		{`{"properties": {"a": false}}`, false},
	}
	datas := []string{
		`{"name": "n", "order": "o", "total": "t", "items": [{"sku": "s", "title": "t", "qty": 1, "price": "p"}]}`,
		`{"name": "n", "order": "o", "total": "t", "items": [{"sku": "s", "title": "t", "qty": 1}]}`,
		`{"name": 1, "order": "o", "total": "t", "items": []}`,
		`{"name": "n", "order": "o", "total": "t", "items": {}}`,
		`{"name": "n", "order": "o", "items": []}`,
		`{"n": 1.5, "l": [1, "x", null], "z": null, "a": ["x", "y"], "s": "abcd"}`,
		`{"n": true, "l": "not a list", "z": 0, "a": ["x", 2], "s": "ab"}`,
		`{"n": "1", "l": [], "a": "str", "s": 5}`,
		`{"n": 2, "a": [], "s": "ééé"}`,
		`{}`,
	}
	for _, sc := range schemas {
		c, err := Compile(Version{Template: "s", Number: 1, Subject: "s", Text: "t", Schema: []byte(sc.doc)}, nil)
		if err != nil {
			t.Fatalf("%s: %v", sc.doc, err)
		}
		if (c.fastSchema != nil) != sc.fast {
			t.Fatalf("%s: fast form %v, want %v", sc.doc, c.fastSchema != nil, sc.fast)
		}
		if c.fastSchema == nil {
			continue
		}
		accepted := 0
		for _, doc := range datas {
			data := decodeData(t, doc)
			if !c.fastSchema.accepts(map[string]any(data)) {
				continue
			}
			accepted++
			if err := c.schema.Validate(map[string]any(data)); err != nil {
				t.Errorf("%s: fast form accepts %s, the validator refuses it: %v", sc.doc, doc, err)
			}
		}
		if accepted == 0 {
			t.Errorf("%s: fast form accepts nothing", sc.doc)
		}
	}
}
