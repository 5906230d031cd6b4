package render

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// withoutFast returns a copy of c whose parts have no fast form, so that
// they render with text/template and html/template only.
func withoutFast(c *Compiled) *Compiled {
	strip := func(p compiledParts) compiledParts {
		for _, part := range []**compiledPart{&p.subject, &p.text, &p.html} {
			if *part != nil {
				cp := **part
				cp.fast = nil
				*part = &cp
			}
		}
		return p
	}
	out := *c
	out.base = strip(c.base)
	out.locales = map[string]*compiledLocale{}
	for k, l := range c.locales {
		out.locales[k] = &compiledLocale{name: l.name, parts: strip(l.parts)}
	}
	return &out
}

// TestFastRendersAsTemplates renders versions the fast form takes on data
// it renders and data it hands back (missing keys, nil, numbers, lists
// that are not lists, values to escape), and compares output and errors
// with text/template's and html/template's.
func TestFastRendersAsTemplates(t *testing.T) {
	layouts := map[string]Layout{"shop": {Name: "shop", Text: "{{template \"content\" .}}\n--\nShop\n",
		HTML: "<html><body style=\"x\">{{template \"content\" .}}<footer>Shop</footer></body></html>"}}
	versions := []Version{
		{Template: "receipt", Number: 1, Layout: "shop", Subject: "Order {{.order}}, {{.name}}",
			Text: "Hello {{.name}}\n{{range .items}}{{.qty}} x {{.title}}\n{{else}}none\n{{end}}{{.deep.er.key}}",
			HTML: "<p>Hello {{.name}}</p><table>{{range .items}}<tr><td>{{.qty}}</td><td>{{.title}}</td></tr>{{end}}</table>{{.deep.er.key}}"},
		{Template: "plain", Number: 1, Subject: "{{.name}}", Text: "{{range .list}}[{{.}}]{{end}}", HTML: "<ul>{{range .list}}<li>{{.}}</li>{{end}}</ul>"},
	}
	datas := []string{
		`{"order": "1", "name": "Ada <&> 'q' \"x\" +", "items": [{"qty": 2, "title": "a"}, {"qty": 1.5, "title": "b"}], "deep": {"er": {"key": "k"}}, "list": ["a", "<b>"]}`,
		`{"order": "1", "name": "Ada", "items": [], "deep": {"er": {"key": "k"}}, "list": []}`,
		`{"order": "1", "name": "Ada", "items": [{"qty": 2}], "deep": {"er": {"key": "k"}}, "list": [1, "x"]}`,
		`{"order": "1", "name": null, "items": [null], "deep": {"er": {}}, "list": [null, true]}`,
		`{"order": "1", "name": true, "items": {"a": {"qty": 1, "title": "t"}}, "deep": "x", "list": "abc"}`,
		`{"order": "1", "name": "x\u0000y", "items": [{"qty": "3", "title": "\u2028"}], "deep": {"er": {"key": ["k"]}}, "list": [["n"]]}`,
		`{"name": "no order"}`,
		`{}`,
	}
	for _, v := range versions {
		c, err := Compile(v, layouts)
		if err != nil {
			t.Fatal(err)
		}
		if c.base.subject.fast == nil || c.base.text.fast == nil || c.base.html.fast == nil {
			t.Fatalf("%s: a part has no fast form", v.Template)
		}
		slow := withoutFast(c)
		for i, doc := range datas {
			data := decodeData(t, doc)
			got, gerr := c.Render("", data)
			want, werr := slow.Render("", data)
			if got != want || fmt.Sprint(gerr) != fmt.Sprint(werr) {
				t.Errorf("%s data %d: fast %+v, %v; templates %+v, %v", v.Template, i, got, gerr, want, werr)
			}
		}
	}
}

func TestFastRespectsOutputLimit(t *testing.T) {
	c, err := Compile(Version{Template: "big", Number: 1, Subject: "s", Text: "{{.a}}{{.a}}{{.a}}"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]any{"a": strings.Repeat("x", MaxOutputBytes/2)}
	_, gerr := c.Render("", data)
	_, werr := withoutFast(c).Render("", data)
	if gerr == nil || fmt.Sprint(gerr) != fmt.Sprint(werr) {
		t.Errorf("fast: %v; templates: %v", gerr, werr)
	}
}

func decodeData(t *testing.T, doc string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// FuzzFastRender renders a receipt with a schema on arbitrary JSON data:
// the fast paths give the output and the error text/template,
// html/template and the validator give.
func FuzzFastRender(f *testing.F) {
	for _, s := range []string{`{"name": "n", "order": "o", "total": "t", "items": [{"sku": "s", "title": "<t>", "qty": 1, "price": "p"}]}`,
		`{"name": 1}`, `{"items": [null]}`, `{"name": "n", "order": "o", "total": "t", "items": {}}`} {
		f.Add(s)
	}
	c, err := Compile(Version{Template: "receipt", Number: 1, Layout: "l", Subject: "Order {{.order}}, {{.name}}",
		Text: "{{range .items}}{{.qty}} x {{.title}} ({{.sku}}) {{.price}}\n{{else}}none{{end}}Total {{.total}}",
		HTML: "<p>{{.name}}</p>{{range .items}}<tr><td>{{.qty}}</td><td>{{.title}}</td></tr>{{end}}",
		Schema: []byte(`{"type": "object", "required": ["name", "order", "items", "total"], "properties": {"name": {"type": "string"},
			"items": {"type": "array", "items": {"type": "object", "required": ["sku", "title", "qty", "price"]}}}}`)},
		map[string]Layout{"l": {Name: "l", Text: "{{template \"content\" .}}\n--\n", HTML: "<body>{{template \"content\" .}}</body>"}})
	if err != nil {
		f.Fatal(err)
	}
	if c.fastSchema == nil || c.base.html.fast == nil {
		f.Fatal("no fast form")
	}
	slow := withoutFast(c)
	slow.fastSchema = nil
	f.Fuzz(func(t *testing.T, doc string) {
		dec := json.NewDecoder(strings.NewReader(doc))
		dec.UseNumber()
		var data map[string]any
		if dec.Decode(&data) != nil {
			return
		}
		got, gerr := c.Render("", data)
		want, werr := slow.Render("", data)
		if got != want || fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Errorf("fast %+v, %v; slow %+v, %v", got, gerr, want, werr)
		}
	})
}
