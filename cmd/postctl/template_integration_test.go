package main

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/postline/postline/internal/testenv"
)

// templateSchema returns the URL of a fresh schema holding the template
// tables (their migrations applied on their own).
func templateSchema(t *testing.T) string {
	t.Helper()
	url, pool := testenv.NewSchema(t)
	for _, m := range []string{"0009_templates.sql", "0015_template_label_history.sql"} {
		ddl, err := os.ReadFile("../../internal/schema/migrations/" + m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(t.Context(), string(ddl)); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
	}
	return url
}

// copyExamples copies examples/templates into a temporary directory the
// test may change.
func copyExamples(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(examplesDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(examplesDir, p)
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		writeTree(t, dst, map[string]string{filepath.ToSlash(rel): string(b)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

type lsJSON struct {
	Templates []struct {
		Name          string `json:"name"`
		Kind          string `json:"kind"`
		Description   string `json:"description"`
		LatestVersion int    `json:"latest_version"`
		Labels        []struct {
			Label   string `json:"label"`
			Version int    `json:"version"`
			Percent int    `json:"percent"`
		} `json:"labels"`
	} `json:"templates"`
}

// labels returns ls's labels of name as "label=version[/percent]".
func (l lsJSON) labels(name string) string {
	var out []string
	for _, tm := range l.Templates {
		if tm.Name != name {
			continue
		}
		for _, lb := range tm.Labels {
			s := lb.Label + "=" + itoa(lb.Version)
			if lb.Percent != 0 {
				s += "/" + itoa(lb.Percent)
			}
			out = append(out, s)
		}
	}
	return strings.Join(out, ",")
}

func (l lsJSON) latest(name string) int {
	for _, tm := range l.Templates {
		if tm.Name == name {
			return tm.LatestVersion
		}
	}
	return -1
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestTemplatePostgres(t *testing.T) {
	url := templateSchema(t)
	run := func(args ...string) (string, error) {
		t.Helper()
		out, _, err := postctl(t, nil, "", append([]string{"--database-url", url}, args...)...)
		return out, err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("postctl %v: %v", args, err)
		}
		return out
	}
	ls := func() lsJSON {
		t.Helper()
		var l lsJSON
		if err := json.Unmarshal([]byte(must("template", "ls", "-o", "json")), &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	push := func(args ...string) pushOutput {
		t.Helper()
		var p pushOutput
		if err := json.Unmarshal([]byte(must(append([]string{"template", "push", "-o", "json"}, args...)...)), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dir := copyExamples(t)

	// The examples push as they are; a second push adds nothing.
	p := push(dir)
	if len(p.Templates) != 2 || !p.Templates[0].Created || !p.Templates[1].Created || p.Templates[1].Version != 1 {
		t.Fatalf("first push: %+v", p)
	}
	if p = push(dir); p.Templates[0].Created || p.Templates[1].Created || p.Templates[1].Version != 1 {
		t.Errorf("second push: %+v", p)
	}
	l := ls()
	if len(l.Templates) != 2 || l.latest("base") != 1 || l.latest("receipt") != 1 || l.labels("receipt") != "" ||
		l.Templates[0].Kind != "layout" || l.Templates[1].Description != "Payment receipt with its line items" {
		t.Errorf("ls after pushes: %+v", l)
	}
	if out := must("template", "ls"); !strings.Contains(out, "receipt") || !strings.Contains(out, "ACTIVE") {
		t.Errorf("ls text: %q", out)
	}

	// A changed file: the dry run reports it and adds nothing, the push
	// with --activate adds and activates version 2.
	writeTree(t, dir, map[string]string{"receipt/text.txt": "Hello {{.name}},\n\nReceipt {{.number}} is paid: {{.total}} {{.currency}}.\n"})
	if p = push(dir, "--dry-run"); !p.DryRun || p.Templates[0].Created || !p.Templates[1].Created {
		t.Errorf("dry run: %+v", p)
	}
	if l = ls(); l.latest("receipt") != 1 {
		t.Errorf("dry run pushed: latest %d", l.latest("receipt"))
	}
	p = push(dir, "--activate")
	if p.Templates[0].Created || p.Templates[0].Activated || !p.Templates[1].Created || !p.Templates[1].Activated || p.Templates[1].Version != 2 {
		t.Errorf("push --activate: %+v", p)
	}
	if l = ls(); l.latest("receipt") != 2 || l.labels("receipt") != "active=2" || l.labels("base") != "" {
		t.Errorf("ls after activate push: %+v", l)
	}

	// A broken template refuses the whole push, the good changes too.
	writeTree(t, dir, map[string]string{
		"receipt/subject.txt": "Your receipt {{.number}}\n",
		"base/html.html":      "<html>{{template \"content\" .}}{{if}}</html>\n",
	})
	_, err := run("template", "push", dir)
	if err == nil || !strings.Contains(err.Error(), "base (") || !strings.Contains(err.Error(), "nothing pushed") ||
		!strings.Contains(err.Error(), `template "base" version 2 html`) {
		t.Errorf("broken push: %v", err)
	}
	if l = ls(); l.latest("receipt") != 2 || l.latest("base") != 1 {
		t.Errorf("broken push changed versions: %+v", l)
	}
	// Sample data that fails the schema is named without its values.
	writeTree(t, dir, map[string]string{
		"base/html.html":      "<html>{{template \"content\" .}}</html>\n",
		"receipt/sample.json": `{"name": "Zed Secretvalue", "number": "R-1", "paid_at": "2026-01-01T00:00:00Z", "items": [], "total": "0", "currency": "euro"}`,
	})
	_, err = run("template", "push", dir)
	if err == nil || !strings.Contains(err.Error(), "receipt (") || !strings.Contains(err.Error(), "data_invalid") ||
		strings.Contains(err.Error(), "Secretvalue") || strings.Contains(err.Error(), "euro") {
		t.Errorf("push with bad sample: %v", err)
	}
	if l = ls(); l.latest("receipt") != 2 || l.latest("base") != 1 {
		t.Errorf("bad sample push changed versions: %+v", l)
	}

	// A folder whose kind differs from the stored template's pushes nothing.
	writeTree(t, dir, map[string]string{"base/template.yaml": "kind: template\n", "base/subject.txt": "Base\n"})
	_, err = run("template", "push", dir)
	if err == nil || !strings.Contains(err.Error(), "base (") || !strings.Contains(err.Error(), "stored as a layout") {
		t.Errorf("push changing a kind: %v", err)
	}
	if l = ls(); l.latest("receipt") != 2 || l.latest("base") != 1 {
		t.Errorf("kind change push changed versions: %+v", l)
	}

	// show: JSON of a version and the labels on it.
	var shown versionRecord
	if err := json.Unmarshal([]byte(must("template", "show", "receipt", "--version", "1", "-o", "json")), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.Version != 1 || shown.Kind != "template" || shown.Layout != "base" || !strings.Contains(shown.Text, "Thank you") ||
		len(shown.Schema) == 0 || len(shown.SampleData) == 0 || len(shown.ContentHash) != 64 || len(shown.Labels) != 0 {
		t.Errorf("show 1: %+v", shown)
	}
	var locs map[string]localePartsJSON
	if err := json.Unmarshal(shown.Locales, &locs); err != nil || !strings.HasPrefix(locs["fr"].Subject, "Reçu") {
		t.Errorf("show 1 locales: %s (%v)", shown.Locales, err)
	}
	if err := json.Unmarshal([]byte(must("template", "show", "receipt", "-o", "json")), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.Version != 2 || strings.Join(shown.Labels, ",") != "active" {
		t.Errorf("show active: version %d labels %v", shown.Version, shown.Labels)
	}
	if out := must("template", "show", "receipt"); !strings.Contains(out, "==> locales/fr/subject.txt <==") ||
		!strings.Contains(out, "==> schema.json <==") {
		t.Errorf("show text: %q", out)
	}

	// diff: only text.txt changed between 1 and 2.
	out := must("template", "diff", "receipt", "1", "2")
	if !strings.HasPrefix(out, "--- receipt@1/text.txt\n+++ receipt@2/text.txt\n@@ ") ||
		!strings.Contains(out, "\n-Thank you for your payment.") || !strings.Contains(out, "\n+Receipt {{.number}} is paid") ||
		!strings.Contains(out, "\n Hello {{.name}},\n") || strings.Count(out, "--- ") != 1 {
		t.Errorf("diff 1 2:\n%s", out)
	}
	if out := must("template", "diff", "receipt", "2", "2"); out != "" {
		t.Errorf("diff 2 2: %q", out)
	}

	// activate, canary, rollback. Activating 1 keeps 2, active before, as
	// the fallback.
	must("template", "activate", "receipt", "1")
	must("template", "canary", "receipt", "2", "--percent", "10")
	if l = ls(); l.labels("receipt") != "active=1,canary=2/10,fallback=2" {
		t.Errorf("after canary: %s", l.labels("receipt"))
	}
	if out := must("template", "canary", "receipt", "--off"); !strings.Contains(out, "canary removed") {
		t.Errorf("canary --off: %q", out)
	}
	if out := must("template", "canary", "receipt", "--off"); !strings.Contains(out, "no canary") {
		t.Errorf("second canary --off: %q", out)
	}
	var rolled struct {
		Name    string `json:"name"`
		Label   string `json:"label"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal([]byte(must("template", "rollback", "receipt", "-o", "json")), &rolled); err != nil {
		t.Fatal(err)
	}
	if rolled.Name != "receipt" || rolled.Label != "active" || rolled.Version != 2 {
		t.Errorf("rollback: %+v", rolled)
	}
	if l = ls(); l.labels("receipt") != "active=2,fallback=2" {
		t.Errorf("after rollback: %s", l.labels("receipt"))
	}
	if _, err := run("template", "activate", "receipt", "9"); err == nil {
		t.Error("activate of a missing version: no error")
	}
	if _, err := run("template", "rollback", "base"); err == nil {
		t.Error("rollback without history: no error")
	}

	// preview: version 1 in French with its sample data, HTML to a file
	// wrapped in the base layout.
	// Mail is wrapped in the layout's active version: without one (and
	// no built-in layout of that name) preview fails as mail would.
	if _, err := run("template", "preview", "receipt"); err == nil || !strings.Contains(err.Error(), `layout "base" not found`) {
		t.Errorf("preview without an active layout: %v", err)
	}
	must("template", "activate", "base", "1")
	htmlFile := filepath.Join(t.TempDir(), "receipt.html")
	out = must("template", "preview", "receipt", "--version", "1", "--locale", "fr", "--html", htmlFile)
	if !strings.Contains(out, "Subject: Reçu R-1042 pour Ada Lovelace") || !strings.Contains(out, "Merci pour votre paiement") ||
		!strings.Contains(out, "locale fr") {
		t.Errorf("preview text: %q", out)
	}
	html, err := os.ReadFile(htmlFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "<!DOCTYPE html>") || !strings.Contains(string(html), "<td>Punched cards (500)</td>") ||
		!strings.Contains(string(html), "Bonjour Ada Lovelace") {
		t.Errorf("preview html: %s", html)
	}
	// Given data, the active version (2), JSON output.
	dataFile := filepath.Join(t.TempDir(), "data.json")
	writeTree(t, filepath.Dir(dataFile), map[string]string{"data.json": `{"name": "Grace", "number": "R-7", "paid_at": "2026-05-01T00:00:00Z",
		"items": [], "total": "1.00", "currency": "USD"}`})
	var pv struct {
		Version int    `json:"version"`
		Subject string `json:"subject"`
		Text    string `json:"text"`
	}
	if err := json.Unmarshal([]byte(must("template", "preview", "receipt", "--data", dataFile, "-o", "json")), &pv); err != nil {
		t.Fatal(err)
	}
	if pv.Version != 2 || pv.Subject != "Receipt R-7 for Grace" || !strings.Contains(pv.Text, "Receipt R-7 is paid: 1.00 USD.") {
		t.Errorf("preview json: %+v", pv)
	}
	empty := filepath.Join(t.TempDir(), "empty.json")
	writeTree(t, filepath.Dir(empty), map[string]string{"empty.json": ""})
	if _, err := run("template", "preview", "receipt", "--data", empty); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Errorf("preview with empty data: %v", err)
	}
	if _, err := run("template", "preview", "receipt", "--label", "canary"); err == nil || !strings.Contains(err.Error(), "no canary label") {
		t.Errorf("preview of a missing label: %v", err)
	}
}

func TestTemplateArgumentErrors(t *testing.T) {
	for _, args := range [][]string{
		{"template", "push"},
		{"template", "diff", "receipt", "1"},
		{"template", "diff", "receipt", "1", "x"},
		{"template", "activate", "receipt", "0"},
		{"template", "activate", "Bad Name", "1"},
		{"template", "canary", "receipt", "2"},
		{"template", "canary", "receipt", "2", "--percent", "101"},
		{"template", "canary", "receipt", "--off", "--percent", "5"},
		{"template", "preview", "receipt", "--version", "1", "--label", "active"},
		{"template", "preview", "receipt", "--label", "beta"},
		{"template", "push", "dir", "--keep-fallback"},
		{"template", "activate", "receipt", "2", "--reason", "two\nlines"},
		{"template", "fallback", "receipt"},
		{"template", "fallback", "receipt", "0"},
		{"template", "fallback", "Bad Name", "1"},
		{"template", "history"},
		{"template", "history", "Bad Name"},
	} {
		_, _, err := postctl(t, nil, "", args...)
		if err == nil || exitCode(err) != exitUsage {
			t.Errorf("%v: err = %v, want a usage error", args, err)
		}
	}
}
