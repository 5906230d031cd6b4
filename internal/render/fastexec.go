package render

import (
	"encoding/json"
	"errors"
	"io"
	"text/template/parse"
)

// fastTemplate executes the templates of a set that use only what most
// mails use (text, {{.field.chain}} and {{.}} actions, {{range}} over a
// list without variables, {{template "name" .}}) straight from their parse
// trees, without text/template's reflection: a field of a map[string]any
// is an index, a string is written as it is. Whatever else a render meets
// (a value that is not a string or a JSON number, a missing key, a range
// over something not a []any, a failed write) ends it with errNotFast, and
// the caller renders the part again with text/template or html/template,
// which then gives the output or the error they always gave.
type fastTemplate struct {
	root  *parse.ListNode
	trees map[string]*parse.Tree
	// html says the set is html/template's, escaped: every action ends in
	// the HTML text escaper, done here by escapeHTMLText.
	html bool
}

// fastWriter is what a fast render writes to: a *limitWriter.
type fastWriter interface {
	io.Writer
	io.StringWriter
}

// errNotFast ends a fast render that met something it does not do.
var errNotFast = errors.New("render: not on the fast path")

// newFastTemplate returns the fast form of the set trees rooted at root,
// or nil when a template of the set uses something it does not do.
func newFastTemplate(root string, trees map[string]*parse.Tree, html bool) *fastTemplate {
	f := &fastTemplate{trees: trees, html: html}
	t, ok := trees[root]
	if !ok || t.Root == nil {
		return nil
	}
	checked := map[string]bool{root: true}
	if !f.supported(t.Root, checked) {
		return nil
	}
	f.root = t.Root
	return f
}

// supported reports whether every node of list, and of the templates it
// calls, is one execute does.
func (f *fastTemplate) supported(list *parse.ListNode, checked map[string]bool) bool {
	if list == nil {
		return true
	}
	for _, n := range list.Nodes {
		switch x := n.(type) {
		case *parse.TextNode:
		case *parse.ActionNode:
			if !f.valuePipe(x.Pipe, true) {
				return false
			}
		case *parse.RangeNode:
			if !f.valuePipe(x.Pipe, false) || !f.supported(x.List, checked) || !f.supported(x.ElseList, checked) {
				return false
			}
		case *parse.TemplateNode:
			if !dotPipe(x.Pipe) {
				return false
			}
			t, ok := f.trees[x.Name]
			if !ok || t.Root == nil {
				return false
			}
			if !checked[x.Name] {
				checked[x.Name] = true
				if !f.supported(t.Root, checked) {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}

// valuePipe reports whether p is a field chain or dot, followed by the
// HTML text escaper when the set is HTML and printed is true.
func (f *fastTemplate) valuePipe(p *parse.PipeNode, printed bool) bool {
	if p == nil || p.IsAssign || len(p.Decl) > 0 || len(p.Cmds) == 0 || !valueCmd(p.Cmds[0]) {
		return false
	}
	if !f.html || !printed {
		return len(p.Cmds) == 1
	}
	if len(p.Cmds) != 2 || len(p.Cmds[1].Args) != 1 {
		return false
	}
	id, ok := p.Cmds[1].Args[0].(*parse.IdentifierNode)
	return ok && id.Ident == htmlEscaperName
}

func valueCmd(c *parse.CommandNode) bool {
	if len(c.Args) != 1 {
		return false
	}
	switch c.Args[0].(type) {
	case *parse.FieldNode, *parse.DotNode:
		return true
	}
	return false
}

func dotPipe(p *parse.PipeNode) bool {
	if p == nil || p.IsAssign || len(p.Decl) > 0 || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return false
	}
	_, ok := p.Cmds[0].Args[0].(*parse.DotNode)
	return ok
}

// Execute renders the set on data into w.
func (f *fastTemplate) Execute(w fastWriter, data map[string]any) error {
	return f.walk(w, f.root, data)
}

func (f *fastTemplate) walk(w fastWriter, list *parse.ListNode, dot any) error {
	if list == nil {
		return nil
	}
	for _, n := range list.Nodes {
		switch x := n.(type) {
		case *parse.TextNode:
			if _, err := w.Write(x.Text); err != nil {
				return errNotFast
			}
		case *parse.ActionNode:
			v, err := value(x.Pipe.Cmds[0].Args[0], dot)
			if err != nil {
				return err
			}
			var s string
			switch t := v.(type) {
			case string:
				s = t
			case json.Number:
				s = string(t)
			default:
				return errNotFast
			}
			if f.html {
				s = escapeHTMLText(s)
			}
			if _, err := w.WriteString(s); err != nil {
				return errNotFast
			}
		case *parse.RangeNode:
			v, err := value(x.Pipe.Cmds[0].Args[0], dot)
			if err != nil {
				return err
			}
			list, ok := v.([]any)
			if !ok {
				return errNotFast
			}
			if len(list) == 0 {
				if err := f.walk(w, x.ElseList, dot); err != nil {
					return err
				}
				continue
			}
			for _, e := range list {
				if err := f.walk(w, x.List, e); err != nil {
					return err
				}
			}
		case *parse.TemplateNode:
			if err := f.walk(w, f.trees[x.Name].Root, dot); err != nil {
				return err
			}
		default:
			return errNotFast
		}
	}
	return nil
}

// value is dot, or the field chain n of dot, each link a key of a
// map[string]any that is present.
func value(n parse.Node, dot any) (any, error) {
	field, ok := n.(*parse.FieldNode)
	if !ok {
		return dot, nil
	}
	v := dot
	for _, name := range field.Ident {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, errNotFast
		}
		if v, ok = m[name]; !ok {
			return nil, errNotFast
		}
	}
	return v, nil
}
