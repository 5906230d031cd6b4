package main

// The template variant: the postline variant's worker, settings and
// measurement, with jobs that carry no body but name a stored template
// (subject, text and HTML parts, a data schema, a stored layout) and their
// own data. The worker renders every mail through its template store,
// label watcher and compose path, all at their defaults.

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/templatestore"
	"github.com/postline/postline/job"
)

const (
	// benchTemplate and benchLayout are the names pushed to the variant's
	// schema.
	benchTemplate = "bench-receipt"
	benchLayout   = "bench-layout"
	// benchTemplateItems is how many line items each job's data has.
	benchTemplateItems = 3
)

// templateDrafts are the layout and the template the variant pushes: a
// receipt naming the customer, the order number and its line items.
func templateDrafts() (layout, tmpl templatestore.Draft) {
	layout = templatestore.Draft{
		Name: benchLayout,
		Kind: templatestore.KindLayout,
		TextBody: `{{template "content" .}}
--
Postline Bench Shop, 1 Example Street, Springfield
You get this mail because you ordered from us.
`,
		HTMLBody: `<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>Your order</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: auto">
<header><h1 style="font-size: 1.2em">Postline Bench Shop</h1></header>
{{template "content" .}}
<hr>
<footer style="font-size: small; color: #666">Postline Bench Shop, 1 Example Street, Springfield.
You get this mail because you ordered from us.</footer>
</body>
</html>
`,
		CreatedBy: "bench/e2e",
	}
	tmpl = templatestore.Draft{
		Name:    benchTemplate,
		Subject: `Your order {{.order}}, {{.name}}`,
		TextBody: `Hello {{.name}},

thank you for order {{.order}}. We are packing it now:

{{range .items}}  {{.qty}} x {{.title}} ({{.sku}})  {{.price}} EUR
{{end}}
Total: {{.total}} EUR

We will write again when it ships.
`,
		HTMLBody: `<p>Hello {{.name}},</p>
<p>thank you for order <strong>{{.order}}</strong>. We are packing it now:</p>
<table>
<tr><th>Qty</th><th>Item</th><th>SKU</th><th>Price</th></tr>
{{range .items}}<tr><td>{{.qty}}</td><td>{{.title}}</td><td>{{.sku}}</td><td>{{.price}} EUR</td></tr>
{{end}}</table>
<p>Total: <strong>{{.total}} EUR</strong></p>
<p>We will write again when it ships.</p>
`,
		Layout: benchLayout,
		DataSchema: json.RawMessage(`{"type": "object", "required": ["name", "order", "items", "total"],
			"properties": {"name": {"type": "string"}, "order": {"type": "string"}, "total": {"type": "string"},
			"items": {"type": "array", "items": {"type": "object", "required": ["sku", "title", "qty", "price"]}}}}`),
		CreatedBy: "bench/e2e",
	}
	return layout, tmpl
}

// prepareTemplate migrates the variant's fresh schema and pushes the layout
// and the template to it, each with its active label, so that the worker's
// first label snapshot already knows them.
func prepareTemplate(ctx context.Context, pool *pgxpool.Pool) error {
	if err := schema.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	st, err := templatestore.New(templatestore.Config{}, pool, nil, nil)
	if err != nil {
		return err
	}
	layout, tmpl := templateDrafts()
	for _, d := range []templatestore.Draft{layout, tmpl} {
		v, _, err := st.Push(ctx, d)
		if err != nil {
			return err
		}
		if _, err := st.SetLabel(ctx, d.Name, templatestore.LabelActive, v, 0, "bench/e2e"); err != nil {
			return err
		}
	}
	return nil
}

// templateJobs are n template jobs naming benchTemplate, each with its own
// data: a name, an order number and benchTemplateItems line items. They
// have no body, so bodyBytes is not used.
func templateJobs(n, _ int) []job.Job {
	jobs := make([]job.Job, n)
	for i := range jobs {
		items := make([]any, benchTemplateItems)
		cents := 0
		for k := range items {
			price := 199 + 100*((i+k)%50)
			cents += (k + 1) * price
			items[k] = map[string]any{
				"sku":   fmt.Sprintf("SKU-%05d-%d", i%100000, k),
				"title": fmt.Sprintf("Bench item %d", (i+k)%997),
				"qty":   k + 1,
				"price": fmt.Sprintf("%d.%02d", price/100, price%100),
			}
		}
		jobs[i] = job.Job{
			Version: job.SchemaVersion,
			From:    "Postline Bench <bench@postline.test>",
			To:      []string{fmt.Sprintf("rcpt%d@sink.postline.test", i)},
			Template: &job.TemplateRef{Name: benchTemplate, Data: map[string]any{
				"name":  fmt.Sprintf("Customer %d", i),
				"order": fmt.Sprintf("B-%08d", i),
				"items": items,
				"total": fmt.Sprintf("%d.%02d", cents/100, cents%100),
			}},
		}
	}
	return jobs
}
