// Package settingsrc finds the POSTLINE_* settings a binary reads by parsing
// its source, so that the deploy tests (docker-compose.yml, the Helm chart)
// follow every new or renamed setting without building or running the
// binaries.
//
// A binary declares settings as `env` tags of struct fields (see
// internal/config, whose loader also walks struct fields without a tag).
// Some of those structs live in another package of the module and are
// embedded (worker and retry-scheduler embed config.Kafka) or declared as a
// variable (postctl's `var ks config.Kafka`): Read follows such references
// into the module's packages, or the Kafka settings would look like names
// the binaries do not know.
package settingsrc

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// settingName is the shape of every setting's environment variable.
var settingName = regexp.MustCompile(`^POSTLINE_[A-Z0-9_]+$`)

// Read returns the settings the package in dir (relative to the module root
// root) reads: the env tags of its struct fields, and the env tags of the
// module's struct types it declares values of or holds in untagged struct
// fields, followed through their own untagged struct fields as
// internal/config walks them (pointers are not walked). With literals, every string literal that is a
// whole setting name counts too (postctl lists its flag-backing variables
// that way).
func Read(root, dir string, literals bool) (map[string]bool, error) {
	module, err := modulePath(root)
	if err != nil {
		return nil, err
	}
	r := &reader{root: root, module: module, pkgs: map[string][]*file{}, seen: map[string]bool{}, names: map[string]bool{}}
	files, err := r.parse(dir)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		ast.Inspect(f.ast, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Field:
				r.tag(n)
			case *ast.BasicLit:
				if s, err := strconv.Unquote(n.Value); literals && n.Kind == token.STRING && err == nil && settingName.MatchString(s) {
					r.names[s] = true
				}
			}
			return true
		})
		if err := r.followRefs(f); err != nil {
			return nil, err
		}
	}
	if len(r.names) == 0 {
		return nil, fmt.Errorf("no POSTLINE_* settings found in %s: has the way settings are declared changed?", dir)
	}
	return r.names, nil
}

// file is one parsed source file with the module packages it imports, by
// the name the file uses for them.
type file struct {
	dir     string // relative to the module root
	ast     *ast.File
	imports map[string]string // local name -> directory relative to the module root
}

type reader struct {
	root, module string
	pkgs         map[string][]*file // parsed packages by directory
	seen         map[string]bool    // "dir.Type" already followed
	names        map[string]bool
}

// modulePath reads the module line of root's go.mod.
func modulePath(root string) (string, error) {
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("read the module path: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	if err := s.Err(); err != nil {
		return "", fmt.Errorf("read %s: %w", f.Name(), err)
	}
	return "", fmt.Errorf("%s has no module line", f.Name())
}

// parse parses the non-test Go files of dir once.
func (r *reader) parse(dir string) ([]*file, error) {
	if files, ok := r.pkgs[dir]; ok {
		return files, nil
	}
	paths, err := filepath.Glob(filepath.Join(r.root, dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*file
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parse settings source: %w", err)
		}
		imports := map[string]string{}
		for _, spec := range f.Imports {
			importPath, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				continue
			}
			rel, ok := strings.CutPrefix(importPath, r.module+"/")
			if !ok {
				continue // outside the module: no settings of ours
			}
			name := path.Base(importPath)
			if spec.Name != nil {
				name = spec.Name.Name
			}
			imports[name] = rel
		}
		files = append(files, &file{dir: dir, ast: f, imports: imports})
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no Go source in %s", dir)
	}
	r.pkgs[dir] = files
	return files, nil
}

// hasEnvTag reports whether field has an env tag at all (config loads a
// tagged field as one setting and does not walk into it).
func hasEnvTag(field *ast.Field) bool {
	if field.Tag == nil {
		return false
	}
	tag, err := strconv.Unquote(field.Tag.Value)
	if err != nil {
		return false
	}
	_, ok := reflect.StructTag(tag).Lookup("env")
	return ok
}

func isField(n ast.Node) bool {
	_, ok := n.(*ast.Field)
	return ok
}

// tag records a field's env tag when it names a setting.
func (r *reader) tag(field *ast.Field) {
	if field.Tag == nil {
		return
	}
	tag, err := strconv.Unquote(field.Tag.Value)
	if err != nil {
		return
	}
	if env := reflect.StructTag(tag).Get("env"); settingName.MatchString(env) {
		r.names[env] = true
	}
}

// followRefs follows the types f holds in untagged struct fields, declares
// variables of, or builds composite literals of, when they belong to
// another package of the module. Types of f's own package need no following: all of its
// files are read whole.
func (r *reader) followRefs(f *file) error {
	var err error
	ast.Inspect(f.ast, func(n ast.Node) bool {
		if err != nil {
			return false
		}
		var typ ast.Expr
		switch n := n.(type) {
		case *ast.Field:
			if !hasEnvTag(n) {
				typ = n.Type
			}
		case *ast.ValueSpec:
			typ = n.Type
		case *ast.CompositeLit:
			typ = n.Type
		}
		if star, ok := typ.(*ast.StarExpr); ok && !isField(n) {
			typ = star.X // a pointer variable or &T{}; config walks no pointer fields
		}
		if typ != nil {
			err = r.follow(f, typ)
		}
		return true
	})
	return err
}

// follow reads the settings of the struct type expr names, as seen from f,
// when that type is in another package of the module.
func (r *reader) follow(f *file, expr ast.Expr) error {
	sel, ok := expr.(*ast.SelectorExpr)
	if !ok {
		return nil
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok {
		return nil
	}
	dir, ok := f.imports[pkg.Name]
	if !ok {
		return nil
	}
	return r.readType(dir, sel.Sel.Name)
}

// readType records the env tags of struct type name in dir and follows its
// untagged fields.
func (r *reader) readType(dir, name string) error {
	key := dir + "." + name
	if r.seen[key] {
		return nil
	}
	r.seen[key] = true
	files, err := r.parse(dir)
	if err != nil {
		return err
	}
	for _, f := range files {
		for _, decl := range f.ast.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}
			for _, spec := range gen.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if ts.Name.Name != name || !ok {
					continue
				}
				for _, field := range st.Fields.List {
					if hasEnvTag(field) {
						r.tag(field)
						continue
					}
					if id, ok := field.Type.(*ast.Ident); ok {
						err = r.readType(dir, id.Name) // same package
					} else {
						err = r.follow(f, field.Type)
					}
					if err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}
