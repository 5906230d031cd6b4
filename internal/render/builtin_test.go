package render_test

import (
	"strings"
	"testing"

	"github.com/postline/postline/internal/render"
)

func TestBuiltin(t *testing.T) {
	t.Parallel()
	all, err := render.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	layouts, err := render.BuiltinLayouts()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := layouts["basic"]; !ok {
		t.Fatalf("layouts = %v, want basic", layouts)
	}
	welcome := all["welcome"]
	if len(welcome) == 0 {
		t.Fatalf("Builtin = %v, want welcome", all)
	}
	for name, versions := range all {
		for _, v := range versions {
			if v.Template != name || v.Number <= 0 {
				t.Errorf("builtin %s has version %s %d", name, v.Template, v.Number)
			}
			if _, err := render.Compile(v, layouts); err != nil {
				t.Errorf("builtin %s version %d: %v", name, v.Number, err)
			}
		}
	}

	c, err := render.Compile(welcome[0], layouts)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]any{"name": "Ann <ann@x>", "product": "Postline", "login_url": "https://example.com/login?a=1&b=2"}
	tests := []struct {
		locale, locale2, subject, text, html string
	}{
		{"en", "en", "Welcome to Postline, Ann <ann@x>", "Hello Ann <ann@x>,", "Hello Ann &lt;ann@x&gt;,"},
		{"fr-CA", "fr", "Bienvenue sur Postline, Ann <ann@x>", "Bonjour Ann <ann@x>,", "Bonjour Ann &lt;ann@x&gt;,"},
		{"de", "en", "Welcome to Postline, Ann <ann@x>", "Hello Ann <ann@x>,", `href="https://example.com/login?a=1&amp;b=2"`},
	}
	for _, tt := range tests {
		r, err := c.Render(tt.locale, data)
		if err != nil {
			t.Fatalf("Render(%s): %v", tt.locale, err)
		}
		if r.Locale != tt.locale2 || r.Subject != tt.subject || !strings.Contains(r.Text, tt.text) || !strings.Contains(r.HTML, tt.html) {
			t.Errorf("Render(%s) = %+v", tt.locale, r)
		}
		if !strings.Contains(r.HTML, "<!DOCTYPE html>") {
			t.Errorf("Render(%s) html is not wrapped in the layout: %q", tt.locale, r.HTML)
		}
	}
	// The schema requires a product.
	if _, err := c.Render("en", map[string]any{"name": "Ann"}); err == nil {
		t.Error("Render without product succeeded")
	}
}
