package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/postline/postline/internal/render"
	"github.com/postline/postline/internal/templatestore"
)

// Files of a template directory (see templateLayoutHelp).
const (
	tmplMetaFile    = "template.yaml"
	tmplSubjectFile = "subject.txt"
	tmplTextFile    = "text.txt"
	tmplHTMLFile    = "html.html"
	tmplSchemaFile  = "schema.json"
	tmplSampleFile  = "sample.json"
	tmplLocalesDir  = "locales"
	// tmplMaxFile bounds one file of a template directory; render bounds
	// the sources of a version as a whole.
	tmplMaxFile = 1 << 20
)

// templateLayoutHelp documents the directory layout push reads.
const templateLayoutHelp = `A template directory holds one folder per template, named after it (a
slug: lowercase letters, digits, '-' and '_' inside):

  DIR/NAME/template.yaml     description, default_locale, kind (template or
                             layout; default template), layout (the name of
                             the layout template to wrap it in; optional)
  DIR/NAME/subject.txt       the subject (required for a template; a layout
                             has none)
  DIR/NAME/text.txt          the text part (a template needs text.txt,
  DIR/NAME/html.html         html.html or both; in a layout each part calls
                             {{template "content" .}})
  DIR/NAME/schema.json       optional JSON Schema of the data
  DIR/NAME/sample.json       optional sample data (a JSON object), rendered
                             before a push and by preview
  DIR/NAME/locales/TAG/subject.txt, text.txt, html.html
                             optional overrides for a BCP 47 locale ("fr",
                             "fr-CA"); a missing file inherits the base part

Files at the top of DIR (README.md, say) and folders whose name starts with
"." are ignored; an unknown file inside a template's folder is an error.`

// templateMeta is template.yaml.
type templateMeta struct {
	Description   string `yaml:"description"`
	DefaultLocale string `yaml:"default_locale"`
	Kind          string `yaml:"kind"`
	Layout        string `yaml:"layout"`
}

// localePartsJSON is one locale's overrides as stored in a version's
// locales document: {"fr": {"subject": ..., "text": ..., "html": ...}}.
type localePartsJSON struct {
	Subject string `json:"subject,omitempty"`
	Text    string `json:"text,omitempty"`
	HTML    string `json:"html,omitempty"`
}

// templateDir is one template read from a directory.
type templateDir struct {
	Dir   string
	Draft templatestore.Draft
	// Number is the version a push would add (latest + 1), which names
	// the version in compile errors; 0 when not known.
	Number int
}

// loadTemplateDir reads every template folder of dir, ordered by name.
func loadTemplateDir(dir string) ([]templateDir, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("template directory: %w", err)
	}
	var out []templateDir
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		t, err := loadTemplate(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("template directory %s: no template folders", dir)
	}
	return out, nil
}

// loadTemplate reads one template folder; its name is the folder's.
func loadTemplate(dir string) (templateDir, error) {
	name := filepath.Base(dir)
	t := templateDir{Dir: dir}
	d, err := readTemplateDraft(dir, name)
	if err != nil {
		return t, fmt.Errorf("template %s: %w", name, err)
	}
	t.Draft = d
	return t, nil
}

// readTemplateDraft reads and checks the files of the template folder dir.
func readTemplateDraft(dir, name string) (templatestore.Draft, error) {
	var d templatestore.Draft
	if err := templatestore.ValidateName(name); err != nil {
		return d, fmt.Errorf("folder name: %w", err)
	}
	if err := checkTemplateEntries(dir); err != nil {
		return d, err
	}
	d, err := readTemplateMeta(dir, name)
	if err != nil {
		return d, err
	}
	if d.Subject, d.TextBody, d.HTMLBody, err = readTemplateParts(dir); err != nil {
		return d, err
	}
	if err := checkTemplateParts(d); err != nil {
		return d, err
	}
	if err := readTemplateData(dir, &d); err != nil {
		return d, err
	}
	locales, err := readTemplateLocales(dir)
	if err != nil {
		return d, err
	}
	if len(locales) > 0 {
		if d.Kind == templatestore.KindLayout {
			return d, fmt.Errorf("a layout has no %s", tmplLocalesDir)
		}
		b, err := json.Marshal(locales)
		if err != nil {
			return d, fmt.Errorf("locales: %w", err)
		}
		d.Locales = b
	}
	return d, nil
}

// checkTemplateEntries rejects what a template folder may not hold.
func checkTemplateEntries(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	known := []string{tmplMetaFile, tmplSubjectFile, tmplTextFile, tmplHTMLFile, tmplSchemaFile, tmplSampleFile, tmplLocalesDir}
	for _, e := range entries {
		if !slices.Contains(known, e.Name()) {
			return fmt.Errorf("unknown file %q (want %s)", e.Name(), strings.Join(known, ", "))
		}
		if e.IsDir() != (e.Name() == tmplLocalesDir) {
			return fmt.Errorf("%s: want a %s", e.Name(), map[bool]string{true: "folder", false: "file"}[e.Name() == tmplLocalesDir])
		}
	}
	return nil
}

// readTemplateMeta reads the folder's metadata file (optional) into a
// draft: its kind, description, default locale and layout.
func readTemplateMeta(dir, name string) (templatestore.Draft, error) {
	meta, err := readTemplateFile(dir, tmplMetaFile)
	if err != nil {
		return templatestore.Draft{}, err
	}
	var m templateMeta
	if meta != "" {
		dec := yaml.NewDecoder(strings.NewReader(meta))
		dec.KnownFields(true)
		if err := dec.Decode(&m); err != nil && !errors.Is(err, io.EOF) {
			return templatestore.Draft{}, fmt.Errorf("%s: %w", tmplMetaFile, err)
		}
	}
	d := templatestore.Draft{Name: name, Kind: m.Kind, Description: m.Description, DefaultLocale: m.DefaultLocale, Layout: m.Layout}
	if d.Kind == "" {
		d.Kind = templatestore.KindTemplate
	}
	if d.Kind != templatestore.KindTemplate && d.Kind != templatestore.KindLayout {
		return d, fmt.Errorf("%s: kind %q is not %s or %s", tmplMetaFile, d.Kind, templatestore.KindTemplate, templatestore.KindLayout)
	}
	if d.Layout != "" {
		if d.Kind == templatestore.KindLayout {
			return d, fmt.Errorf("%s: a layout cannot have a layout", tmplMetaFile)
		}
		if err := templatestore.ValidateName(d.Layout); err != nil {
			return d, fmt.Errorf("%s: layout: %w", tmplMetaFile, err)
		}
	}
	return d, nil
}

// checkTemplateParts checks the subject and bodies a draft of its kind
// needs.
func checkTemplateParts(d templatestore.Draft) error {
	switch d.Kind {
	case templatestore.KindLayout:
		if d.Subject != "" {
			return fmt.Errorf("%s: a layout has no subject", tmplSubjectFile)
		}
		if d.TextBody == "" && d.HTMLBody == "" {
			return fmt.Errorf("a layout needs %s or %s", tmplTextFile, tmplHTMLFile)
		}
	default:
		if d.Subject == "" {
			return fmt.Errorf("%s is missing or empty", tmplSubjectFile)
		}
		if d.TextBody == "" && d.HTMLBody == "" {
			return fmt.Errorf("needs %s, %s or both", tmplTextFile, tmplHTMLFile)
		}
	}
	return nil
}

// readTemplateData reads the data schema and the sample data (JSON, both
// optional; a layout has neither) into d.
func readTemplateData(dir string, d *templatestore.Draft) error {
	for _, f := range []struct {
		file string
		dst  *json.RawMessage
	}{{tmplSchemaFile, &d.DataSchema}, {tmplSampleFile, &d.SampleData}} {
		s, err := readTemplateFile(dir, f.file)
		if err != nil {
			return err
		}
		if s == "" {
			continue
		}
		if !json.Valid([]byte(s)) {
			return fmt.Errorf("%s is not valid JSON", f.file)
		}
		*f.dst = json.RawMessage(s)
	}
	if len(d.SampleData) > 0 {
		if _, err := decodeTemplateData(d.SampleData); err != nil {
			return fmt.Errorf("%s: %w", tmplSampleFile, err)
		}
	}
	if d.Kind == templatestore.KindLayout && (len(d.DataSchema) > 0 || len(d.SampleData) > 0) {
		return fmt.Errorf("a layout has no %s or %s", tmplSchemaFile, tmplSampleFile)
	}
	return nil
}

// readTemplateParts reads subject.txt, text.txt and html.html of dir, each
// optional. A subject is one line: its trailing newline is dropped.
func readTemplateParts(dir string) (subject, text, html string, err error) {
	if subject, err = readTemplateFile(dir, tmplSubjectFile); err != nil {
		return
	}
	subject = strings.TrimRight(subject, "\r\n")
	if text, err = readTemplateFile(dir, tmplTextFile); err != nil {
		return
	}
	html, err = readTemplateFile(dir, tmplHTMLFile)
	return
}

// readTemplateLocales reads dir/locales/TAG/ folders.
func readTemplateLocales(dir string) (map[string]localePartsJSON, error) {
	root := filepath.Join(dir, tmplLocalesDir)
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]localePartsJSON{}
	for _, e := range entries {
		if !e.IsDir() {
			return nil, fmt.Errorf("%s/%s: want a folder per locale", tmplLocalesDir, e.Name())
		}
		ldir := filepath.Join(root, e.Name())
		files, err := os.ReadDir(ldir)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if f.Name() != tmplSubjectFile && f.Name() != tmplTextFile && f.Name() != tmplHTMLFile {
				return nil, fmt.Errorf("%s/%s: unknown file %q (want %s, %s, %s)", tmplLocalesDir, e.Name(), f.Name(),
					tmplSubjectFile, tmplTextFile, tmplHTMLFile)
			}
		}
		var p localePartsJSON
		if p.Subject, p.Text, p.HTML, err = readTemplateParts(ldir); err != nil {
			return nil, err
		}
		if p == (localePartsJSON{}) {
			return nil, fmt.Errorf("%s/%s: no parts", tmplLocalesDir, e.Name())
		}
		out[e.Name()] = p
	}
	return out, nil
}

// readTemplateFile returns the content of dir/name, "" when it is missing.
func readTemplateFile(dir, name string) (string, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := readLimited(f, name)
	return string(b), err
}

// readLimited reads r, named name in errors, refusing more than
// tmplMaxFile bytes.
func readLimited(r io.Reader, name string) ([]byte, error) {
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(r, tmplMaxFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if n > tmplMaxFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, tmplMaxFile)
	}
	return buf.Bytes(), nil
}

// decodeTemplateData decodes data for a render: a JSON object.
func decodeTemplateData(b []byte) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if m == nil {
		return nil, errors.New("not a JSON object: null")
	}
	return m, nil
}

// renderVersion is v as the render package takes it.
func renderVersion(v templatestore.Version, defaultLocale string) (render.Version, error) {
	out := render.Version{Template: v.Name, Number: v.Version, Subject: v.Subject, Text: v.TextBody,
		HTML: v.HTMLBody, Layout: v.Layout, Schema: v.DataSchema, DefaultLocale: defaultLocale}
	if len(v.Locales) > 0 {
		var locs map[string]localePartsJSON
		if err := json.Unmarshal(v.Locales, &locs); err != nil {
			return out, fmt.Errorf("template %s version %d: locales: %w", v.Name, v.Version, err)
		}
		out.Locales = make(map[string]render.LocaleParts, len(locs))
		for tag, p := range locs {
			out.Locales[tag] = render.LocaleParts{Subject: p.Subject, Text: p.Text, HTML: p.HTML}
		}
	}
	return out, nil
}

// draftVersion is d as a stored version would be, numbered n.
func draftVersion(d templatestore.Draft, n int) templatestore.Version {
	return templatestore.Version{Name: d.Name, Version: n, Subject: d.Subject, TextBody: d.TextBody, HTMLBody: d.HTMLBody,
		Layout: d.Layout, DataSchema: d.DataSchema, Locales: d.Locales, SampleData: d.SampleData}
}

// renderLayout is a layout version as the render package takes it.
func renderLayout(v templatestore.Version) render.Layout {
	return render.Layout{Name: v.Name, HTML: v.HTMLBody, Text: v.TextBody}
}

// checkLayout compiles a stand-in version wrapped in l, which reports a
// layout that does not parse or does not call the content template.
func checkLayout(l render.Layout, number int) error {
	v := render.Version{Template: l.Name, Number: number, Subject: "check", Layout: l.Name}
	if l.Text != "" {
		v.Text = "check"
	}
	if l.HTML != "" {
		v.HTML = "check"
	}
	_, err := render.Compile(v, map[string]render.Layout{l.Name: l})
	return err
}
