package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/postline/postline/internal/suppression"
)

// Bounds of a suppression import.
const (
	// maxUploadBytes is the largest upload the import takes (the whole
	// multipart form): some 100,000 addresses.
	maxUploadBytes = 5 << 20
	// importPreviewRows is how many parsed rows the preview shows.
	importPreviewRows = 20
	// importKept is how long a previewed import waits for its confirmation.
	importKept = 30 * time.Minute
	// maxPendingImports bounds the previews kept waiting at once.
	maxPendingImports = 20
)

// pendingImport is a previewed import waiting for its operator's
// confirmation: the parsed entries stay in the console's memory, so the
// confirmation imports exactly what was previewed.
type pendingImport struct {
	operator string
	entries  []suppression.Entry
	file     string
	at       time.Time
}

// pendingImports are the previews waiting, by ID. Like re-drive runs they
// live in one console process: the confirmation must reach the process
// that showed the preview (one replica, or sticky sessions).
type pendingImports struct {
	mu    sync.Mutex
	byID  map[string]pendingImport
	order []string
}

func newPendingImports() *pendingImports { return &pendingImports{byID: map[string]pendingImport{}} }

func (p *pendingImports) put(imp pendingImport) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := newRunID()
	p.byID[id] = imp
	p.order = append(p.order, id)
	for len(p.order) > maxPendingImports {
		delete(p.byID, p.order[0])
		p.order = p.order[1:]
	}
	return id
}

// take removes and returns the import id previewed for name, unless it
// expired.
func (p *pendingImports) take(id, name string, now time.Time) (pendingImport, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	imp, ok := p.byID[id]
	if !ok || imp.operator != name || now.Sub(imp.at) > importKept {
		return pendingImport{}, false
	}
	delete(p.byID, id)
	p.order = slices.DeleteFunc(p.order, func(o string) bool { return o == id })
	return imp, true
}

// importBody is the import page's data: the form, then a preview.
type importBody struct {
	Reasons           []suppression.Reason
	Defaults          suppression.ImportDefaults
	MaxMiB            int
	Preview           *importPreview
	Imported, Changed string // after a confirmed import
}

// importPreview is what an uploaded file would import.
type importPreview struct {
	ID                string
	File              string
	Parsed, New, Seen int
	Bad               []suppression.RowError
	BadCount          int
	Rows              []suppression.Entry
	RowLines          []int
}

// importPage shows the upload form, or what a confirmed import did.
func (s *Server) importPage(w http.ResponseWriter, r *http.Request, v visit) {
	q := r.URL.Query()
	body := importBody{Reasons: suppression.Reasons(), Defaults: suppression.ImportDefaults{Stream: string(suppression.StreamAll)},
		MaxMiB: maxUploadBytes >> 20}
	d := pageData{Title: "Import suppressions", Nav: "suppressions"}.forVisit(&v)
	if n, err := strconv.Atoi(q.Get("imported")); err == nil {
		c, _ := strconv.Atoi(q.Get("changed"))
		d.Notice = fmt.Sprintf("Imported %d entries: %d added or replaced, %d unchanged (an entry as strong or stronger was there).", n, c, max(n-c, 0))
	}
	d.Body = body
	s.render(w, http.StatusOK, "import", d)
}

// auditedImport is an import's preview or confirmation in the audit log.
type auditedImport struct {
	File     string `json:"file,omitempty"`
	Parsed   int    `json:"parsed"`
	New      int    `json:"new"`
	Listed   int    `json:"already_listed"`
	Invalid  int    `json:"invalid"`
	Changed  *int   `json:"changed,omitempty"`
	ImportID string `json:"import_id,omitempty"`
}

// previewImport reads an uploaded CSV or JSON Lines file as postctl
// suppress import does and shows what it would import: rows parsed, new,
// already listed, invalid lines, the first rows; nothing is written yet.
func (s *Server) previewImport(ctx context.Context, r *http.Request, v visit) (outcome, error) {
	d, err := importDefaults(r.PostForm, v.session.Operator)
	if err != nil {
		return outcome{}, err
	}
	file, header, err := r.FormFile("file")
	if err != nil {
		return outcome{}, inputError{"Choose a file to import (CSV with a header row, or JSON Lines)."}
	}
	defer file.Close()
	name := auditedName(header.Filename)
	parsed, err := suppression.ParseImport(file, d)
	if err != nil {
		return outcome{target: auditedImport{File: name}}, inputError{"The file cannot be imported: " + err.Error() + "."}
	}
	p := importPreview{File: name, Parsed: len(parsed.Entries), Bad: parsed.Bad, BadCount: parsed.BadCount}
	if p.Seen, err = s.alreadyListed(ctx, parsed.Entries); err != nil {
		return outcome{target: auditedImport{File: name}}, err
	}
	p.New = p.Parsed - p.Seen
	n := min(len(parsed.Entries), importPreviewRows)
	p.Rows, p.RowLines = parsed.Entries[:n], parsed.Lines[:n]
	if parsed.BadCount == 0 && len(parsed.Entries) > 0 {
		p.ID = s.imports.put(pendingImport{operator: v.session.Operator, entries: parsed.Entries, file: name, at: time.Now()})
	}
	target := auditedImport{File: name, Parsed: p.Parsed, New: p.New, Listed: p.Seen, Invalid: p.BadCount, ImportID: p.ID}
	body := importBody{Reasons: suppression.Reasons(), Defaults: d, MaxMiB: maxUploadBytes >> 20, Preview: &p}
	return outcome{target: target, page: "import", data: pageData{Title: "Import suppressions", Nav: "suppressions", Body: body}}, nil
}

// importDefaults reads the form's values for rows without their own.
func importDefaults(form url.Values, name string) (suppression.ImportDefaults, error) {
	get := func(n string) string { return strings.TrimSpace(form.Get(n)) }
	d := suppression.ImportDefaults{Reason: get("reason"), Tenant: get("tenant"), Stream: get("stream"), Source: get("source"), Now: time.Now()}
	if err := checkFields(field{"Reason", d.Reason, maxReasonBytes}, field{"Tenant", d.Tenant, maxTenantBytes},
		field{"Stream", d.Stream, maxReasonBytes}, field{"Source", d.Source, maxReasonBytes}); err != nil {
		return d, err
	}
	if d.Reason != "" {
		if _, err := suppression.ParseReason(d.Reason); err != nil {
			return d, inputError{"Reason: " + err.Error() + "."}
		}
	}
	if d.Stream == "" {
		d.Stream = string(suppression.StreamAll)
	}
	if _, err := suppression.ParseStream(d.Stream); err != nil {
		return d, inputError{"Pick a stream: transactional, bulk or * (every stream)."}
	}
	if d.Source == "" {
		d.Source = consoleActor(name)
	}
	return d, nil
}

// alreadyListed counts the entries whose key is suppressed now.
func (s *Server) alreadyListed(ctx context.Context, entries []suppression.Entry) (int, error) {
	n := 0
	for chunk := range slices.Chunk(entries, suppression.ImportChunk) {
		keys := make([]suppression.Key, len(chunk))
		for i, e := range chunk {
			keys[i] = e.Key()
		}
		listed, err := s.cfg.Suppressions.Check(ctx, keys)
		if err != nil {
			return 0, err
		}
		for _, k := range keys {
			if _, ok := listed[k]; ok {
				n++
			}
		}
	}
	return n, nil
}

// confirmImport imports what the operator previewed, in one transaction.
func (s *Server) confirmImport(ctx context.Context, r *http.Request, v visit) (any, string, error) {
	id := strings.TrimSpace(r.PostForm.Get("import"))
	imp, ok := s.imports.take(id, v.session.Operator, time.Now())
	if !ok {
		return auditedImport{ImportID: auditedName(id)}, "", inputError{"This import is not waiting any more (confirmed already, older than " +
			importKept.String() + ", or previewed on another console process). Upload the file again."}
	}
	changed, err := s.cfg.Suppressions.Import(ctx, imp.entries)
	target := auditedImport{File: imp.file, Parsed: len(imp.entries), ImportID: id, Changed: &changed}
	if errors.Is(err, suppression.ErrInvalid) {
		return target, "", inputError{"The import was refused: " + err.Error() + "."}
	}
	if err != nil {
		return target, "", err
	}
	return target, "/suppressions/import?" + url.Values{"imported": {strconv.Itoa(len(imp.entries))}, "changed": {strconv.Itoa(changed)}}.Encode(), nil
}
