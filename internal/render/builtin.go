package render

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
)

// builtinFS holds the built-in templates, used as defaults and as
// last-resort fallbacks. Its layout:
//
//	builtin/layouts/NAME/layout.html, layout.txt      a layout (either file optional)
//	builtin/TEMPLATE/N/version.json                   {"layout": "...", "default_locale": "..."}
//	builtin/TEMPLATE/N/subject.txt, text.txt, body.html, schema.json
//	builtin/TEMPLATE/N/locales/TAG/subject.txt, text.txt, body.html
//
// Every file but subject.txt is optional (a version needs text.txt or
// body.html).
//
//go:embed builtin
var builtinFS embed.FS

const builtinLayouts = "layouts"

// BuiltinLayouts returns the built-in layouts by name.
func BuiltinLayouts() (map[string]Layout, error) {
	root := path.Join("builtin", builtinLayouts)
	dirs, err := fs.ReadDir(builtinFS, root)
	if err != nil {
		return nil, fmt.Errorf("builtin layouts: %w", err)
	}
	out := map[string]Layout{}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		dir := path.Join(root, d.Name())
		l := Layout{Name: d.Name()}
		if l.HTML, err = readOptional(path.Join(dir, "layout.html")); err != nil {
			return nil, err
		}
		if l.Text, err = readOptional(path.Join(dir, "layout.txt")); err != nil {
			return nil, err
		}
		out[l.Name] = l
	}
	return out, nil
}

// Builtin returns the built-in template versions by template name, each
// template's versions in ascending order.
func Builtin() (map[string][]Version, error) {
	tmpls, err := fs.ReadDir(builtinFS, "builtin")
	if err != nil {
		return nil, fmt.Errorf("builtin templates: %w", err)
	}
	out := map[string][]Version{}
	for _, t := range tmpls {
		if !t.IsDir() || t.Name() == builtinLayouts {
			continue
		}
		versions, err := fs.ReadDir(builtinFS, path.Join("builtin", t.Name()))
		if err != nil {
			return nil, fmt.Errorf("builtin template %s: %w", t.Name(), err)
		}
		for _, vd := range versions {
			n, err := strconv.Atoi(vd.Name())
			if !vd.IsDir() || err != nil || n <= 0 {
				return nil, fmt.Errorf("builtin template %s: %q is not a version directory", t.Name(), vd.Name())
			}
			v, err := loadBuiltin(t.Name(), n, path.Join("builtin", t.Name(), vd.Name()))
			if err != nil {
				return nil, err
			}
			out[t.Name()] = append(out[t.Name()], v)
		}
		slices.SortFunc(out[t.Name()], func(a, b Version) int { return a.Number - b.Number })
	}
	return out, nil
}

func loadBuiltin(name string, n int, dir string) (Version, error) {
	v := Version{Template: name, Number: n}
	var meta struct {
		Layout        string `json:"layout"`
		DefaultLocale string `json:"default_locale"`
	}
	if b, err := readOptional(path.Join(dir, "version.json")); err != nil {
		return v, err
	} else if b != "" {
		if err := json.Unmarshal([]byte(b), &meta); err != nil {
			return v, fmt.Errorf("builtin %s version %d: version.json: %w", name, n, err)
		}
	}
	v.Layout, v.DefaultLocale = meta.Layout, meta.DefaultLocale
	var err error
	if v.Subject, v.Text, v.HTML, err = readParts(dir); err != nil {
		return v, err
	}
	schema, err := readOptional(path.Join(dir, "schema.json"))
	if err != nil {
		return v, err
	}
	if schema != "" {
		v.Schema = []byte(schema)
	}
	locs, err := fs.ReadDir(builtinFS, path.Join(dir, "locales"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return v, fmt.Errorf("builtin %s version %d: %w", name, n, err)
	}
	for _, l := range locs {
		if !l.IsDir() {
			continue
		}
		var p LocaleParts
		if p.Subject, p.Text, p.HTML, err = readParts(path.Join(dir, "locales", l.Name())); err != nil {
			return v, err
		}
		if v.Locales == nil {
			v.Locales = map[string]LocaleParts{}
		}
		v.Locales[l.Name()] = p
	}
	return v, nil
}

func readParts(dir string) (subject, text, html string, err error) {
	if subject, err = readOptional(path.Join(dir, "subject.txt")); err != nil {
		return
	}
	if text, err = readOptional(path.Join(dir, "text.txt")); err != nil {
		return
	}
	html, err = readOptional(path.Join(dir, "body.html"))
	return
}

func readOptional(name string) (string, error) {
	b, err := fs.ReadFile(builtinFS, name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("builtin: %w", err)
	}
	return string(b), nil
}
