package templatestore

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"welcome", true},
		{"a", true},
		{"0", true},
		{"password-reset", true},
		{"invoice_v2", true},
		{"a-b_c-9", true},
		{strings.Repeat("a", MaxNameLen), true},
		{strings.Repeat("a", MaxNameLen+1), false},
		{"", false},
		{"Welcome", false},
		{"-welcome", false},
		{"welcome-", false},
		{"_x", false},
		{"x_", false},
		{"a.b", false},
		{"a/b", false},
		{"../etc", false},
		{"a b", false},
		{"é", false},
		{"a\x00", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateName(tt.name)
			if tt.ok && err != nil {
				t.Errorf("ValidateName(%q) = %v, want nil", tt.name, err)
			}
			if !tt.ok && !errors.Is(err, ErrInvalidName) {
				t.Errorf("ValidateName(%q) = %v, want ErrInvalidName", tt.name, err)
			}
		})
	}
}

// The database's check and ValidateName agree: the migration checks
// NamePattern, and ValidateName accepts what NamePattern matches.
func TestNamePatternInMigration(t *testing.T) {
	sql, err := os.ReadFile("../schema/migrations/0009_templates.sql")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(sql), "'"+NamePattern+"'"); n != 2 {
		t.Errorf("the migration checks NamePattern %d times, want 2 (name and layout)", n)
	}
}

func FuzzValidateName(f *testing.F) {
	re := regexp.MustCompile(NamePattern)
	for _, s := range []string{"welcome", "a-b", "-a", "a_", strings.Repeat("x", 65), "A", "a\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateName(name)
		if match := re.MatchString(name); match != (err == nil) {
			t.Fatalf("ValidateName(%q) = %v but NamePattern matches: %v", name, err, match)
		}
	})
}

func TestValidateLabel(t *testing.T) {
	tests := []struct {
		label   string
		version int
		percent int
		wantErr string
	}{
		{LabelActive, 1, 0, ""},
		{LabelFallback, 3, 0, ""},
		{LabelCanary, 2, 1, ""},
		{LabelCanary, 2, 100, ""},
		{LabelCanary, 2, 0, "not within 1-100"},
		{LabelCanary, 2, 101, "not within 1-100"},
		{LabelCanary, 2, -5, "not within 1-100"},
		{LabelActive, 1, 10, "takes no percent"},
		{LabelFallback, 1, 100, "takes no percent"},
		{LabelActive, 0, 0, "not positive"},
		{LabelCanary, -1, 50, "not positive"},
		{"latest", 1, 0, "is not active, canary or fallback"},
		{"Active", 1, 0, "is not active, canary or fallback"},
		{"", 1, 0, "is not active, canary or fallback"},
	}
	for _, tt := range tests {
		err := ValidateLabel(tt.label, tt.version, tt.percent)
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("ValidateLabel(%q, %d, %d) = %v, want nil", tt.label, tt.version, tt.percent, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidLabel) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ValidateLabel(%q, %d, %d) = %v, want ErrInvalidLabel with %q", tt.label, tt.version, tt.percent, err, tt.wantErr)
		}
	}
}

func TestDraftValidate(t *testing.T) {
	tests := []struct {
		name    string
		d       Draft
		wantErr error
	}{
		{"minimal", Draft{Name: "x"}, nil},
		{"layout kind", Draft{Name: "base", Kind: KindLayout, HTMLBody: "<html>{{content}}</html>"}, nil},
		{"with layout", Draft{Name: "x", Layout: "base"}, nil},
		{"bad name", Draft{Name: "X"}, ErrInvalidName},
		{"bad kind", Draft{Name: "x", Kind: "partial"}, ErrInvalidDraft},
		{"layout of a layout", Draft{Name: "x", Kind: KindLayout, Layout: "base"}, ErrInvalidDraft},
		{"bad layout name", Draft{Name: "x", Layout: "Base"}, ErrInvalidName},
		{"bad JSON", Draft{Name: "x", SampleData: json.RawMessage(`{"a":`)}, ErrInvalidDraft},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := tt.d.validate()
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("validate = %v", err)
				}
				if d.Kind == "" {
					t.Error("Kind was not defaulted")
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("validate = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestContentHash(t *testing.T) {
	base := Draft{Name: "welcome", Subject: "Hi {{.Name}}", TextBody: "Hello", HTMLBody: "<p>Hello</p>",
		DataSchema: json.RawMessage(`{"type":"object","required":["Name"]}`),
		SampleData: json.RawMessage(`{"Name":"Ada","n":1.50}`)}
	h0, err := ContentHash(base)
	if err != nil {
		t.Fatal(err)
	}
	if len(h0) != 32 {
		t.Fatalf("hash has %d bytes, want 32", len(h0))
	}
	same := []struct {
		name string
		edit func(*Draft)
	}{
		{"metadata", func(d *Draft) { d.Description, d.DefaultLocale, d.CreatedBy = "desc", "de", "git:abc" }},
		{"explicit kind", func(d *Draft) { d.Kind = KindTemplate }},
		{"reformatted JSON", func(d *Draft) {
			d.DataSchema = json.RawMessage("{\n  \"required\": [\"Name\"],\n  \"type\": \"object\"\n}\n")
		}},
		{"null is none", func(d *Draft) { d.Locales = json.RawMessage(" null ") }},
	}
	for _, tt := range same {
		d := base
		tt.edit(&d)
		h, err := ContentHash(d)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !bytes.Equal(h, h0) {
			t.Errorf("%s: hash changed", tt.name)
		}
	}
	differ := []struct {
		name string
		edit func(*Draft)
	}{
		{"subject", func(d *Draft) { d.Subject += "!" }},
		{"text", func(d *Draft) { d.TextBody = "" }},
		{"html", func(d *Draft) { d.HTMLBody = "<p>Hello </p>" }},
		{"layout", func(d *Draft) { d.Layout = "base" }},
		{"kind", func(d *Draft) { d.Kind = KindLayout }},
		{"schema", func(d *Draft) { d.DataSchema = json.RawMessage(`{"type":"object"}`) }},
		{"locales", func(d *Draft) { d.Locales = json.RawMessage(`{}`) }},
		{"number as written", func(d *Draft) { d.SampleData = json.RawMessage(`{"Name":"Ada","n":1.5}`) }},
		// Fields are length-prefixed: moving bytes between them changes the hash.
		{"field boundary", func(d *Draft) { d.Subject, d.TextBody = "Hi {{.Name}}H", "ello" }},
	}
	seen := map[string]string{string(h0): "base"}
	for _, tt := range differ {
		d := base
		tt.edit(&d)
		h, err := ContentHash(d)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if other, dup := seen[string(h)]; dup {
			t.Errorf("%s: same hash as %s", tt.name, other)
		}
		seen[string(h)] = tt.name
	}
}

func TestCanonicalJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{``, ``},
		{` null `, ``},
		{`{"b":1,"a":[true,null,"<x>"]}`, `{"a":[true,null,"<x>"],"b":1}`},
		{"{ \"n\" : 1.50e3 }", `{"n":1.50e3}`},
		{`"s"`, `"s"`},
	}
	for _, tt := range tests {
		got, err := canonicalJSON(json.RawMessage(tt.in))
		if err != nil {
			t.Errorf("canonicalJSON(%q) = %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("canonicalJSON(%q) = %q, want %q", tt.in, got, tt.want)
		}
		// Canonical output is a fixed point.
		again, err := canonicalJSON(got)
		if err != nil || !bytes.Equal(again, got) {
			t.Errorf("canonicalJSON(%q) = %q, %v; not a fixed point", got, again, err)
		}
	}
	for _, bad := range []string{`{"a":`, `{} {}`, `nope`} {
		if _, err := canonicalJSON(json.RawMessage(bad)); err == nil {
			t.Errorf("canonicalJSON(%q) = nil error, want one", bad)
		}
	}
}

func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":2}`, `[1, 2.0, "x"]`, `null`, `{"a":{"c":[],"b":{}}}`, `"\u00e9"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if !json.Valid(doc) {
			return
		}
		c, err := canonicalJSON(doc)
		if err != nil {
			t.Fatalf("canonicalJSON(%q) of valid JSON: %v", doc, err)
		}
		if c == nil {
			return
		}
		if !json.Valid(c) {
			t.Fatalf("canonicalJSON(%q) = %q, not valid JSON", doc, c)
		}
		again, err := canonicalJSON(c)
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("canonicalJSON(%q) = %q, then %q, %v: not a fixed point", doc, c, again, err)
		}
	})
}

func TestConfigs(t *testing.T) {
	if err := (Config{}).WithDefaults().Validate(); err != nil {
		t.Errorf("default Config: %v", err)
	}
	if err := (Config{ChangesLimit: -1}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "ChangesLimit -1") {
		t.Errorf("ChangesLimit -1: %v", err)
	}
	if got := (WatcherConfig{}).WithDefaults().Interval; got != DefaultWatchInterval {
		t.Errorf("default Interval = %v", got)
	}
	if err := (WatcherConfig{Interval: 1}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "Interval 1ns") {
		t.Errorf("Interval 1ns: %v", err)
	}
}
