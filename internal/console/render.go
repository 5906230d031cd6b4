package console

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"time"

	"github.com/postline/postline/internal/operator"
)

// pageNames are the templates under templates/, each rendered inside
// layout.html.
var pageNames = []string{"login", "search", "mail", "suppressions", "audit", "error", "import", "deadletters", "redrive", "redriverun",
	"webhooks", "webhookreplay", "queues", "relays"}

// pages are the parsed templates by name.
type pages struct{ byName map[string]*template.Template }

func parsePages(fsys fs.FS) (*pages, error) {
	p := &pages{byName: map[string]*template.Template{}}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(templateFuncs).ParseFS(fsys, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", name, err)
		}
		p.byName[name] = t
	}
	return p, nil
}

var templateFuncs = template.FuncMap{
	"ts":      timeElement,
	"dash":    func(s string) string { return cmpOr(s, "-") },
	"streams": func() []string { return []string{"transactional", "bulk", "*"} },
	"age":     func(now, t time.Time) string { return now.Sub(t).Truncate(time.Second).String() },
	"state":   breakerState,
	"rate":    sendRate,
	"plural": func(n int, one, many string) string {
		if n == 1 {
			return one
		}
		return many
	},
	"num": func(n int) string {
		if n == 0 {
			return "-"
		}
		return fmt.Sprint(n)
	},
}

func cmpOr(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

// timeElement shows t in UTC inside a <time> element whose datetime the
// console's script rewrites in the viewer's zone; "-" for the zero time.
func timeElement(t time.Time) template.HTML {
	if t.IsZero() {
		return "-"
	}
	t = t.UTC()
	return template.HTML(`<time datetime="` + t.Format(time.RFC3339) + `">` + t.Format("2006-01-02 15:04:05") + ` UTC</time>`)
}

// pageData is what layout.html and every page read.
type pageData struct {
	Title    string
	Nav      string // the menu entry to mark current
	Operator string
	Role     operator.Role
	CanAct   bool
	CSRF     string
	Notice   string
	Error    string
	// Refresh, when more than 0, reloads the page after that many
	// seconds (a re-drive's progress).
	Refresh int
	Body    any
}

// forVisit fills the signed-in operator's part of d.
func (d pageData) forVisit(v *visit) pageData {
	if v != nil {
		d.Operator, d.Role, d.CanAct, d.CSRF = v.session.Operator, v.session.Role, v.session.Role.CanAct(), v.session.CSRF
	}
	return d
}

// render writes page name with status; a template that fails is a 500
// with no partial page.
func (s *Server) render(w http.ResponseWriter, status int, name string, d pageData) {
	var buf bytes.Buffer
	if err := s.pages.byName[name].ExecuteTemplate(&buf, "layout", d); err != nil {
		s.log.Error("console: render page", "page", name, "error", err)
		http.Error(w, "the console could not render this page; its log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail answers with the error page saying msg, which must tell the
// operator what to do.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, v *visit, status int, msg string) {
	s.render(w, status, "error", pageData{Title: http.StatusText(status), Error: msg}.forVisit(v))
}

// storeFailed logs err (a store's, which holds no secret) and answers 503.
func (s *Server) storeFailed(w http.ResponseWriter, r *http.Request, v *visit, what string, err error) {
	s.log.Error("console: request failed", "path", r.URL.Path, "while", what, "error", err)
	s.fail(w, r, v, http.StatusServiceUnavailable,
		"The console could not reach its database or the mail read layer ("+what+"). Try again in a moment; if it persists, check the console's /readyz and its log.")
}
