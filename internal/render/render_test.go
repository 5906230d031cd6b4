package render_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/render"
)

func mustCompile(t *testing.T, v render.Version, layouts map[string]render.Layout) *render.Compiled {
	t.Helper()
	c, err := render.Compile(v, layouts)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return c
}

func asError(t *testing.T, err error) *render.Error {
	t.Helper()
	var e *render.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *render.Error", err, err)
	}
	return e
}

func TestRender(t *testing.T) {
	t.Parallel()
	layouts := map[string]render.Layout{
		"frame": {Name: "frame", HTML: `<div class="frame">{{template "content" .}}</div>`, Text: "{{template \"content\" .}}\n-- footer"},
	}
	when := time.Date(2026, 12, 1, 15, 4, 5, 0, time.UTC)
	tests := []struct {
		name     string
		v        render.Version
		data     map[string]any
		want     render.Rendered
		wantText string
	}{
		{
			name: "html escaped, text not",
			v:    render.Version{Subject: "Hi {{.name}}", Text: "Hi {{.name}}", HTML: "<p>Hi {{.name}}</p>"},
			data: map[string]any{"name": `<b>Ann & "Bo"</b>`},
			want: render.Rendered{
				Subject: `Hi <b>Ann & "Bo"</b>`,
				Text:    `Hi <b>Ann & "Bo"</b>`,
				HTML:    "<p>Hi &lt;b&gt;Ann &amp; &#34;Bo&#34;&lt;/b&gt;</p>",
			},
		},
		{
			name: "html attribute and url contexts",
			v:    render.Version{Subject: "s", HTML: `<a href="{{.u}}" title="{{.t}}">x</a>`},
			data: map[string]any{"u": "javascript:alert(1)", "t": `a"onmouseover="x`},
			want: render.Rendered{Subject: "s", HTML: `<a href="#ZgotmplZ" title="a&#34;onmouseover=&#34;x">x</a>`},
		},
		{
			name: "layout wraps text and html",
			v:    render.Version{Subject: "s", Text: "body {{.x}}", HTML: "<p>{{.x}}</p>", Layout: "frame"},
			data: map[string]any{"x": "1"},
			want: render.Rendered{Subject: "s", Text: "body 1\n-- footer", HTML: `<div class="frame"><p>1</p></div>`},
		},
		{
			name: "functions",
			v: render.Version{
				Subject: `{{upper .a}} {{lower .b}}`,
				Text:    `{{default "friend" .empty}}|{{default "x" .set}}|{{default "none" (index . "absent")}}|{{join ", " .list}}|{{date "2006-01-02 15:04" .when}}|{{date "2006-01-02" .iso}}|{{date "2006" .unix}}|{{truncate 5 .long}}|{{truncate 10 .short}}|{{printf "%05d" .n}}`,
			},
			data: map[string]any{
				"a": "abc", "b": "DéF", "empty": "", "set": "y", "list": []any{"a", 2, "c"},
				"when": when, "iso": "2026-02-03T04:05:06Z", "unix": float64(0), "long": "héllo world", "short": "hi", "n": 42,
			},
			want: render.Rendered{
				Subject: "ABC déf",
				Text:    "friend|y|none|a, 2, c|2026-12-01 15:04|2026-02-03|1970|héll…|hi|00042",
			},
		},
		{
			name: "subject trimmed",
			v:    render.Version{Subject: "  Hello {{.n}}\n", Text: "t"},
			data: map[string]any{"n": "you"},
			want: render.Rendered{Subject: "Hello you", Text: "t"},
		},
		{
			name: "define and template",
			v:    render.Version{Subject: "s", Text: `{{define "greet"}}Hello {{.}}{{end}}{{template "greet" .name}}!`},
			data: map[string]any{"name": "Ann"},
			want: render.Rendered{Subject: "s", Text: "Hello Ann!"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.v.Template, tt.v.Number = "t", 1
			got, err := mustCompile(t, tt.v, layouts).Render("", tt.data)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if got != tt.want {
				t.Errorf("Render =\n%#v\nwant\n%#v", got, tt.want)
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-value@example.com"
	schema := []byte(`{"type":"object","required":["name"],"properties":{"name":{"type":"string","pattern":"^[A-Z]"},"age":{"type":"integer"}}}`)
	tests := []struct {
		name   string
		v      render.Version
		data   map[string]any
		stage  string
		reason string
		part   string
		is     error
	}{
		{"missing key", render.Version{Subject: "s", Text: "{{.nope}}"}, map[string]any{"x": secret}, render.StageExecute, render.ReasonMissingKey, "text", nil},
		{"missing nested key", render.Version{Subject: "s", HTML: "{{.a.b}}"}, map[string]any{"a": map[string]any{"c": secret}}, render.StageExecute, render.ReasonMissingKey, "html", nil},
		{"nil data", render.Version{Subject: "{{.x}}", Text: "t"}, nil, render.StageExecute, render.ReasonMissingKey, "subject", nil},
		{"schema pattern", render.Version{Subject: "s", Text: "{{.name}}", Schema: schema}, map[string]any{"name": secret}, render.StageSchema, render.ReasonDataInvalid, "schema", nil},
		{"schema required", render.Version{Subject: "s", Text: "t", Schema: schema}, map[string]any{"other": secret}, render.StageSchema, render.ReasonDataInvalid, "schema", nil},
		{"schema type", render.Version{Subject: "s", Text: "t", Schema: schema}, map[string]any{"name": "Ann", "age": secret}, render.StageSchema, render.ReasonDataInvalid, "schema", nil},
		{"subject LF", render.Version{Subject: "Hi {{.n}}", Text: "t"}, map[string]any{"n": "x\nBcc: " + secret}, render.StageExecute, render.ReasonSubjectNewline, "subject", render.ErrSubjectNewline},
		{"subject CR", render.Version{Subject: "Hi {{.n}} there", Text: "t"}, map[string]any{"n": "x\r" + secret}, render.StageExecute, render.ReasonSubjectNewline, "subject", render.ErrSubjectNewline},
		{"function error", render.Version{Subject: "s", Text: "{{upper .n}}"}, map[string]any{"n": 42}, render.StageExecute, render.ReasonExecute, "text", nil},
		{"date error", render.Version{Subject: "s", Text: `{{date "2006" .n}}`}, map[string]any{"n": secret}, render.StageExecute, render.ReasonExecute, "text", nil},
		{"range over a string", render.Version{Subject: "s", Text: "{{range .x}}{{end}}"}, map[string]any{"x": secret}, render.StageExecute, render.ReasonExecute, "text", nil},
		{"range two variables over a channel-less value", render.Version{Subject: "s", Text: "{{range $i, $v := .x}}{{end}}"}, map[string]any{"x": 42}, render.StageExecute, render.ReasonExecute, "text", nil},
		{"method panic of a data value", render.Version{Subject: "s", Text: "{{.p.Boom}}"}, map[string]any{"p": panicker(secret)}, render.StageExecute, render.ReasonExecute, "text", nil},
		{"output bound", render.Version{Subject: "s", Text: "{{range .l}}{{range $.l}}{{$.big}}{{end}}{{end}}"}, map[string]any{"l": make([]int, 100), "big": strings.Repeat("x", 1000)}, render.StageLimit, render.ReasonOutputTooLarge, "text", render.ErrOutputTooLarge},
		{"printf width", render.Version{Subject: "s", Text: `{{printf "%0100000000d" 1}}`}, map[string]any{}, render.StageExecute, render.ReasonExecute, "text", nil},
		{"printf star", render.Version{Subject: "s", Text: `{{printf "%*d" .n 1}}`}, map[string]any{"n": 100000000}, render.StageExecute, render.ReasonExecute, "text", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.v.Template, tt.v.Number = "tmpl", 7
			c := mustCompile(t, tt.v, nil)
			_, err := c.Render("", tt.data)
			if err == nil {
				t.Fatal("Render succeeded, want an error")
			}
			e := asError(t, err)
			if e.Stage != tt.stage || e.Reason != tt.reason || e.Part != tt.part || e.Template != "tmpl" || e.Version != 7 {
				t.Errorf("error = %+v, want stage %s reason %s part %s of tmpl 7", e, tt.stage, tt.reason, tt.part)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error text carries a data value: %v", err)
			}
		})
	}
}

type panicker string

func (p panicker) Boom() string { panic("boom " + string(p)) }

func TestSchemaErrorNamesKeywords(t *testing.T) {
	t.Parallel()
	c := mustCompile(t, render.Version{Template: "t", Number: 1, Subject: "s", Text: "t",
		Schema: []byte(`{"type":"object","required":["name","email"]}`)}, nil)
	_, err := c.Render("", map[string]any{"name": "x"})
	if err == nil || !strings.Contains(err.Error(), "#/required (missing email)") {
		t.Fatalf("Render error = %v, want the required keyword and the missing property", err)
	}
	if _, err := c.Render("", map[string]any{"name": "x", "email": "y"}); err != nil {
		t.Fatalf("Render of valid data: %v", err)
	}
}

func TestCompileErrors(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", render.MaxSourceBytes+1)
	layouts := map[string]render.Layout{
		"nocontent": {Name: "nocontent", HTML: "<div></div>"},
		"ok":        {Name: "ok", Text: `{{template "content" .}}`},
	}
	deep := ""
	for i := range render.MaxTemplateDepth + 2 {
		deep += `{{define "d` + string(rune('a'+i)) + `"}}{{template "d` + string(rune('a'+i+1)) + `" .}}{{end}}`
	}
	deep += `{{define "d` + string(rune('a'+render.MaxTemplateDepth+2)) + `"}}end{{end}}{{template "da" .}}`
	// Each level calls the next 200 times: 200^5 executions of "l5".
	fan := `{{define "l5"}}x{{end}}`
	for i := 4; i >= 0; i-- {
		fan += fmt.Sprintf(`{{define "l%d"}}%s{{end}}`, i, strings.Repeat(fmt.Sprintf(`{{template "l%d"}}`, i+1), 200))
	}
	fan += `{{template "l0"}}`
	tests := []struct {
		name   string
		v      render.Version
		stage  string
		reason string
		is     error
	}{
		{"no subject", render.Version{Text: "t"}, render.StageParse, render.ReasonInvalidVersion, nil},
		{"no body", render.Version{Subject: "s"}, render.StageParse, render.ReasonInvalidVersion, nil},
		{"syntax", render.Version{Subject: "s", Text: "{{.x"}, render.StageParse, render.ReasonSyntax, nil},
		{"unknown function", render.Version{Subject: "s", Text: "{{nope .x}}"}, render.StageParse, render.ReasonSyntax, nil},
		{"html syntax", render.Version{Subject: "s", HTML: "{{if .x}}"}, render.StageParse, render.ReasonSyntax, nil},
		{"html escaping error", render.Version{Subject: "s", HTML: `<a href="{{if .x}}">{{end}}`}, render.StageParse, render.ReasonSyntax, nil},
		{"source too large", render.Version{Subject: "s", Text: big}, render.StageLimit, render.ReasonTooLarge, render.ErrTooLarge},
		{"locale too large", render.Version{Subject: "s", Text: "t", Locales: map[string]render.LocaleParts{"fr": {Text: big}}}, render.StageLimit, render.ReasonTooLarge, render.ErrTooLarge},
		{"schema too large", render.Version{Subject: "s", Text: "t", Schema: []byte(`{"description":"` + strings.Repeat("x", render.MaxSchemaBytes) + `"}`)}, render.StageLimit, render.ReasonTooLarge, render.ErrTooLarge},
		{"bad schema json", render.Version{Subject: "s", Text: "t", Schema: []byte(`{`)}, render.StageSchema, render.ReasonInvalidSchema, nil},
		{"bad schema", render.Version{Subject: "s", Text: "t", Schema: []byte(`{"type":12}`)}, render.StageSchema, render.ReasonInvalidSchema, nil},
		{"schema external ref", render.Version{Subject: "s", Text: "t", Schema: []byte(`{"$ref":"https://example.com/s.json"}`)}, render.StageSchema, render.ReasonInvalidSchema, nil},
		{"self recursion", render.Version{Subject: "s", Text: `{{define "a"}}{{template "a" .}}{{end}}{{template "a" .}}`}, render.StageLimit, render.ReasonRecursion, render.ErrRecursion},
		{"mutual recursion", render.Version{Subject: "s", HTML: `{{define "a"}}{{template "b" .}}{{end}}{{define "b"}}{{template "a" .}}{{end}}{{template "a" .}}`}, render.StageLimit, render.ReasonRecursion, render.ErrRecursion},
		{"recursion through block", render.Version{Subject: "s", Text: `{{block "a" .}}{{template "a" .}}{{end}}`}, render.StageLimit, render.ReasonRecursion, render.ErrRecursion},
		{"calls too deep", render.Version{Subject: "s", Text: deep}, render.StageLimit, render.ReasonRecursion, render.ErrRecursion},
		{"range too deep", render.Version{Subject: "s", Text: `{{range .a}}{{range .b}}{{range .c}}{{range .d}}{{end}}{{end}}{{end}}{{end}}`}, render.StageLimit, render.ReasonRecursion, render.ErrRecursion},
		{"range too deep through a call", render.Version{Subject: "s", Text: `{{define "in"}}{{range .c}}{{range .d}}{{end}}{{end}}{{end}}{{range .a}}{{range .b}}{{template "in" .}}{{end}}{{end}}`}, render.StageLimit, render.ReasonRecursion, render.ErrRecursion},
		{"exponential fan-out of calls", render.Version{Subject: "s", Text: fan}, render.StageLimit, render.ReasonRecursion, render.ErrRecursion},
		{"range over a number", render.Version{Subject: "s", Text: `{{range 1000000000}}{{end}}`}, render.StageLimit, render.ReasonRecursion, render.ErrRecursion},
		{"undefined template", render.Version{Subject: "s", Text: `{{template "nope" .}}`}, render.StageParse, render.ReasonSyntax, nil},
		{"missing layout", render.Version{Subject: "s", Text: "t", Layout: "absent"}, render.StageParse, render.ReasonInvalidVersion, nil},
		{"layout without content", render.Version{Subject: "s", HTML: "<p>x</p>", Layout: "nocontent"}, render.StageParse, render.ReasonSyntax, nil},
		{"duplicate locale", render.Version{Subject: "s", Text: "t", Locales: map[string]render.LocaleParts{"fr-CA": {Text: "a"}, "fr_ca": {Text: "b"}}}, render.StageParse, render.ReasonInvalidVersion, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.v.Template, tt.v.Number = "tmpl", 3
			c, err := render.Compile(tt.v, layouts)
			if err == nil {
				t.Fatalf("Compile succeeded (%v), want an error", c)
			}
			e := asError(t, err)
			if e.Stage != tt.stage || e.Reason != tt.reason || e.Template != "tmpl" || e.Version != 3 {
				t.Errorf("error = %v (stage %s reason %s), want stage %s reason %s", err, e.Stage, e.Reason, tt.stage, tt.reason)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
		})
	}
}

func TestCompileAcceptsAtLimits(t *testing.T) {
	t.Parallel()
	chain := ""
	// The root's call of "da" and the calls of the chain nest
	// MaxTemplateDepth deep.
	for i := range render.MaxTemplateDepth - 1 {
		chain += `{{define "d` + string(rune('a'+i)) + `"}}{{template "d` + string(rune('a'+i+1)) + `" .}}{{end}}`
	}
	chain += `{{define "d` + string(rune('a'+render.MaxTemplateDepth-1)) + `"}}end{{end}}`
	tests := []struct {
		name string
		v    render.Version
		data map[string]any
		want string
	}{
		{"source at the limit", render.Version{Subject: "s", Text: strings.Repeat("x", render.MaxSourceBytes-1)}, nil, strings.Repeat("x", render.MaxSourceBytes-1)},
		{"calls at the depth limit", render.Version{Subject: "s", Text: chain + `{{template "da" .}}`}, nil, "end"},
		{"ranges at the depth limit", render.Version{Subject: "s", Text: `{{range .a}}{{range $.a}}{{range $.a}}.{{end}}{{end}}{{end}}`}, map[string]any{"a": []int{1, 2}}, "........"},
		{"same template called twice", render.Version{Subject: "s", Text: `{{define "x"}}x{{end}}{{template "x"}}{{template "x"}}`}, nil, "xx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.v.Template, tt.v.Number = "t", 1
			got, err := mustCompile(t, tt.v, nil).Render("", tt.data)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if got.Text != tt.want {
				t.Errorf("Text = %.40q (%d bytes), want %.40q (%d bytes)", got.Text, len(got.Text), tt.want, len(tt.want))
			}
		})
	}
}

func TestLocaleChain(t *testing.T) {
	t.Parallel()
	v := render.Version{
		Template: "t", Number: 1, DefaultLocale: "en",
		Subject: "base subject", Text: "base text", HTML: "<p>base</p>",
		Locales: map[string]render.LocaleParts{
			"fr-CA": {Subject: "sujet canadien"},
			"fr":    {Subject: "sujet", Text: "texte"},
			"en":    {Text: "english text"},
			"de":    {HTML: "<p>deutsch</p>"},
		},
	}
	c := mustCompile(t, v, nil)
	tests := []struct {
		locale string
		want   render.Rendered
	}{
		{"fr-CA", render.Rendered{Subject: "sujet canadien", Text: "texte", HTML: "<p>base</p>", Locale: "fr-CA"}},
		{"fr_ca", render.Rendered{Subject: "sujet canadien", Text: "texte", HTML: "<p>base</p>", Locale: "fr-CA"}},
		{"fr-BE", render.Rendered{Subject: "sujet", Text: "texte", HTML: "<p>base</p>", Locale: "fr"}},
		{"fr", render.Rendered{Subject: "sujet", Text: "texte", HTML: "<p>base</p>", Locale: "fr"}},
		{"es-MX", render.Rendered{Subject: "base subject", Text: "english text", HTML: "<p>base</p>", Locale: "en"}},
		{"", render.Rendered{Subject: "base subject", Text: "english text", HTML: "<p>base</p>", Locale: "en"}},
		{"de-AT", render.Rendered{Subject: "base subject", Text: "english text", HTML: "<p>deutsch</p>", Locale: "de"}},
	}
	for _, tt := range tests {
		t.Run(tt.locale, func(t *testing.T) {
			t.Parallel()
			got, err := c.Render(tt.locale, nil)
			if err != nil {
				t.Fatalf("Render(%q): %v", tt.locale, err)
			}
			if got != tt.want {
				t.Errorf("Render(%q) = %+v, want %+v", tt.locale, got, tt.want)
			}
		})
	}

	// Without an entry for the default locale, the base parts are used and
	// the default locale is reported.
	v.Locales = map[string]render.LocaleParts{"fr": {Subject: "sujet"}}
	v.DefaultLocale = "en-GB"
	got, err := mustCompile(t, v, nil).Render("it", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (render.Rendered{Subject: "base subject", Text: "base text", HTML: "<p>base</p>", Locale: "en-GB"}); got != want {
		t.Errorf("Render(it) = %+v, want %+v", got, want)
	}
}

// TestSchemaTakesDecodedAndGoData: data as a job decodes it (numbers as
// json.Number) is checked as it is, and Go values the validator does not
// know (a []string) are checked as what they encode to; both ways agree.
func TestSchemaTakesDecodedAndGoData(t *testing.T) {
	c, err := render.Compile(render.Version{Template: "t", Number: 1, Subject: "s", Text: "{{.n}} {{index .tags 0}}",
		Schema: []byte(`{"type":"object","required":["n","tags"],"properties":{"n":{"type":"integer","minimum":1},"tags":{"type":"array","items":{"type":"string"}}}}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, tt := range map[string]struct {
		data map[string]any
		ok   bool
	}{
		"decoded":          {map[string]any{"n": json.Number("3"), "tags": []any{"a"}}, true},
		"decoded, too low": {map[string]any{"n": json.Number("0"), "tags": []any{"a"}}, false},
		"go values":        {map[string]any{"n": 3, "tags": []string{"a"}}, true},
		"go, wrong type":   {map[string]any{"n": "3", "tags": []string{"a"}}, false},
	} {
		_, err := c.Render("", tt.data)
		if (err == nil) != tt.ok {
			t.Errorf("%s: Render = %v, want ok %v", name, err, tt.ok)
		}
	}
}
