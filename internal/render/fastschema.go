package render

import (
	"encoding/json"
	"math"
)

// fastSchema accepts, without the validator, data that a schema made only
// of "type", "required", "properties" and "items" (one schema for every
// element) accepts: what data schemas of templates mostly are. The
// validator walks every object with its keys sorted and records every
// location; this walk only looks. It never refuses: data it does not
// accept (or cannot judge) goes to the validator, whose verdict and error
// stand.
type fastSchema struct {
	// types lists the allowed JSON types; empty for any.
	types      []string
	required   []string
	properties map[string]*fastSchema
	items      *fastSchema
}

// newFastSchema returns the fast form of the JSON Schema doc, or nil when it
// uses a keyword, a value or a type the fast form does not know.
func newFastSchema(doc []byte) *fastSchema {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return nil
	}
	return fastSchemaOf(v, 0)
}

func fastSchemaOf(v any, depth int) *fastSchema {
	if depth > 32 {
		return nil
	}
	if b, ok := v.(bool); ok && b {
		return &fastSchema{}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	s := &fastSchema{}
	for k, x := range m {
		switch k {
		case "$schema", "title", "description", "$comment":
			if depth > 0 && k == "$schema" {
				return nil
			}
		case "type":
			switch t := x.(type) {
			case string:
				s.types = []string{t}
			case []any:
				for _, e := range t {
					name, ok := e.(string)
					if !ok {
						return nil
					}
					s.types = append(s.types, name)
				}
			default:
				return nil
			}
			for _, t := range s.types {
				switch t {
				case "object", "array", "string", "boolean", "null", "number":
				default:
					return nil
				}
			}
		case "required":
			list, ok := x.([]any)
			if !ok {
				return nil
			}
			for _, e := range list {
				name, ok := e.(string)
				if !ok {
					return nil
				}
				s.required = append(s.required, name)
			}
		case "properties":
			props, ok := x.(map[string]any)
			if !ok {
				return nil
			}
			s.properties = make(map[string]*fastSchema, len(props))
			for name, p := range props {
				if s.properties[name] = fastSchemaOf(p, depth+1); s.properties[name] == nil {
					return nil
				}
			}
		case "items":
			if s.items = fastSchemaOf(x, depth+1); s.items == nil {
				return nil
			}
		default:
			return nil
		}
	}
	return s
}

// accepts reports whether v, data as jsonShaped takes it, is surely valid.
func (s *fastSchema) accepts(v any) bool {
	if len(s.types) > 0 && !s.typeFits(v) {
		return false
	}
	switch x := v.(type) {
	case map[string]any:
		for _, name := range s.required {
			if _, ok := x[name]; !ok {
				return false
			}
		}
		for name, p := range s.properties {
			if e, ok := x[name]; ok && !p.accepts(e) {
				return false
			}
		}
	case []any:
		if s.items != nil {
			for _, e := range x {
				if !s.items.accepts(e) {
					return false
				}
			}
		}
	}
	return true
}

func (s *fastSchema) typeFits(v any) bool {
	for _, t := range s.types {
		if jsonType(v) == t {
			return true
		}
	}
	return false
}

// jsonType is the JSON type of v; "" for what the fast form leaves to
// the validator.
func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case json.Number, int, int64, int32:
		return "number"
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return ""
		}
		return "number"
	}
	return ""
}
