package render

import (
	"bytes"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io"
	"strings"
	texttemplate "text/template"
	"text/template/parse"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const (
	contentName = "content"
	layoutName  = "layout"
)

// Compiled is a compiled version, safe for concurrent renders.
type Compiled struct {
	template      string
	version       int
	defaultLocale string
	base          compiledParts
	// locales maps a lower-cased tag to its overrides.
	locales map[string]*compiledLocale
	schema  *jsonschema.Schema
	// fastSchema accepts the data schema accepts, when it can tell
	// without the validator; nil when the schema is beyond it.
	fastSchema *fastSchema
	safe       map[string]bool
}

type compiledLocale struct {
	name  string
	parts compiledParts
}

// compiledParts holds one locale's parts; a nil part is not overridden.
type compiledParts struct {
	subject, text, html *compiledPart
}

// compiledPart is one part: its template, and its fast form when it has
// one (nil when it uses what fastTemplate does not do).
type compiledPart struct {
	template executor
	fast     *fastTemplate
}

// Template returns the compiled version's template name.
func (c *Compiled) Template() string { return c.template }

// Version returns the compiled version's number.
func (c *Compiled) Version() int { return c.version }

// Compile compiles v, taking its layout from layouts.
func Compile(v Version, layouts map[string]Layout) (*Compiled, error) {
	return compile(v, layouts, nil)
}

func compile(v Version, layouts map[string]Layout, extra map[string]any) (*Compiled, error) {
	fail := func(part, locale, stage, reason string, err error) error {
		return &Error{Template: v.Template, Version: v.Number, Locale: locale, Part: part, Stage: stage, Reason: reason, Err: err}
	}
	if v.Subject == "" {
		return nil, fail("subject", "", StageParse, ReasonInvalidVersion, errors.New("subject is empty"))
	}
	if v.Text == "" && v.HTML == "" {
		return nil, fail("", "", StageParse, ReasonInvalidVersion, errors.New("text and html are both empty"))
	}
	var layout Layout
	if v.Layout != "" {
		l, ok := layouts[v.Layout]
		if !ok {
			return nil, fail("layout", "", StageParse, ReasonInvalidVersion, fmt.Errorf("layout %q not found", v.Layout))
		}
		layout = l
	}
	size := len(v.Subject) + len(v.Text) + len(v.HTML) + len(layout.HTML) + len(layout.Text)
	for k, p := range v.Locales {
		size += len(k) + len(p.Subject) + len(p.Text) + len(p.HTML)
	}
	if size > MaxSourceBytes {
		return nil, fail("", "", StageLimit, ReasonTooLarge, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, size, MaxSourceBytes))
	}
	if len(v.Schema) > MaxSchemaBytes {
		return nil, fail("schema", "", StageLimit, ReasonTooLarge, fmt.Errorf("%w: schema of %d bytes, limit %d", ErrTooLarge, len(v.Schema), MaxSchemaBytes))
	}

	fm := funcs(extra)
	c := &Compiled{
		template:      v.Template,
		version:       v.Number,
		defaultLocale: v.DefaultLocale,
		locales:       make(map[string]*compiledLocale, len(v.Locales)),
		safe:          safeCallers(fm),
	}
	if len(v.Schema) > 0 {
		s, err := compileSchema(v.Schema)
		if err != nil {
			return nil, fail("schema", "", StageSchema, ReasonInvalidSchema, err)
		}
		c.schema = s
		c.fastSchema = newFastSchema(v.Schema)
	}
	build := func(locale string, subject, text, html string) (compiledParts, error) {
		var p compiledParts
		var err error
		if subject != "" {
			if p.subject, err = textPart(subject, "", fm); err != nil {
				return p, classifyParse("subject", locale, err, fail)
			}
		}
		if text != "" {
			if p.text, err = textPart(text, layout.Text, fm); err != nil {
				return p, classifyParse("text", locale, err, fail)
			}
		}
		if html != "" {
			if p.html, err = htmlPart(html, layout.HTML, fm); err != nil {
				return p, classifyParse("html", locale, err, fail)
			}
		}
		return p, nil
	}
	var err error
	if c.base, err = build("", v.Subject, v.Text, v.HTML); err != nil {
		return nil, err
	}
	for name, lp := range v.Locales {
		key := normLocale(name)
		if key == "" {
			return nil, fail("", name, StageParse, ReasonInvalidVersion, errors.New("empty locale tag"))
		}
		if _, dup := c.locales[key]; dup {
			return nil, fail("", name, StageParse, ReasonInvalidVersion, errors.New("locale tag given twice"))
		}
		p, err := build(name, lp.Subject, lp.Text, lp.HTML)
		if err != nil {
			return nil, err
		}
		c.locales[key] = &compiledLocale{name: name, parts: p}
	}
	return c, nil
}

// safeCallers are the functions whose error texts carry no data values, so
// that an execution error naming them may keep its text.
func safeCallers(fm map[string]any) map[string]bool {
	m := map[string]bool{"and": true, "or": true, "not": true, "len": true, "index": true, "slice": true,
		"eq": true, "ne": true, "lt": true, "le": true, "gt": true, "ge": true}
	for k := range fm {
		m[k] = true
	}
	return m
}

func classifyParse(part, locale string, err error, fail func(part, locale, stage, reason string, err error) error) error {
	switch {
	case errors.Is(err, ErrRecursion):
		return fail(part, locale, StageLimit, ReasonRecursion, err)
	default:
		return fail(part, locale, StageParse, ReasonSyntax, err)
	}
}

// templateSet is what parseSet needs of text/template's and html/template's
// Template, so that both kinds are parsed and checked by one function.
type templateSet[T any] interface {
	New(name string) T
	Parse(text string) (T, error)
	Templates() []T
	Lookup(name string) T
	Name() string
}

// parseSet parses src, inside layout when there is one, into a set made by
// newSet, refuses what checkTrees refuses and returns the set's root.
// treeOf reads a template's parse tree, a field the interface cannot name.
func parseSet[T templateSet[T]](newSet func(name string) T, treeOf func(T) *parse.Tree, src, layout string) (T, error) {
	var zero T
	root := contentName
	var t T
	if layout != "" {
		root = layoutName
		t = newSet(layoutName)
		if _, err := t.Parse(layout); err != nil {
			return zero, fmt.Errorf("layout: %w", err)
		}
		if _, err := t.New(contentName).Parse(src); err != nil {
			return zero, err
		}
	} else {
		t = newSet(contentName)
		if _, err := t.Parse(src); err != nil {
			return zero, err
		}
	}
	trees := map[string]*parse.Tree{}
	for _, x := range t.Templates() {
		if tree := treeOf(x); tree != nil {
			trees[x.Name()] = tree
		}
	}
	if err := checkTrees(trees, root, layout != ""); err != nil {
		return zero, err
	}
	return t.Lookup(root), nil
}

// textPart parses a text part and makes its fast form.
func textPart(src, layout string, fm map[string]any) (*compiledPart, error) {
	t, err := parseText(src, layout, fm)
	if err != nil {
		return nil, err
	}
	trees := treesOf(t.Templates(), func(x *texttemplate.Template) (string, *parse.Tree) { return x.Name(), x.Tree })
	return &compiledPart{template: t, fast: newFastTemplate(t.Name(), trees, false)}, nil
}

// htmlPart parses an HTML part and makes its fast form from the escaped
// templates.
func htmlPart(src, layout string, fm map[string]any) (*compiledPart, error) {
	t, err := parseHTML(src, layout, fm)
	if err != nil {
		return nil, err
	}
	trees := treesOf(t.Templates(), func(x *htmltemplate.Template) (string, *parse.Tree) { return x.Name(), x.Tree })
	return &compiledPart{template: t, fast: newFastTemplate(t.Name(), trees, true)}, nil
}

func parseText(src, layout string, fm map[string]any) (*texttemplate.Template, error) {
	return parseSet(func(name string) *texttemplate.Template {
		return texttemplate.New(name).Option("missingkey=error").Funcs(fm)
	}, func(t *texttemplate.Template) *parse.Tree { return t.Tree }, src, layout)
}

func parseHTML(src, layout string, fm map[string]any) (*htmltemplate.Template, error) {
	rt, err := parseSet(func(name string) *htmltemplate.Template {
		return htmltemplate.New(name).Option("missingkey=error").Funcs(fm)
	}, func(t *htmltemplate.Template) *parse.Tree { return t.Tree }, src, layout)
	if err != nil {
		return nil, err
	}
	// html/template escapes a set on its first execution; run it once on
	// no data so that an escaping error is a compile error, not a render
	// error. Errors of execution on no data are expected and ignored.
	err = rt.Execute(&limitWriter{left: MaxOutputBytes, w: io.Discard}, nil)
	var he *htmltemplate.Error
	if errors.As(err, &he) {
		return nil, err
	}
	if err := fastHTMLEscaper(rt); err != nil {
		return nil, err
	}
	return rt, nil
}

// checkTrees refuses template call cycles, call nesting deeper than
// MaxTemplateDepth, range nesting deeper than MaxRangeDepth, ranges over
// number literals, templates that expand to over MaxExpandedNodes nodes
// and calls of undefined templates. With a layout, the
// root must call the content template.
func checkTrees(trees map[string]*parse.Tree, root string, layout bool) error {
	c := &treeChecker{trees: trees, root: root, memo: map[string]treeDepth{}, state: map[string]int{}}
	if _, ok := trees[root]; !ok {
		return fmt.Errorf("template %q is empty", root)
	}
	if _, err := c.visit(root); err != nil {
		return err
	}
	if layout && !c.calledContent {
		return fmt.Errorf("layout does not call {{template %q .}}", contentName)
	}
	return nil
}

// treeDepth is what a template reaches: its call and range nesting, and
// its cost, the nodes it executes once expanded, calls included, range
// bodies once each.
type treeDepth struct{ calls, ranges, cost int }

// treeChecker is the state of one checkTrees: a depth-first walk of the
// templates from the root, each template's depth computed once.
type treeChecker struct {
	trees         map[string]*parse.Tree
	root          string
	memo          map[string]treeDepth
	state         map[string]int // 1 visiting, 2 done
	calledContent bool           // the root calls the content template
}

// visit computes the depth of template name, refusing a call cycle.
func (c *treeChecker) visit(name string) (treeDepth, error) {
	switch c.state[name] {
	case 1:
		return treeDepth{}, fmt.Errorf("%w: %q calls itself", ErrRecursion, name)
	case 2:
		return c.memo[name], nil
	}
	c.state[name] = 1
	var d treeDepth
	if err := c.walk(c.trees[name].Root, name, 0, &d); err != nil {
		return d, err
	}
	if d.calls > MaxTemplateDepth {
		return d, fmt.Errorf("%w: template calls nested deeper than %d", ErrRecursion, MaxTemplateDepth)
	}
	c.state[name] = 2
	c.memo[name] = d
	return d, nil
}

// walk adds node n of template from, inside ranges ranges, to d.
func (c *treeChecker) walk(n parse.Node, from string, ranges int, d *treeDepth) error {
	if n == nil {
		return nil
	}
	if d.cost++; d.cost > MaxExpandedNodes {
		return fmt.Errorf("%w: templates expand to over %d nodes", ErrRecursion, MaxExpandedNodes)
	}
	switch x := n.(type) {
	case *parse.ListNode:
		if x == nil {
			return nil
		}
		for _, child := range x.Nodes {
			if err := c.walk(child, from, ranges, d); err != nil {
				return err
			}
		}
	case *parse.IfNode:
		if err := c.walk(x.List, from, ranges, d); err != nil {
			return err
		}
		return c.walk(x.ElseList, from, ranges, d)
	case *parse.WithNode:
		if err := c.walk(x.List, from, ranges, d); err != nil {
			return err
		}
		return c.walk(x.ElseList, from, ranges, d)
	case *parse.RangeNode:
		return c.walkRange(x, from, ranges, d)
	case *parse.TemplateNode:
		return c.walkCall(x, from, ranges, d)
	}
	return nil
}

// walkRange adds a range, refusing one over a number literal or nested
// deeper than MaxRangeDepth.
func (c *treeChecker) walkRange(x *parse.RangeNode, from string, ranges int, d *treeDepth) error {
	if x.Pipe != nil && len(x.Pipe.Cmds) == 1 && len(x.Pipe.Cmds[0].Args) == 1 {
		if _, ok := x.Pipe.Cmds[0].Args[0].(*parse.NumberNode); ok {
			return fmt.Errorf("%w: range over a number literal in %q", ErrRecursion, from)
		}
	}
	if ranges+1 > MaxRangeDepth {
		return fmt.Errorf("%w: range nested deeper than %d in %q", ErrRecursion, MaxRangeDepth, from)
	}
	if ranges+1 > d.ranges {
		d.ranges = ranges + 1
	}
	if err := c.walk(x.List, from, ranges+1, d); err != nil {
		return err
	}
	return c.walk(x.ElseList, from, ranges, d)
}

// walkCall adds a call of another template: its cost, one more call
// level and its ranges on top of the caller's.
func (c *treeChecker) walkCall(x *parse.TemplateNode, from string, ranges int, d *treeDepth) error {
	if _, ok := c.trees[x.Name]; !ok {
		return fmt.Errorf("%q calls undefined template %q", from, x.Name)
	}
	if from == c.root && x.Name == contentName {
		c.calledContent = true
	}
	cd, err := c.visit(x.Name)
	if err != nil {
		return err
	}
	if d.cost += cd.cost; d.cost > MaxExpandedNodes {
		return fmt.Errorf("%w: templates expand to over %d nodes", ErrRecursion, MaxExpandedNodes)
	}
	if cd.calls+1 > d.calls {
		d.calls = cd.calls + 1
	}
	if ranges+cd.ranges > MaxRangeDepth {
		return fmt.Errorf("%w: range nested deeper than %d through %q", ErrRecursion, MaxRangeDepth, x.Name)
	}
	if ranges+cd.ranges > d.ranges {
		d.ranges = ranges + cd.ranges
	}
	return nil
}

// noLoader refuses every external reference of a schema: compiling does
// no I/O.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema reference %q: external references are not loaded", url)
}

const schemaURL = "mem:///schema.json"

func compileSchema(b []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("schema json: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return s, nil
}

func normLocale(s string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), "_", "-"))
}

// treesOf maps the parsed templates of a set, of either template package,
// to their parse trees by name: what the fast form runs.
func treesOf[T any](set []T, named func(T) (string, *parse.Tree)) map[string]*parse.Tree {
	trees := make(map[string]*parse.Tree, len(set))
	for _, x := range set {
		if name, tree := named(x); tree != nil {
			trees[name] = tree
		}
	}
	return trees
}
