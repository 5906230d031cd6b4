package render_test

import (
	"strings"
	"testing"

	"github.com/postline/postline/internal/render"
)

// BenchmarkRender renders an order confirmation of about 2 KiB of text and
// HTML, the per-mail work of a template job.
func BenchmarkRender(b *testing.B) {
	row := "{{range .items}}<tr><td>{{.sku}}</td><td>{{.qty}}</td></tr>{{end}}"
	c, err := render.Compile(render.Version{Template: "order", Number: 1,
		Subject: "Your order {{.order}}",
		Text:    "Hello {{.name}},\n" + strings.Repeat("Thank you for your order {{.order}}.\n", 20) + "{{range .items}}{{.sku}} x {{.qty}}\n{{end}}",
		HTML:    "<p>Hello {{.name}},</p>" + strings.Repeat("<p>Thank you for your order {{.order}}.</p>", 20) + "<table>" + row + "</table>",
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	items := make([]any, 10)
	for i := range items {
		items[i] = map[string]any{"sku": "A-1", "qty": "2"}
	}
	data := map[string]any{"name": "Ada", "order": "1234", "items": items}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Render("", data); err != nil {
			b.Fatal(err)
		}
	}
}
