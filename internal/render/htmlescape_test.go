package render

import (
	"encoding/json"
	htmltemplate "html/template"
	"strings"
	"testing"
)

// renderBoth renders tmpl on data with html/template's own escaper and
// with fastHTMLEscaper's.
func renderBoth(t testing.TB, tmpl string, data any) (want, got string) {
	t.Helper()
	exec := func(fast bool) string {
		rt, err := htmltemplate.New("t").Option("missingkey=error").Parse(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		_ = rt.Execute(&b, nil)
		if fast {
			if err := fastHTMLEscaper(rt); err != nil {
				t.Fatal(err)
			}
		}
		b.Reset()
		if err := rt.Execute(&b, data); err != nil {
			return "error: " + err.Error()
		}
		return b.String()
	}
	return exec(false), exec(true)
}

func TestFastHTMLEscaperMatchesHTMLTemplate(t *testing.T) {
	values := []any{"", "plain", "<a href='x'>&amp; \"q\" +1</a>", "\x00nul", "bad \xff\xfe utf8 \uFDD0 \uFFFF",
		json.Number("3.14"), json.Number("<1>"), nil, true, 3.5, 42, []any{"<a>", 1}, map[string]any{"k": "<v>"},
		htmltemplate.HTML("<b>kept</b>"), htmltemplate.CSS("a<b"), &[]string{"<p>"}[0], []byte("<x>")}
	for _, tmpl := range []string{"<p>{{.v}}</p>", "<p>{{.v | printf \"%v\"}}</p>{{if .v}}{{.v}}{{end}}",
		"<p>{{html .v .v}}</p>", "<p title={{.v}}>{{(.v)}}</p>", "<p>{{range .l}}{{.}}{{end}}</p>"} {
		for _, v := range values {
			want, got := renderBoth(t, tmpl, map[string]any{"v": v, "l": []any{v, v}})
			if got != want {
				t.Errorf("%s on %#v: got %q, want %q", tmpl, v, got, want)
			}
		}
	}
}

func FuzzEscapeHTMLText(f *testing.F) {
	for _, s := range []string{"", "<>&'\"+", "\x00", "é\xff<"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, got := renderBoth(t, "<p>{{.}}</p>", s)
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
}
