package render

import (
	"encoding/json"
	htmltemplate "html/template"
	"strings"
	"text/template/parse"
	"unicode/utf8"
)

// htmlEscaperName is the function html/template puts at the end of every
// action in HTML text: {{.name}} runs as {{.name | _html_template_htmlescaper}}.
const htmlEscaperName = "_html_template_htmlescaper"

// fastHTMLEscaper replaces html/template's escaper of HTML text in the set
// of rt, which has been escaped (executed once), with one that takes a
// single argument: html/template's is variadic, and text/template calls
// it by reflection, building a slice of arguments and running fmt on
// them, for every value of every mail. Strings and JSON numbers, what a
// job's data holds, are escaped here byte for byte as html/template
// escapes them; any other value goes through html/template itself
// (fallback, a set of {{.}}). The escaper is replaced only when every
// call of it in the set takes one argument, the value of the pipeline
// before it, as html/template writes them.
func fastHTMLEscaper(rt *htmltemplate.Template) error {
	for _, t := range rt.Templates() {
		if t.Tree != nil && !escaperCallsTakeOneArg(t.Tree.Root) {
			return nil
		}
	}
	fallback, err := htmltemplate.New("escape").Parse("{{.}}")
	if err != nil {
		return err
	}
	var sb strings.Builder
	if err := fallback.Execute(&sb, ""); err != nil { // escapes the fallback now, not concurrently later
		return err
	}
	rt.Funcs(htmltemplate.FuncMap{htmlEscaperName: func(v any) string {
		switch s := v.(type) {
		case string:
			return escapeHTMLText(s)
		case json.Number:
			return escapeHTMLText(string(s))
		}
		var b strings.Builder
		if err := fallback.Execute(&b, v); err != nil {
			// {{.}} cannot fail on a value the escaper takes; an empty
			// output is what a failed escape would print.
			return ""
		}
		return b.String()
	}})
	return nil
}

// escaperCallsTakeOneArg reports whether every call of the HTML escaper
// under n is a later command of a pipeline with no argument of its own.
func escaperCallsTakeOneArg(n parse.Node) bool {
	ok := true
	var pipe func(p *parse.PipeNode)
	var walk func(n parse.Node)
	pipe = func(p *parse.PipeNode) {
		if p == nil {
			return
		}
		for i, c := range p.Cmds {
			for j, a := range c.Args {
				if id, isID := a.(*parse.IdentifierNode); isID && id.Ident == htmlEscaperName && (i == 0 || j != 0 || len(c.Args) != 1) {
					ok = false
				}
				if sub, isPipe := a.(*parse.PipeNode); isPipe {
					pipe(sub)
				}
			}
		}
	}
	walk = func(n parse.Node) {
		switch x := n.(type) {
		case *parse.ListNode:
			if x == nil {
				return
			}
			for _, c := range x.Nodes {
				walk(c)
			}
		case *parse.ActionNode:
			pipe(x.Pipe)
		case *parse.IfNode:
			pipe(x.Pipe)
			walk(x.List)
			walk(x.ElseList)
		case *parse.RangeNode:
			pipe(x.Pipe)
			walk(x.List)
			walk(x.ElseList)
		case *parse.WithNode:
			pipe(x.Pipe)
			walk(x.List)
			walk(x.ElseList)
		case *parse.TemplateNode:
			pipe(x.Pipe)
		}
	}
	walk(n)
	return ok
}

// escapeHTMLText is html/template's escaping of a plain string in HTML
// text (htmlReplacer with htmlReplacementTable): NUL becomes U+FFFD and
// " & ' + < > character references; nothing else changes.
func escapeHTMLText(s string) string {
	i := strings.IndexAny(s, "\x00\"&'+<>")
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	written := 0
	for ; i < len(s); i++ {
		var repl string
		switch s[i] {
		case 0:
			repl = string(utf8.RuneError)
		case '"':
			repl = "&#34;"
		case '&':
			repl = "&amp;"
		case '\'':
			repl = "&#39;"
		case '+':
			repl = "&#43;"
		case '<':
			repl = "&lt;"
		case '>':
			repl = "&gt;"
		default:
			continue
		}
		b.WriteString(s[written:i])
		b.WriteString(repl)
		written = i + 1
	}
	b.WriteString(s[written:])
	return b.String()
}
