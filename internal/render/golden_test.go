package render_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/postline/postline/internal/render"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden from the current renders")

// goldenCase is one version and the data sets it renders.
type goldenCase struct {
	name    string
	version render.Version
	layouts map[string]render.Layout
	locales []string
	data    []string // JSON documents, decoded with json.Number numbers
}

func goldenCases(t *testing.T) []goldenCase {
	t.Helper()
	builtinLayouts, err := render.BuiltinLayouts()
	if err != nil {
		t.Fatal(err)
	}
	builtins, err := render.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	receiptLayout := render.Layout{Name: "shop",
		Text: "{{template \"content\" .}}\n--\nShop, 1 Example Street\n",
		HTML: "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Your order</title></head>\n" +
			"<body style=\"font-family: sans-serif\">\n{{template \"content\" .}}\n<hr><footer style=\"color: #666\">Shop</footer>\n</body></html>\n"}
	return []goldenCase{
		{name: "receipt", layouts: map[string]render.Layout{"shop": receiptLayout},
			version: render.Version{Template: "receipt", Number: 1, Layout: "shop",
				Subject: "Your order {{.order}}, {{.name}}",
				Text:    "Hello {{.name}},\n\n{{range .items}}  {{.qty}} x {{.title}} ({{.sku}})  {{.price}} EUR\n{{end}}\nTotal: {{.total}} EUR\n",
				HTML: "<p>Hello {{.name}},</p>\n<table>\n{{range .items}}<tr><td>{{.qty}}</td><td>{{.title}}</td><td>{{.sku}}</td><td>{{.price}} EUR</td></tr>\n{{end}}</table>\n" +
					"<p>Total: <strong>{{.total}} EUR</strong></p>\n",
				Schema: []byte(`{"type": "object", "required": ["name", "order", "items", "total"]}`)},
			data: []string{
				`{"name": "Customer 1", "order": "B-00000001", "total": "12.34", "items": [{"sku": "SKU-1", "title": "Item 1", "qty": 1, "price": "1.99"}, {"sku": "SKU-2", "title": "Item 2", "qty": 2.5, "price": "5.00"}]}`,
				`{"name": "<script>alert('x')</script> & \"Ada\"", "order": "O'Brien & <Co>", "total": "0", "items": []}`,
				`{"name": "Zoë ☃ \u00e9", "order": "\u2028x", "total": "1e3", "items": [{"sku": null, "title": true, "qty": -0, "price": {"a": 1}}]}`,
			}},
		{name: "contexts", version: render.Version{Template: "contexts", Number: 2,
			Subject: `{{upper .name}} {{printf "%05.1f" .n}} {{lower "ABC"}}`,
			Text:    `{{join ", " .list}}|{{default "none" .missing_ok}}|{{truncate 4 .name}}|{{date "2006-01-02" .when}}|{{.n}}|{{index .list 1}}|{{len .list}}|{{if .flag}}yes{{else}}no{{end}}|{{with .obj}}{{.k}}{{end}}`,
			HTML: `<a href="{{.url}}" title="{{.name}}" onclick="f({{.name}})" style="color: {{.color}}">{{.name}}</a>` +
				`<script>var d = {{.obj}}; var l = {{.list}};</script><img src="{{.img}}" alt="{{.n}}">{{join "|" .list}}`},
			data: []string{
				`{"name": "Ada Lovelace", "n": 3.14159, "list": ["a", "<b>", "c&d"], "missing_ok": "", "when": "2024-02-29T12:00:00Z", "flag": true, "obj": {"k": "v</script>"}, "url": "https://example.com/a b?x=1&y=<2>", "color": "red;background:url(x)", "img": "javascript:alert(1)"}`,
				`{"name": "", "n": 42, "list": ["x", "y"], "missing_ok": "set", "when": 1700000000, "flag": false, "obj": null, "url": "mailto:a@b", "color": "#fff", "img": "/p.png"}`,
			}},
		{name: "welcome", version: builtins["welcome"][0], layouts: builtinLayouts, locales: []string{"", "fr", "de-AT", "en-GB"},
			data: []string{`{"name": "Ada", "product": "Postline", "login_url": "https://example.com/login?a=1&b=2"}`}},
	}
}

// TestGoldenRenders renders fixed versions and data and compares the
// bytes with testdata/golden, written by the renderer before its speed-ups:
// they must not change what a mail says.
func TestGoldenRenders(t *testing.T) {
	for _, tc := range goldenCases(t) {
		c, err := render.Compile(tc.version, tc.layouts)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		locales := tc.locales
		if len(locales) == 0 {
			locales = []string{""}
		}
		var out strings.Builder
		for i, doc := range tc.data {
			dec := json.NewDecoder(strings.NewReader(doc))
			dec.UseNumber()
			var data map[string]any
			if err := dec.Decode(&data); err != nil {
				t.Fatalf("%s data %d: %v", tc.name, i, err)
			}
			for _, loc := range locales {
				// Twice, so that a render that leaves state behind shows.
				for range 2 {
					r, err := c.Render(loc, data)
					fmt.Fprintf(&out, "=== data %d locale %q\nerr: %v\nlocale: %q\nsubject: %q\n--- text\n%s\n--- html\n%s\n",
						i, loc, err, r.Locale, r.Subject, r.Text, r.HTML)
				}
			}
		}
		path := filepath.Join("testdata", "golden", tc.name+".txt")
		if *updateGolden {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (generate with -update-golden)", tc.name, err)
		}
		if out.String() != string(want) {
			t.Errorf("%s: renders differ from %s:\n%s", tc.name, path, out.String())
		}
	}
}
