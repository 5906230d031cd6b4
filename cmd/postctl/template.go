package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/render"
	"github.com/postline/postline/internal/templatestore"
)

func newTemplateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Push mail templates from a directory, list, show, diff, label and preview their versions",
		Long: `Manage the versioned mail templates in PostgreSQL (--database-url, tables
postline_template*), so that templates live in git and are pushed from a
checkout. Versions are immutable and numbered; labels point at them: active
(what mail uses), canary (a share of mail, 1-100 percent) and fallback (the
last known good version: what mail is rendered with when the version it
would use fails, and what rollback returns to). Activating a version makes
the one active before it the fallback. Changes are recorded as made by
postctl:$USER; history lists them.

` + templateLayoutHelp,
	}
	cmd.AddCommand(newTemplatePushCmd(g), newTemplateLsCmd(g), newTemplateShowCmd(g), newTemplateDiffCmd(g),
		newTemplateActivateCmd(g), newTemplateFallbackCmd(g), newTemplateCanaryCmd(g), newTemplateRollbackCmd(g),
		newTemplateHistoryCmd(g), newTemplatePreviewCmd(g))
	return cmd
}

// openTemplates connects to --database-url and returns a template store and
// a func that closes the connections.
func openTemplates(ctx context.Context, g *globals) (*templatestore.Store, func(), error) {
	return openOnPool(ctx, g, func(pool *pgxpool.Pool) (*templatestore.Store, error) {
		return templatestore.New(templatestore.Config{}, pool, nil, nil)
	})
}

// storeLayout returns the layout name: its active version (what mail is
// wrapped in), else with orLatest its latest version, else the built-in
// layout of that name. ok is false when there is none.
func storeLayout(ctx context.Context, s *templatestore.Store, name string, orLatest bool) (render.Layout, bool, error) {
	labels, err := s.Labels(ctx, []string{name})
	if err != nil {
		return render.Layout{}, false, withMigrateHint(err)
	}
	var v templatestore.Version
	err = fmt.Errorf("layout %s: no active version: %w", name, templatestore.ErrNotFound)
	if i := slices.IndexFunc(labels, func(l templatestore.Label) bool { return l.Label == templatestore.LabelActive }); i >= 0 {
		v, err = s.Get(ctx, name, labels[i].Version)
	} else if orLatest {
		v, err = s.Latest(ctx, name)
	}
	if err == nil {
		return renderLayout(v), true, nil
	}
	if !errors.Is(err, templatestore.ErrNotFound) {
		return render.Layout{}, false, err
	}
	builtin, err := render.BuiltinLayouts()
	if err != nil {
		return render.Layout{}, false, err
	}
	l, ok := builtin[name]
	return l, ok, nil
}

// pushResult is one template of push's output.
type pushResult struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Version   int    `json:"version"` // the latest version after the push (0: none yet, in a dry run)
	Created   bool   `json:"created"` // a new version was (or, in a dry run, would be) added
	Activated bool   `json:"activated"`
	Fallback  int    `json:"fallback,omitempty"` // the fallback version the activation set (the one active before)
}

// pushOutput is the output of template push.
type pushOutput struct {
	DryRun    bool         `json:"dry_run"`
	Templates []pushResult `json:"templates"`
}

func newTemplatePushCmd(g *globals) *cobra.Command {
	var dryRun, activate, keepFallback bool
	cmd := &cobra.Command{
		Use:   "push DIR",
		Short: "Check every template of DIR and push the changed ones as new versions",
		Long: `Read every template folder of DIR, compile each one (with its layout: from
DIR, else the layout's active version in the database, else its latest,
else a built-in layout) and render it with its sample.json, in every locale it has.
If any template fails, nothing is pushed and each failure is listed.

Then push each template: a version is added only when its content (parts,
layout, schema, locales and sample data) differs from the latest version's,
so pushing an unchanged checkout again adds nothing. template.yaml's
description and default_locale are updated on every push, without a new
version. --activate points the active label at each new version and, as
template activate does, the fallback label at the version active before it
(--keep-fallback leaves the fallback alone). --dry-run checks and reports
what a push would add, and changes nothing.

--output json prints one object:
  {"dry_run": bool, "templates": [{"name", "kind", "version", "created", "activated",
                                   "fallback"? (the version the activation made the fallback)}]}

` + templateLayoutHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if keepFallback && !activate {
				return usagef("--keep-fallback goes with --activate")
			}
			return templatePush(cmd.Context(), g, args[0], dryRun, activate, keepFallback)
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check the templates and report what would be pushed; change nothing")
	cmd.Flags().BoolVar(&activate, "activate", false, "set the active label on every version the push adds")
	cmd.Flags().BoolVar(&keepFallback, "keep-fallback", false, "with --activate: leave the fallback label where it is")
	return cmd
}

func templatePush(ctx context.Context, g *globals, dir string, dryRun, activate, keepFallback bool) error {
	tmpls, err := loadTemplateDir(dir)
	if err != nil {
		return err
	}
	s, closeDB, err := openTemplates(ctx, g)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := checkKinds(ctx, s, tmpls); err != nil {
		return err
	}
	// The latest versions: the next one's number names a failure, and a
	// dry run compares content hashes with them.
	latest := make([]templatestore.Version, len(tmpls))
	for i := range tmpls {
		v, err := s.Latest(ctx, tmpls[i].Draft.Name)
		if err != nil && !errors.Is(err, templatestore.ErrNotFound) {
			return withMigrateHint(err)
		}
		latest[i] = v
		tmpls[i].Number = v.Version + 1
	}
	lookup := func(ctx context.Context, name string) (render.Layout, bool, error) {
		return storeLayout(ctx, s, name, true)
	}
	if err := checkTemplates(ctx, lookup, tmpls); err != nil {
		return err
	}
	out := pushOutput{DryRun: dryRun}
	for i, t := range tmpls {
		d := t.Draft
		d.CreatedBy = operator()
		var r pushResult
		if dryRun {
			r, err = wouldPush(d, latest[i])
		} else {
			r, err = pushTemplate(ctx, s, d, activate, keepFallback)
		}
		if err != nil {
			return err
		}
		out.Templates = append(out.Templates, r)
	}
	return printReport(g, out, func() error { return writePushTable(g, out) })
}

// checkKinds refuses a push in which a stored template changes kind: it
// would fail midway.
func checkKinds(ctx context.Context, s *templatestore.Store, tmpls []templateDir) error {
	stored, err := s.List(ctx)
	if err != nil {
		return withMigrateHint(err)
	}
	var mismatches []string
	for _, t := range tmpls {
		for _, st := range stored {
			if st.Name == t.Draft.Name && st.Kind != t.Draft.Kind {
				mismatches = append(mismatches, fmt.Sprintf("  %s (%s): stored as a %s, the folder is a %s", t.Draft.Name, t.Dir, st.Kind, t.Draft.Kind))
			}
		}
	}
	if len(mismatches) > 0 {
		return fmt.Errorf("%d of %d templates change kind, nothing pushed:\n%s", len(mismatches), len(tmpls), strings.Join(mismatches, "\n"))
	}
	return nil
}

// wouldPush is a dry run's result for d: whether its content differs from
// the latest version's.
func wouldPush(d templatestore.Draft, latest templatestore.Version) (pushResult, error) {
	r := pushResult{Name: d.Name, Kind: d.Kind}
	hash, err := templatestore.ContentHash(d)
	if err != nil {
		return r, err
	}
	r.Version, r.Created = latest.Version, !bytes.Equal(hash, latest.ContentHash)
	return r, nil
}

// pushTemplate stores d as a new version when it changed, and with
// --activate makes that version active.
func pushTemplate(ctx context.Context, s *templatestore.Store, d templatestore.Draft, activate, keepFallback bool) (pushResult, error) {
	r := pushResult{Name: d.Name, Kind: d.Kind}
	var err error
	if r.Version, r.Created, err = s.Push(ctx, d); err != nil {
		return r, withMigrateHint(err)
	}
	if activate && r.Created {
		a, err := s.Activate(ctx, d.Name, r.Version, keepFallback, operator(), "pushed with --activate")
		if err != nil {
			return r, err
		}
		r.Activated = true
		if fb, ok := a.FallbackMoved(); ok {
			r.Fallback = fb.Version
		}
	}
	return r, nil
}

// writePushTable writes a push's results as a table.
func writePushTable(g *globals, out pushOutput) error {
	rows := make([][]string, len(out.Templates))
	for i, r := range out.Templates {
		result := "unchanged"
		switch {
		case r.Created && out.DryRun:
			result = "would add a version"
		case r.Created:
			result = "added"
		}
		if r.Activated {
			result += ", activated"
		}
		if r.Fallback != 0 {
			result += fmt.Sprintf(" (fallback: version %d)", r.Fallback)
		}
		rows[i] = []string{r.Name, r.Kind, versionCell(r.Version), result}
	}
	return writeTable(g.stdout, []string{"TEMPLATE", "KIND", "VERSION", "RESULT"}, rows)
}

// layoutLookup finds a layout that is not in the pushed directory; ok is
// false when there is none.
type layoutLookup func(ctx context.Context, name string) (l render.Layout, ok bool, err error)

// checkTemplates compiles every template of tmpls, renders those with
// sample data in each of their locales, and returns one error listing every
// failure (render errors name the template, part and place, not data).
// Layouts come from tmpls, else from lookup.
func checkTemplates(ctx context.Context, lookup layoutLookup, tmpls []templateDir) error {
	layouts := map[string]render.Layout{}
	for _, t := range tmpls {
		if t.Draft.Kind == templatestore.KindLayout {
			layouts[t.Draft.Name] = renderLayout(draftVersion(t.Draft, 1))
		}
	}
	for _, t := range tmpls {
		name := t.Draft.Layout
		if _, ok := layouts[name]; name == "" || ok {
			continue
		}
		l, ok, err := lookup(ctx, name)
		if err != nil {
			return err
		}
		if ok {
			layouts[name] = l
		}
	}
	var fails []string
	for _, t := range tmpls {
		if err := checkTemplate(t.Draft, max(t.Number, 1), layouts); err != nil {
			fails = append(fails, fmt.Sprintf("  %s (%s): %v", t.Draft.Name, t.Dir, err))
		}
	}
	if len(fails) > 0 {
		return fmt.Errorf("%d of %d templates fail, nothing pushed:\n%s", len(fails), len(tmpls), strings.Join(fails, "\n"))
	}
	return nil
}

// checkTemplate compiles d, as the version numbered n, and renders it with
// its sample data, if any, in the base parts and each locale.
func checkTemplate(d templatestore.Draft, n int, layouts map[string]render.Layout) error {
	if d.Kind == templatestore.KindLayout {
		return checkLayout(layouts[d.Name], n)
	}
	v, err := renderVersion(draftVersion(d, n), d.DefaultLocale)
	if err != nil {
		return err
	}
	c, err := render.Compile(v, layouts)
	if err != nil {
		return err
	}
	if len(d.SampleData) == 0 {
		return nil
	}
	data, err := decodeTemplateData(d.SampleData)
	if err != nil {
		return fmt.Errorf("%s: %w", tmplSampleFile, err)
	}
	locales := []string{""}
	for tag := range v.Locales {
		locales = append(locales, tag)
	}
	slices.Sort(locales)
	for _, loc := range locales {
		if _, err := c.Render(loc, data); err != nil {
			return fmt.Errorf("rendering %s: %w", tmplSampleFile, err)
		}
	}
	return nil
}

// versionCell shows a version number, "-" for none.
func versionCell(v int) string {
	if v == 0 {
		return "-"
	}
	return strconv.Itoa(v)
}

// labelRecord is a label in JSON output.
type labelRecord struct {
	Label     string    `json:"label"`
	Version   int       `json:"version"`
	Percent   int       `json:"percent,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
	UpdatedBy string    `json:"updated_by"`
}

func newLabelRecords(ls []templatestore.Label) []labelRecord {
	out := make([]labelRecord, len(ls))
	for i, l := range ls {
		out[i] = labelRecord{Label: l.Label, Version: l.Version, Percent: l.Percent, UpdatedAt: l.UpdatedAt.UTC(), UpdatedBy: l.UpdatedBy}
	}
	return out
}

// labelCell shows one label of ls: "3", "4 (10%)" for a canary, "-".
func labelCell(ls []templatestore.Label, label string) string {
	for _, l := range ls {
		if l.Label == label {
			if l.Label == templatestore.LabelCanary {
				return fmt.Sprintf("%d (%d%%)", l.Version, l.Percent)
			}
			return strconv.Itoa(l.Version)
		}
	}
	return "-"
}

// templateRecord is a template in ls's JSON output.
type templateRecord struct {
	Name          string        `json:"name"`
	Kind          string        `json:"kind"`
	Description   string        `json:"description"`
	DefaultLocale string        `json:"default_locale"`
	LatestVersion int           `json:"latest_version"`
	Labels        []labelRecord `json:"labels"`
	UpdatedAt     time.Time     `json:"updated_at"`
}

func newTemplateLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the templates with their latest version and labels",
		Long: `List every template and layout, ordered by name.

--output json prints one object:
  {"templates": [{"name", "kind", "description", "default_locale", "latest_version",
                  "labels": [{"label", "version", "percent"? (canary), "updated_at", "updated_by"}],
                  "updated_at"}]}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			return onTemplates(ctx, g, func(s *templatestore.Store) error {
				ts, err := s.List(ctx)
				if err != nil {
					return withMigrateHint(err)
				}
				out := struct {
					Templates []templateRecord `json:"templates"`
				}{Templates: []templateRecord{}}
				rows := make([][]string, len(ts))
				for i, t := range ts {
					out.Templates = append(out.Templates, templateRecord{Name: t.Name, Kind: t.Kind, Description: t.Description,
						DefaultLocale: t.DefaultLocale, LatestVersion: t.LatestVersion, Labels: newLabelRecords(t.Labels),
						UpdatedAt: t.UpdatedAt.UTC()})
					rows[i] = []string{t.Name, t.Kind, versionCell(t.LatestVersion), labelCell(t.Labels, templatestore.LabelActive),
						labelCell(t.Labels, templatestore.LabelCanary), labelCell(t.Labels, templatestore.LabelFallback), t.Description}
				}
				return printReport(g, out, func() error {
					return writeTable(g.stdout, []string{"TEMPLATE", "KIND", "LATEST", "ACTIVE", "CANARY", "FALLBACK", "DESCRIPTION"}, rows)
				})
			})
		},
	}
}

// findTemplate returns the template name as List has it; ErrNotFound if
// there is none.
func findTemplate(ctx context.Context, s *templatestore.Store, name string) (templatestore.Template, error) {
	if err := templatestore.ValidateName(name); err != nil {
		return templatestore.Template{}, usageError{err}
	}
	ts, err := s.List(ctx)
	if err != nil {
		return templatestore.Template{}, withMigrateHint(err)
	}
	for _, t := range ts {
		if t.Name == name {
			return t, nil
		}
	}
	return templatestore.Template{}, fmt.Errorf("template %s: %w", name, templatestore.ErrNotFound)
}

// pickVersion returns the version of t that version (if not 0) or label
// (if not "") names; without either, the active version, else the latest.
func pickVersion(ctx context.Context, s *templatestore.Store, t templatestore.Template, version int, label string) (templatestore.Version, error) {
	if version == 0 {
		want := cmp0(label, templatestore.LabelActive)
		for _, l := range t.Labels {
			if l.Label == want {
				version = l.Version
			}
		}
		if version == 0 && label != "" {
			return templatestore.Version{}, fmt.Errorf("template %s has no %s label", t.Name, label)
		}
		if version == 0 {
			version = t.LatestVersion
		}
	}
	return s.Get(ctx, t.Name, version)
}

func cmp0(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// versionParts are the files of a version as the template directory has
// them, keyed by path: what show prints and diff compares. JSON documents
// are indented.
func versionParts(v templatestore.Version) (map[string]string, error) {
	out := map[string]string{}
	add := func(name, s string) {
		if s != "" {
			out[name] = s
		}
	}
	if v.Layout != "" {
		add("layout", v.Layout+"\n")
	}
	add(tmplSubjectFile, v.Subject)
	add(tmplTextFile, v.TextBody)
	add(tmplHTMLFile, v.HTMLBody)
	for _, f := range []struct {
		name string
		doc  json.RawMessage
	}{{tmplSchemaFile, v.DataSchema}, {tmplSampleFile, v.SampleData}} {
		if len(f.doc) == 0 {
			continue
		}
		var buf bytes.Buffer
		if err := json.Indent(&buf, f.doc, "", "  "); err != nil {
			return nil, fmt.Errorf("template %s version %d: %s: %w", v.Name, v.Version, f.name, err)
		}
		add(f.name, buf.String()+"\n")
	}
	if len(v.Locales) > 0 {
		var locs map[string]localePartsJSON
		if err := json.Unmarshal(v.Locales, &locs); err != nil {
			return nil, fmt.Errorf("template %s version %d: locales: %w", v.Name, v.Version, err)
		}
		for tag, p := range locs {
			dir := tmplLocalesDir + "/" + tag + "/"
			add(dir+tmplSubjectFile, p.Subject)
			add(dir+tmplTextFile, p.Text)
			add(dir+tmplHTMLFile, p.HTML)
		}
	}
	return out, nil
}

// partOrder sorts part paths: layout and the base parts first, then the
// documents, then the locales.
func partOrder(a, b string) int {
	rank := func(p string) int {
		i := slices.Index([]string{"layout", tmplSubjectFile, tmplTextFile, tmplHTMLFile, tmplSchemaFile, tmplSampleFile}, p)
		if i < 0 {
			return 100
		}
		return i
	}
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra - rb
	}
	return strings.Compare(a, b)
}

// versionRecord is show's JSON output.
type versionRecord struct {
	Name        string          `json:"name"`
	Kind        string          `json:"kind"`
	Version     int             `json:"version"`
	Subject     string          `json:"subject"`
	Text        string          `json:"text"`
	HTML        string          `json:"html"`
	Layout      string          `json:"layout,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Locales     json.RawMessage `json:"locales,omitempty"`
	SampleData  json.RawMessage `json:"sample_data,omitempty"`
	ContentHash string          `json:"content_hash"`
	CreatedAt   time.Time       `json:"created_at"`
	CreatedBy   string          `json:"created_by"`
	Labels      []string        `json:"labels"`
}

func newTemplateShowCmd(g *globals) *cobra.Command {
	var version int
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a version of a template: its parts, layout, schema, locales and sample data",
		Long: `Show one version of a template: --version, else the active one, else the latest.

--output json prints one object:
  {"name", "kind", "version", "subject", "text", "html", "layout"?, "schema"?,
   "locales"? ({"TAG": {"subject"?, "text"?, "html"?}}), "sample_data"?,
   "content_hash" (hex SHA-256), "created_at", "created_by",
   "labels" (the labels pointing at this version)}`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if version < 0 {
				return usagef("--version %d: want a positive version", version)
			}
			ctx := cmd.Context()
			s, closeDB, err := openTemplates(ctx, g)
			if err != nil {
				return err
			}
			defer closeDB()
			t, err := findTemplate(ctx, s, args[0])
			if err != nil {
				return err
			}
			v, err := pickVersion(ctx, s, t, version, "")
			if err != nil {
				return err
			}
			rec := versionRecord{Name: v.Name, Kind: t.Kind, Version: v.Version, Subject: v.Subject, Text: v.TextBody,
				HTML: v.HTMLBody, Layout: v.Layout, Schema: v.DataSchema, Locales: v.Locales, SampleData: v.SampleData,
				ContentHash: hex.EncodeToString(v.ContentHash), CreatedAt: v.CreatedAt.UTC(), CreatedBy: v.CreatedBy,
				Labels: []string{}}
			for _, l := range t.Labels {
				if l.Version == v.Version {
					rec.Labels = append(rec.Labels, l.Label)
				}
			}
			parts, err := versionParts(v)
			if err != nil {
				return err
			}
			return printReport(g, rec, func() error {
				labels := strings.Join(rec.Labels, ", ")
				fmt.Fprintf(g.stdout, "template %s (%s) version %d of %d, labels: %s\ncreated %s by %s, content %s\n",
					v.Name, t.Kind, v.Version, t.LatestVersion, cmp0(labels, "none"), formatTime(v.CreatedAt),
					cmp0(v.CreatedBy, "-"), rec.ContentHash[:min(12, len(rec.ContentHash))])
				names := sortedKeys(parts)
				for _, n := range names {
					p := parts[n]
					if !strings.HasSuffix(p, "\n") {
						p += "\n"
					}
					fmt.Fprintf(g.stdout, "\n==> %s <==\n%s", n, p)
				}
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&version, "version", 0, "the version to show (default: active, else latest)")
	return cmd
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, partOrder)
	return keys
}

// parseVersionArg parses a VERSION argument.
func parseVersionArg(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, usagef("version %q: want a positive number", s)
	}
	return n, nil
}

func newTemplateDiffCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "diff NAME V1 V2",
		Short: "Show a unified diff of two versions of a template, part by part",
		Long: `Print a unified diff from version V1 to V2 of every part that differs, named as
in a template directory (subject.txt, html.html, locales/fr/text.txt, ...;
"layout" is the layout's name, schema.json and sample.json are indented).
Prints nothing when the versions have the same content.`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := templatestore.ValidateName(args[0]); err != nil {
				return usageError{err}
			}
			v1, err := parseVersionArg(args[1])
			if err != nil {
				return err
			}
			v2, err := parseVersionArg(args[2])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var parts [2]map[string]string
			err = onTemplates(ctx, g, func(s *templatestore.Store) error {
				for i, n := range []int{v1, v2} {
					v, err := s.Get(ctx, args[0], n)
					if err != nil {
						return withMigrateHint(err)
					}
					if parts[i], err = versionParts(v); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			union := map[string]string{}
			for _, p := range parts {
				for k := range p {
					union[k] = ""
				}
			}
			for _, name := range sortedKeys(union) {
				a, b := fmt.Sprintf("%s@%d/%s", args[0], v1, name), fmt.Sprintf("%s@%d/%s", args[0], v2, name)
				if _, ok := parts[0][name]; !ok {
					a = "/dev/null"
				}
				if _, ok := parts[1][name]; !ok {
					b = "/dev/null"
				}
				fmt.Fprint(g.stdout, unifiedDiff(a, b, parts[0][name], parts[1][name]))
			}
			return nil
		},
	}
}

func printLabel(g *globals, l templatestore.Label, text string) error {
	rec := newLabelRecords([]templatestore.Label{l})[0]
	return g.print(struct {
		Name string `json:"name"`
		labelRecord
	}{l.Name, rec}, text)
}

func setTemplateLabel(ctx context.Context, g *globals, name, label string, version, percent int) error {
	return onNamedTemplate(ctx, g, name, func(s *templatestore.Store) error {
		l, err := s.SetLabel(ctx, name, label, version, percent, operator())
		if err != nil {
			return withMigrateHint(err)
		}
		text := fmt.Sprintf("%s: %s is version %d", name, label, version)
		if label == templatestore.LabelCanary {
			text += fmt.Sprintf(" for %d%% of mail", percent)
		}
		return printLabel(g, l, text)
	})
}

func newTemplateCanaryCmd(g *globals) *cobra.Command {
	var (
		percent int
		off     bool
	)
	cmd := &cobra.Command{
		Use:   "canary NAME VERSION --percent P | canary NAME --off",
		Short: "Send a share of a template's mail with another version, or end the canary",
		Long: `Point the canary label at VERSION for P percent (1-100) of the template's mail,
chosen by a stable hash of each mail's Message-ID; --off removes the canary.

--output json prints {"name", "label", "version", "percent", "updated_at", "updated_by"},
or with --off {"name", "label", "removed"}.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if off {
				if len(args) != 1 || cmd.Flags().Changed("percent") {
					return usagef("--off takes the template's name only")
				}
				ctx := cmd.Context()
				return onNamedTemplate(ctx, g, args[0], func(s *templatestore.Store) error {
					removed, err := s.ClearLabel(ctx, args[0], templatestore.LabelCanary, operator())
					if err != nil {
						return withMigrateHint(err)
					}
					text := args[0] + ": canary removed"
					if !removed {
						text = args[0] + ": no canary to remove"
					}
					return g.print(map[string]any{"name": args[0], "label": templatestore.LabelCanary, "removed": removed}, text)
				})
			}
			if len(args) != 2 {
				return usagef("want NAME VERSION --percent P, or NAME --off")
			}
			n, err := parseVersionArg(args[1])
			if err != nil {
				return err
			}
			if percent < 1 || percent > 100 {
				return usagef("--percent %d: want 1 to 100", percent)
			}
			return setTemplateLabel(cmd.Context(), g, args[0], templatestore.LabelCanary, n, percent)
		},
	}
	cmd.Flags().IntVar(&percent, "percent", 0, "share of mail (1-100) that uses the canary version")
	cmd.Flags().BoolVar(&off, "off", false, "remove the canary label")
	return cmd
}

func newTemplateRollbackCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rollback NAME",
		Short: "Move a template's active label back",
		Long: `Move the active label to the version the fallback label names or, without a
fallback (or when active already is it), to the version active was before.

--output json prints {"name", "label", "version", "updated_at", "updated_by"}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return onNamedTemplate(ctx, g, args[0], func(s *templatestore.Store) error {
				l, err := s.Rollback(ctx, args[0], operator())
				if err != nil {
					return withMigrateHint(err)
				}
				return printLabel(g, l, fmt.Sprintf("%s: active is version %d", args[0], l.Version))
			})
		},
	}
}

func newTemplatePreviewCmd(g *globals) *cobra.Command {
	var (
		version          int
		label            string
		dataFile, locale string
		htmlFile         string
	)
	cmd := &cobra.Command{
		Use:   "preview NAME",
		Short: "Render a version of a template with its sample data or given data",
		Long: `Render a version of a template (--version, or the one --label points at, else
the active one, else the latest) with its layout as mail would get it (the
layout's active version, else the built-in layout of that name) and print
the subject and text. Data is --data (a JSON object in a file, - for stdin),
else the version's sample data. --html writes the HTML part to a file.

--output json prints {"name", "version", "locale", "subject", "text", "html"}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if version < 0 {
				return usagef("--version %d: want a positive version", version)
			}
			if version != 0 && label != "" {
				return usagef("--version and --label: give one")
			}
			if label != "" && label != templatestore.LabelActive && label != templatestore.LabelCanary && label != templatestore.LabelFallback {
				return usagef("--label %q: want active, canary or fallback", label)
			}
			var data []byte
			if dataFile != "" {
				var err error
				if dataFile == "-" {
					data, err = readLimited(g.stdin, "stdin")
				} else {
					var f *os.File
					if f, err = os.Open(dataFile); err == nil {
						data, err = readLimited(f, dataFile)
						f.Close()
					}
				}
				if err != nil {
					return fmt.Errorf("--data: %w", err)
				}
				if data == nil {
					data = []byte{} // empty: an error, not the sample data
				}
			}
			return templatePreview(cmd.Context(), g, args[0], version, label, data, locale, htmlFile)
		},
	}
	cmd.Flags().IntVar(&version, "version", 0, "the version to render")
	cmd.Flags().StringVar(&label, "label", "", "render the version this label points at: active, canary or fallback")
	cmd.Flags().StringVar(&dataFile, "data", "", "file of the data (a JSON object; - for stdin); default the version's sample data")
	cmd.Flags().StringVar(&locale, "locale", "", "render for this locale (BCP 47, such as fr or fr-CA)")
	cmd.Flags().StringVar(&htmlFile, "html", "", "write the rendered HTML part to this file")
	return cmd
}

func templatePreview(ctx context.Context, g *globals, name string, version int, label string, data []byte, locale, htmlFile string) error {
	s, closeDB, err := openTemplates(ctx, g)
	if err != nil {
		return err
	}
	defer closeDB()
	t, err := findTemplate(ctx, s, name)
	if err != nil {
		return err
	}
	if t.Kind == templatestore.KindLayout {
		return fmt.Errorf("%s is a layout: preview a template that uses it", name)
	}
	v, err := pickVersion(ctx, s, t, version, label)
	if err != nil {
		return err
	}
	if data == nil {
		if len(v.SampleData) == 0 {
			return fmt.Errorf("template %s version %d has no sample data: give --data", name, v.Version)
		}
		data = v.SampleData
	}
	values, err := decodeTemplateData(data)
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	rv, err := renderVersion(v, t.DefaultLocale)
	if err != nil {
		return err
	}
	layouts := map[string]render.Layout{}
	if v.Layout != "" {
		l, ok, err := storeLayout(ctx, s, v.Layout, false)
		if err != nil {
			return err
		}
		if ok {
			layouts[v.Layout] = l
		}
	}
	c, err := render.Compile(rv, layouts)
	if err != nil {
		return err
	}
	r, err := c.Render(locale, values)
	if err != nil {
		return err
	}
	if htmlFile != "" {
		if r.HTML == "" {
			return fmt.Errorf("--html: template %s version %d has no HTML part", name, v.Version)
		}
		if err := os.WriteFile(filepath.Clean(htmlFile), []byte(r.HTML), 0o644); err != nil {
			return fmt.Errorf("--html: %w", err)
		}
	}
	out := map[string]any{"name": name, "version": v.Version, "locale": r.Locale, "subject": r.Subject, "text": r.Text, "html": r.HTML}
	return printReport(g, out, func() error {
		fmt.Fprintf(g.stdout, "template %s version %d, locale %s\nSubject: %s\n\n%s", name, v.Version, cmp0(r.Locale, "-"), r.Subject, r.Text)
		if r.Text != "" && !strings.HasSuffix(r.Text, "\n") {
			fmt.Fprintln(g.stdout)
		}
		if htmlFile != "" {
			fmt.Fprintf(g.stdout, "\nHTML written to %s (%d bytes)\n", htmlFile, len(r.HTML))
		}
		return nil
	})
}

// onNamedTemplate checks name, opens the template store and runs fn on it,
// closing the store after.
func onNamedTemplate(ctx context.Context, g *globals, name string, fn func(*templatestore.Store) error) error {
	if err := templatestore.ValidateName(name); err != nil {
		return usageError{err}
	}
	return onTemplates(ctx, g, fn)
}

// onTemplates opens the template store and runs fn on it, closing the store
// after.
func onTemplates(ctx context.Context, g *globals, fn func(*templatestore.Store) error) error {
	s, closeDB, err := openTemplates(ctx, g)
	if err != nil {
		return err
	}
	defer closeDB()
	return fn(s)
}
