package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/postline/postline/internal/render"
	"github.com/postline/postline/internal/templatestore"
)

const examplesDir = "../../examples/templates"

// writeTree writes files (path relative to root → content) under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// noLayouts is a lookup that finds nothing outside the directory.
func noLayouts(context.Context, string) (render.Layout, bool, error) {
	return render.Layout{}, false, nil
}

func TestLoadTemplateDirExamples(t *testing.T) {
	tmpls, err := loadTemplateDir(examplesDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(tmpls) != 2 || tmpls[0].Draft.Name != "base" || tmpls[1].Draft.Name != "receipt" {
		t.Fatalf("templates: %+v", tmpls)
	}
	base, receipt := tmpls[0].Draft, tmpls[1].Draft
	if base.Kind != templatestore.KindLayout || base.Subject != "" || !strings.Contains(base.HTMLBody, `{{template "content" .}}`) {
		t.Errorf("base: %+v", base)
	}
	if receipt.Kind != templatestore.KindTemplate || receipt.Layout != "base" || receipt.DefaultLocale != "en" ||
		len(receipt.DataSchema) == 0 || len(receipt.SampleData) == 0 {
		t.Errorf("receipt: %+v", receipt)
	}
	if strings.Contains(receipt.Subject, "\n") {
		t.Errorf("subject keeps its newline: %q", receipt.Subject)
	}
	var locs map[string]localePartsJSON
	if err := json.Unmarshal(receipt.Locales, &locs); err != nil {
		t.Fatal(err)
	}
	if fr := locs["fr"]; len(locs) != 1 || !strings.HasPrefix(fr.Subject, "Reçu") || fr.Text == "" || fr.HTML == "" {
		t.Errorf("locales: %+v", locs)
	}
	if err := checkTemplates(t.Context(), noLayouts, tmpls); err != nil {
		t.Errorf("check: %v", err)
	}
	// What push stores is what render gets back: the fr subject renders.
	v, err := renderVersion(draftVersion(receipt, 1), receipt.DefaultLocale)
	if err != nil {
		t.Fatal(err)
	}
	c, err := render.Compile(v, map[string]render.Layout{"base": renderLayout(draftVersion(base, 1))})
	if err != nil {
		t.Fatal(err)
	}
	data, err := decodeTemplateData(receipt.SampleData)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Render("fr-CA", data)
	if err != nil {
		t.Fatal(err)
	}
	if r.Subject != "Reçu R-1042 pour Ada Lovelace" || r.Locale != "fr" || !strings.Contains(r.HTML, "<td>Punched cards (500)</td>") {
		t.Errorf("render: %+v", r)
	}
}

func TestLoadTemplateErrors(t *testing.T) {
	good := map[string]string{"subject.txt": "Hi {{.name}}\n", "text.txt": "Hello {{.name}}\n"}
	with := func(extra map[string]string, drop ...string) map[string]string {
		m := map[string]string{}
		for k, v := range good {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		for _, k := range drop {
			delete(m, k)
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		folder string
		files  map[string]string
		want   string
	}{
		{"bad folder name", "Hello", good, "folder name"},
		{"unknown file", "hi", with(map[string]string{"body.html": "x"}), `unknown file "body.html"`},
		{"no subject", "hi", with(nil, "subject.txt"), "subject.txt is missing or empty"},
		{"no body", "hi", with(nil, "text.txt"), "needs text.txt, html.html or both"},
		{"bad kind", "hi", with(map[string]string{"template.yaml": "kind: partial\n"}), `kind "partial"`},
		{"unknown yaml field", "hi", with(map[string]string{"template.yaml": "layuot: base\n"}), "layuot"},
		{"bad layout name", "hi", with(map[string]string{"template.yaml": "layout: Base\n"}), "layout"},
		{"layout with layout", "hi", with(map[string]string{"template.yaml": "kind: layout\nlayout: x\n"}), "a layout cannot have a layout"},
		{"layout with subject", "hi", with(map[string]string{"template.yaml": "kind: layout\n"}), "a layout has no subject"},
		{"schema not JSON", "hi", with(map[string]string{"schema.json": "{"}), "schema.json is not valid JSON"},
		{"sample not an object", "hi", with(map[string]string{"sample.json": "[1]"}), "sample.json: not a JSON object"},
		{"sample null", "hi", with(map[string]string{"sample.json": "null"}), "sample.json: not a JSON object"},
		{"locale unknown file", "hi", with(map[string]string{"locales/fr/body.txt": "x"}), `locales/fr: unknown file "body.txt"`},
		{"locale file at top", "hi", with(map[string]string{"locales/fr.txt": "x"}), "want a folder per locale"},
		{"locales is a file", "hi", with(map[string]string{"locales": "x"}), "locales: want a folder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, filepath.Join(root, tc.folder), tc.files)
			_, err := loadTemplateDir(root)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "template "+tc.folder) {
				t.Errorf("err = %v, want one naming %s and containing %q", err, tc.folder, tc.want)
			}
		})
	}
	t.Run("empty directory", func(t *testing.T) {
		root := t.TempDir()
		writeTree(t, root, map[string]string{"README.md": "x"})
		if _, err := loadTemplateDir(root); err == nil || !strings.Contains(err.Error(), "no template folders") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("missing directory", func(t *testing.T) {
		if _, err := loadTemplateDir(filepath.Join(t.TempDir(), "nope")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("err = %v", err)
		}
	})
}

func TestCheckTemplatesErrors(t *testing.T) {
	const secret = "s3cret-value-42"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"html syntax", map[string]string{"hi/subject.txt": "Hi", "hi/html.html": "<p>{{.name</p>"},
			[]string{"hi (", "html", "parse/syntax"}},
		{"missing layout", map[string]string{"hi/subject.txt": "Hi", "hi/text.txt": "x", "hi/template.yaml": "layout: nope\n"},
			[]string{`layout "nope" not found`}},
		{"layout without content", map[string]string{"frame/template.yaml": "kind: layout\n", "frame/text.txt": "no call\n"},
			[]string{"frame (", "content"}},
		{"sample fails the schema", map[string]string{"hi/subject.txt": "Hi {{.name}}", "hi/text.txt": "x",
			"hi/schema.json": `{"type":"object","properties":{"name":{"type":"integer"}}}`,
			"hi/sample.json": `{"name":"` + secret + `"}`},
			[]string{"rendering sample.json", "schema/data_invalid"}},
		{"sample misses a key", map[string]string{"hi/subject.txt": "Hi {{.name}}", "hi/text.txt": "x",
			"hi/sample.json": `{"other":"` + secret + `"}`},
			[]string{"missing_key"}},
		{"locale fails", map[string]string{"hi/subject.txt": "Hi", "hi/text.txt": "x",
			"hi/locales/fr/text.txt": "{{.nom}}", "hi/sample.json": `{"name":"` + secret + `"}`},
			[]string{"(fr)", "missing_key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, tc.files)
			writeTree(t, root, map[string]string{"ok/subject.txt": "fine", "ok/text.txt": "fine"})
			tmpls, err := loadTemplateDir(root)
			if err != nil {
				t.Fatal(err)
			}
			err = checkTemplates(t.Context(), noLayouts, tmpls)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			for _, w := range append(tc.want, "1 of 2 templates fail, nothing pushed") {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if strings.Contains(msg, secret) {
				t.Errorf("error %q shows a data value", msg)
			}
		})
	}
}

func TestUnifiedDiff(t *testing.T) {
	for _, tc := range []struct {
		name, a, b, want string
	}{
		{"equal", "a\nb\n", "a\nb\n", ""},
		{"change in the middle", "1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\nfive\n6\n7\n8\n9\n",
			"--- A\n+++ B\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"},
		{"from nothing", "", "x\ny\n", "--- A\n+++ B\n@@ -0,0 +1,2 @@\n+x\n+y\n"},
		{"to nothing", "x\n", "", "--- A\n+++ B\n@@ -1 +0,0 @@\n-x\n"},
		{"two hunks", "a\n1\n2\n3\n4\n5\n6\n7\n8\nb\n", "A\n1\n2\n3\n4\n5\n6\n7\n8\nB\n",
			"--- A\n+++ B\n@@ -1,4 +1,4 @@\n-a\n+A\n 1\n 2\n 3\n@@ -7,4 +7,4 @@\n 6\n 7\n 8\n-b\n+B\n"},
		{"close changes share a hunk", "a\n1\n2\nb\n", "A\n1\n2\nB\n",
			"--- A\n+++ B\n@@ -1,4 +1,4 @@\n-a\n+A\n 1\n 2\n-b\n+B\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := unifiedDiff("A", "B", tc.a, tc.b); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestEditScriptRoundTrip checks on random inputs that the script's kept
// and removed lines are a, its kept and added lines are b, and it keeps a
// longest common subsequence (as long as a plain DP computes).
func TestEditScriptRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lines := func() []string {
		out := make([]string, rng.IntN(12))
		for i := range out {
			out[i] = string(rune('a' + rng.IntN(4)))
		}
		return out
	}
	for range 2000 {
		a, b := lines(), lines()
		var gotA, gotB []string
		kept := 0
		for _, op := range editScript(a, b) {
			if op.kind != '+' {
				gotA = append(gotA, op.line)
			}
			if op.kind != '-' {
				gotB = append(gotB, op.line)
			}
			if op.kind == ' ' {
				kept++
			}
		}
		if strings.Join(gotA, ",") != strings.Join(a, ",") || strings.Join(gotB, ",") != strings.Join(b, ",") {
			t.Fatalf("a=%v b=%v: script gives %v and %v", a, b, gotA, gotB)
		}
		if want := lcsLen(a, b); kept != want {
			t.Fatalf("a=%v b=%v: kept %d lines, LCS is %d", a, b, kept, want)
		}
	}
}

func lcsLen(a, b []string) int {
	prev := make([]int, len(b)+1)
	for i := range a {
		cur := make([]int, len(b)+1)
		for j := range b {
			if a[i] == b[j] {
				cur[j+1] = prev[j] + 1
			} else {
				cur[j+1] = max(prev[j+1], cur[j])
			}
		}
		prev = cur
	}
	return prev[len(b)]
}

// FuzzUnifiedDiff checks that a unified diff of a and b, applied to a,
// gives b: every hunk's context and removed lines are a's at the hunk's
// position, and the output is bounded by the inputs' size.
func FuzzUnifiedDiff(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nc\nd\n")
	f.Add("", "x")
	f.Add("1\n2\n3\n4\n5\n6\n7\n8\n9\n", "0\n2\n3\n4\n5\n6\n7\n8\nnine\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		if len(a) > 4096 || len(b) > 4096 {
			return
		}
		// Lines are compared without their "\n", so a final line without
		// one diffs as if it had it.
		norm := func(s string) string { return strings.Join(splitLines(s), "\n") }
		d := unifiedDiff("A", "B", a, b)
		if norm(a) == norm(b) {
			if a == b && d != "" {
				t.Fatalf("equal inputs, diff %q", d)
			}
			return
		}
		if len(d) > 4*(len(a)+len(b))+64*(strings.Count(a, "\n")+strings.Count(b, "\n")+2) {
			t.Fatalf("diff of %d bytes for inputs of %d and %d", len(d), len(a), len(b))
		}
		got, err := applyUnified(splitLines(a), d)
		if err != nil {
			t.Fatalf("a=%q b=%q diff=%q: %v", a, b, d, err)
		}
		if strings.Join(got, "\n") != norm(b) {
			t.Fatalf("a=%q b=%q diff=%q: applied gives %q", a, b, d, got)
		}
	})
}

// applyUnified applies the hunks of diff d to a.
func applyUnified(a []string, d string) ([]string, error) {
	lines := splitLines(d)
	if len(lines) < 2 || lines[0] != "--- A" || lines[1] != "+++ B" {
		return nil, errors.New("bad header")
	}
	var out []string
	pos := 0 // next line of a to copy
	for _, l := range lines[2:] {
		if strings.HasPrefix(l, "@@ -") {
			var startA, lenA int
			r := strings.Fields(l)[1][1:]
			if n, _ := fmt.Sscanf(r, "%d,%d", &startA, &lenA); n == 1 {
				lenA = 1
			}
			if lenA > 0 {
				startA--
			}
			if startA < pos || startA > len(a) {
				return nil, fmt.Errorf("hunk %q out of order", l)
			}
			out = append(out, a[pos:startA]...)
			pos = startA
			continue
		}
		if l == "" {
			return nil, errors.New("empty diff line")
		}
		switch l[0] {
		case ' ', '-':
			if pos >= len(a) || a[pos] != l[1:] {
				return nil, fmt.Errorf("line %q does not match a[%d]", l, pos)
			}
			if l[0] == ' ' {
				out = append(out, l[1:])
			}
			pos++
		case '+':
			out = append(out, l[1:])
		default:
			return nil, fmt.Errorf("bad line %q", l)
		}
	}
	return append(out, a[pos:]...), nil
}
