package render_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/postline/postline/internal/render"
)

// FuzzRenderHTMLEscapes renders a fixed template whose source has no
// script element with fuzzed data: the HTML never contains "<script" (the
// data is escaped in every context), and the text part carries the data
// verbatim.
func FuzzRenderHTMLEscapes(f *testing.F) {
	for _, s := range []string{"", "<script>alert(1)</script>", `"><script>`, "javascript:alert(1)", "</style><script>", "<ScRiPt", "\x00<script", "é<svg onload=x>"} {
		f.Add(s, s)
	}
	c, err := render.Compile(render.Version{
		Template: "fuzz", Number: 1,
		Subject: "{{.a}}",
		Text:    "a={{.a}} b={{.b}}",
		HTML: `<p title="{{.a}}">{{.a}}</p><a href="{{.b}}">{{.b}}</a><a href=/x/{{.a}}>x</a>` +
			`<style>p { color: {{.b}} }</style><div onclick="f({{.a}})">{{upper .b}}</div><!-- {{.a}} -->`,
	}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		r, err := c.Render("", map[string]any{"a": a, "b": b})
		if err != nil {
			var e *render.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not a *render.Error", err)
			}
			if e.Reason != render.ReasonSubjectNewline || !strings.ContainsAny(strings.TrimSpace(a), "\r\n") {
				t.Fatalf("Render: %v", err)
			}
			return
		}
		if strings.Contains(strings.ToLower(r.HTML), "<script") {
			t.Fatalf("HTML carries a script element from the data: %q", r.HTML)
		}
		if want := "a=" + a + " b=" + b; r.Text != want {
			t.Fatalf("Text = %q, want %q", r.Text, want)
		}
		if r.Subject != strings.TrimSpace(a) {
			t.Fatalf("Subject = %q, want %q", r.Subject, strings.TrimSpace(a))
		}
	})
}

// FuzzCompile compiles fuzzed sources: Compile never panics, errors are
// typed, and a compiled version renders within the output bound.
func FuzzCompile(f *testing.F) {
	seeds := []struct{ subject, text, html, value string }{
		{"Hi {{.name}}", "{{range .list}}{{.}}{{end}}", "<p>{{.name}}</p>", "x"},
		{"{{upper .name}}", `{{define "a"}}{{template "a" .}}{{end}}`, "", "x"},
		{"s", `{{range .list}}{{range $.list}}{{range $.list}}{{$.name}}{{$.name}}{{end}}{{end}}{{end}}`, "", strings.Repeat("y", 300)},
		{"s", `{{printf "%09999d" 1}}`, `<a href="{{.name}}">{{join "," .list}}</a>`, "javascript:x"},
		{"{{.name", "", "<script>{{.name}}</script>", "</script>"},
		{"s", `{{truncate 3 .name}}{{date "2006" .name}}{{default "d" .name}}`, "{{lower .name}}", "2026-01-01T00:00:00Z"},
	}
	for _, s := range seeds {
		f.Add(s.subject, s.text, s.html, s.value)
	}
	f.Fuzz(func(t *testing.T, subject, text, html, value string) {
		c, err := render.Compile(render.Version{Template: "fuzz", Number: 1, Subject: subject, Text: text, HTML: html}, nil)
		if err != nil {
			var e *render.Error
			if !errors.As(err, &e) {
				t.Fatalf("Compile error %v is not a *render.Error", err)
			}
			return
		}
		list := make([]any, 50)
		for i := range list {
			list[i] = value
		}
		r, err := c.Render("", map[string]any{"name": value, "list": list, "n": 3})
		if err != nil {
			var e *render.Error
			if !errors.As(err, &e) {
				t.Fatalf("Render error %v is not a *render.Error", err)
			}
			return
		}
		if n := len(r.Subject) + len(r.Text) + len(r.HTML); n > render.MaxOutputBytes {
			t.Fatalf("render of %d bytes, over the bound %d", n, render.MaxOutputBytes)
		}
		if strings.ContainsAny(r.Subject, "\r\n") {
			t.Fatalf("subject %q has a line break", r.Subject)
		}
	})
}
