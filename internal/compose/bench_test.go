package compose

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/postline/postline/internal/templatestore"
	"github.com/postline/postline/job"
)

// benchReceipt and benchReceiptLayout are bench/e2e's template row: the
// receipt it stores (with its layout and data schema) and the data of its
// jobs, so that the per-mail work of that row is measured without the stack.
func benchReceipt() (layout, tmpl templatestore.Version) {
	layout = templatestore.Version{Name: "bench-layout", Version: 1,
		TextBody: "{{template \"content\" .}}\n--\nPostline Bench Shop, 1 Example Street, Springfield\nYou get this mail because you ordered from us.\n",
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
`}
	tmpl = templatestore.Version{Name: "bench-receipt", Version: 1, Layout: "bench-layout",
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
		DataSchema: json.RawMessage(`{"type": "object", "required": ["name", "order", "items", "total"],
			"properties": {"name": {"type": "string"}, "order": {"type": "string"}, "total": {"type": "string"},
			"items": {"type": "array", "items": {"type": "object", "required": ["sku", "title", "qty", "price"]}}}}`)}
	return layout, tmpl
}

// benchReceiptRecord is job i of bench/e2e's template row as the worker
// reads it from Kafka.
func benchReceiptRecord(tb testing.TB, i int) []byte {
	items := make([]any, 3)
	cents := 0
	for k := range items {
		price := 199 + 100*((i+k)%50)
		cents += (k + 1) * price
		items[k] = map[string]any{"sku": fmt.Sprintf("SKU-%05d-%d", i%100000, k),
			"title": fmt.Sprintf("Bench item %d", (i+k)%997), "qty": k + 1,
			"price": fmt.Sprintf("%d.%02d", price/100, price%100)}
	}
	return benchRecord(tb, job.Job{Version: job.SchemaVersion, MessageID: fmt.Sprintf("bench%d@postline.test", i),
		From: "Postline Bench <bench@postline.test>", To: []string{fmt.Sprintf("rcpt%d@sink.postline.test", i)},
		Template: &job.TemplateRef{Name: "bench-receipt", Data: map[string]any{
			"name": fmt.Sprintf("Customer %d", i), "order": fmt.Sprintf("B-%08d", i), "items": items,
			"total": fmt.Sprintf("%d.%02d", cents/100, cents%100)}}})
}

// benchPlainRecord is job i of bench/e2e's plain row (1 KiB text body).
func benchPlainRecord(tb testing.TB, i int) []byte {
	line := "Postline end-to-end benchmark body text, 64 bytes per line ...\n"
	body := ""
	for len(body) < 1024 {
		body += line
	}
	return benchRecord(tb, job.Job{Version: job.SchemaVersion, MessageID: fmt.Sprintf("bench%d@postline.test", i),
		From: "Postline Bench <bench@postline.test>", To: []string{fmt.Sprintf("rcpt%d@sink.postline.test", i)},
		Subject: fmt.Sprintf("bench mail %d", i), Text: body[:1024]})
}

func benchRecord(tb testing.TB, j job.Job) []byte {
	b, err := json.Marshal(j)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

const benchRecords = 64

// BenchmarkTemplateJob is a template job's own per-mail work in the worker
// before it is sent: decode the record, then compose it (labels, version,
// schema, render of subject, text and HTML in the layout).
func BenchmarkTemplateJob(b *testing.B) {
	f := newBenchFixture(b)
	records := make([][]byte, benchRecords)
	for i := range records {
		records[i] = benchReceiptRecord(b, i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		j, err := job.Decode(records[i%benchRecords], job.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		res, err := f.c.Compose(ctx, Request{MessageID: j.MessageID, Template: j.Template.Name,
			Requested: j.Template.Version, Data: j.Template.Data, Locale: j.Template.Locale})
		if err != nil || res.HTML == "" {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkPlainJob is the equivalent for a plain job: decoding its record
// is all it needs before it is sent.
func BenchmarkPlainJob(b *testing.B) {
	records := make([][]byte, benchRecords)
	for i := range records {
		records[i] = benchPlainRecord(b, i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		j, err := job.Decode(records[i%benchRecords], job.Limits{})
		if err != nil || j.Text == "" {
			b.Fatal(err)
		}
		i++
	}
}

func newBenchFixture(tb testing.TB) *fixture {
	tb.Helper()
	f := &fixture{store: newFakeStore()}
	var err error
	if f.w, err = templatestore.NewWatcher(templatestore.WatcherConfig{}, f.store, nil, nil); err != nil {
		tb.Fatal(err)
	}
	if f.c, err = New(Config{}, nil, nil, f.store, f.w); err != nil {
		tb.Fatal(err)
	}
	layout, tmpl := benchReceipt()
	f.store.put(layout)
	f.store.put(tmpl)
	f.store.label(layout.Name, templatestore.LabelActive, 1, 0)
	f.store.label(tmpl.Name, templatestore.LabelActive, 1, 0)
	if _, err := f.w.Poll(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return f
}
