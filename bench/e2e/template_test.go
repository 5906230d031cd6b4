package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/postline/postline/internal/render"
	"github.com/postline/postline/job"
)

// TestTemplateJobsRender: the pushed template compiles with its layout and
// renders every part of a job's data (round-tripped through JSON, as the
// worker decodes it), and the jobs are template jobs with distinct data.
func TestTemplateJobsRender(t *testing.T) {
	layout, tmpl := templateDrafts()
	c, err := render.Compile(render.Version{Template: tmpl.Name, Number: 1, Subject: tmpl.Subject, Text: tmpl.TextBody,
		HTML: tmpl.HTMLBody, Layout: tmpl.Layout, Schema: tmpl.DataSchema},
		map[string]render.Layout{layout.Name: {Name: layout.Name, Text: layout.TextBody, HTML: layout.HTMLBody}})
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	jobs := templateJobs(3, 1024)
	for i, j := range jobs {
		if !j.Templated() || j.Template.Name != benchTemplate {
			t.Fatalf("job %d is not a template job of %s: %+v", i, benchTemplate, j)
		}
		j.MessageID = "bench-" + strconv.Itoa(i) + "@postline.test" // job.Publisher sets it on publish
		if err := j.Validate(job.Limits{}); err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		d, err := job.Decode(b, job.Limits{})
		if err != nil {
			t.Fatalf("decode job %d: %v", i, err)
		}
		out, err := c.Render("", d.Template.Data)
		if err != nil {
			t.Fatalf("render job %d: %v", i, err)
		}
		items := d.Template.Data["items"].([]any)
		if len(items) != benchTemplateItems {
			t.Fatalf("job %d has %d items", i, len(items))
		}
		for _, part := range []string{out.Text, out.HTML} {
			for _, want := range []string{d.Template.Data["order"].(string), "Postline Bench Shop"} {
				if !strings.Contains(part, want) {
					t.Errorf("job %d: part lacks %q:\n%s", i, want, part)
				}
			}
			for _, it := range items {
				if sku := it.(map[string]any)["sku"].(string); !strings.Contains(part, sku) {
					t.Errorf("job %d: part lacks line item %s", i, sku)
				}
			}
		}
		if !strings.Contains(out.Subject, d.Template.Data["name"].(string)) {
			t.Errorf("job %d: subject %q lacks the name", i, out.Subject)
		}
	}
	if jobs[0].Template.Data["order"] == jobs[1].Template.Data["order"] {
		t.Error("two jobs share their data")
	}
}
