package suppression

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Limits of an import file.
const (
	// ImportChunk is the entries per Add statement within an import's
	// transaction.
	ImportChunk = 1000
	// MaxRowErrors is how many bad rows a ParsedImport keeps; the rest
	// are counted.
	MaxRowErrors = 20
	// maxImportLine bounds a JSON line.
	maxImportLine = 1 << 20
)

// ImportColumns are the CSV columns of an export, in order; an import takes
// any subset that includes address, in any order.
var ImportColumns = []string{"address", "reason", "tenant", "stream", "expires_at", "source", "note", "message_id", "created_at"}

// ImportDefaults fill the fields a row does not have.
type ImportDefaults struct {
	Reason, Tenant, Stream, Source string
	// Now is the created_at of rows without one.
	Now time.Time
}

// RowError is a bad row of an import file.
type RowError struct {
	Line int
	Err  error
}

func (e RowError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// ParsedImport is what an import file holds: its valid entries, each with
// its line, and its bad rows.
type ParsedImport struct {
	Entries []Entry
	// Lines are the line numbers of Entries, one for one.
	Lines []int
	// Bad are the first MaxRowErrors bad rows; BadCount counts them all.
	Bad      []RowError
	BadCount int
}

func (p *ParsedImport) bad(line int, err error) {
	p.BadCount++
	if len(p.Bad) < MaxRowErrors {
		p.Bad = append(p.Bad, RowError{Line: line, Err: err})
	}
}

func (p *ParsedImport) add(line int, e Entry) {
	p.Entries = append(p.Entries, e)
	p.Lines = append(p.Lines, line)
}

// Err is nil when no row is bad, else an error listing the bad rows by
// line: a file with any bad row is imported not at all.
func (p ParsedImport) Err() error {
	if p.BadCount == 0 {
		return nil
	}
	lines := make([]string, len(p.Bad))
	for i, b := range p.Bad {
		lines[i] = b.Error()
	}
	noun := "rows"
	if p.BadCount == 1 {
		noun = "row"
	}
	msg := fmt.Sprintf("%d bad %s, nothing imported:\n  %s", p.BadCount, noun, strings.Join(lines, "\n  "))
	if p.BadCount > len(p.Bad) {
		msg += fmt.Sprintf("\n  and %d more", p.BadCount-len(p.Bad))
	}
	return errors.New(msg)
}

// ParseImport reads every row of in, JSON Lines when its first character
// (after a byte order mark and blank space) is {, else CSV with a header
// row naming some of ImportColumns. A row's missing fields take d's. The
// error is the file's as a whole (empty, a bad CSV header, unreadable);
// bad rows are in the result.
func ParseImport(in io.Reader, d ImportDefaults) (ParsedImport, error) {
	br := bufio.NewReader(in)
	if b, err := br.Peek(3); err == nil && bytes.Equal(b, []byte("\xef\xbb\xbf")) {
		_, _ = br.Discard(3)
	}
	for {
		b, err := br.Peek(1)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return ParsedImport{}, errors.New("the file is empty")
			}
			return ParsedImport{}, fmt.Errorf("read: %w", err)
		}
		if b[0] != ' ' && b[0] != '\t' && b[0] != '\r' && b[0] != '\n' {
			if b[0] == '{' {
				return parseImportLines(br, d)
			}
			return parseImportCSV(br, d)
		}
		_, _ = br.Discard(1)
	}
}

// importRecord is one row of an import: a nil field is missing.
type importRecord struct {
	Address   *string `json:"address"`
	Reason    *string `json:"reason"`
	Tenant    *string `json:"tenant"`
	Stream    *string `json:"stream"`
	ExpiresAt *string `json:"expires_at"`
	Source    *string `json:"source"`
	Note      *string `json:"note"`
	MessageID *string `json:"message_id"`
	CreatedAt *string `json:"created_at"`
}

// entry builds and checks an entry from a row's fields.
func (r importRecord) entry(d ImportDefaults) (Entry, error) {
	or := func(p *string, def string) string {
		if p == nil {
			return def
		}
		return strings.TrimSpace(*p)
	}
	var e Entry
	if r.Address == nil || strings.TrimSpace(*r.Address) == "" {
		return e, errors.New("address is missing")
	}
	addr, err := Normalize(*r.Address)
	if err != nil {
		return e, err
	}
	reason := or(r.Reason, d.Reason)
	if reason == "" {
		return e, errors.New("reason is missing (give a reason column or --reason)")
	}
	e = Entry{Address: addr, Reason: Reason(reason), Tenant: or(r.Tenant, d.Tenant), Stream: Stream(or(r.Stream, d.Stream)),
		Source: or(r.Source, d.Source), MessageID: or(r.MessageID, ""), CreatedAt: d.Now}
	if r.Note != nil {
		e.Note = *r.Note // a note keeps its spaces
	}
	for _, t := range []struct {
		name string
		val  *string
		dst  *time.Time
	}{{"expires_at", r.ExpiresAt, &e.ExpiresAt}, {"created_at", r.CreatedAt, &e.CreatedAt}} {
		if v := or(t.val, ""); v != "" {
			ts, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return e, fmt.Errorf("%s %q: want an RFC 3339 time", t.name, v)
			}
			*t.dst = ts
		}
	}
	return e, e.Validate()
}

func parseImportLines(in *bufio.Reader, d ImportDefaults) (ParsedImport, error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), maxImportLine)
	var (
		out  ParsedImport
		line int
	)
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(text))
		dec.DisallowUnknownFields()
		var r importRecord
		if err := dec.Decode(&r); err != nil {
			out.bad(line, fmt.Errorf("not a JSON object of an entry: %w", err))
			continue
		}
		if dec.More() {
			out.bad(line, errors.New("more than one JSON value"))
			continue
		}
		e, err := r.entry(d)
		if err != nil {
			out.bad(line, err)
			continue
		}
		out.add(line, e)
	}
	if err := sc.Err(); err != nil {
		return ParsedImport{}, fmt.Errorf("line %d: %w", line+1, err)
	}
	return out, nil
}

func parseImportCSV(in io.Reader, d ImportDefaults) (ParsedImport, error) {
	cr := csv.NewReader(in)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return ParsedImport{}, fmt.Errorf("CSV header: %w", err)
	}
	col := make(map[string]int, len(header))
	for i, h := range header {
		h = strings.ToLower(strings.TrimSpace(h))
		if !slices.Contains(ImportColumns, h) {
			if len(h) > 40 {
				h = strings.ToValidUTF8(h[:40], "") + "…"
			}
			return ParsedImport{}, fmt.Errorf("CSV header: unknown column %q (want some of %s)", h, strings.Join(ImportColumns, ","))
		}
		if _, dup := col[h]; dup {
			return ParsedImport{}, fmt.Errorf("CSV header: column %s twice", h)
		}
		col[h] = i
	}
	if _, ok := col["address"]; !ok {
		return ParsedImport{}, errors.New("CSV header: no address column")
	}
	var out ParsedImport
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
				out.bad(pe.StartLine, fmt.Errorf("want %d fields, as the header has", len(header)))
				continue
			}
			return ParsedImport{}, err
		}
		line, _ := cr.FieldPos(0)
		field := func(name string) *string {
			i, ok := col[name]
			if !ok {
				return nil
			}
			v := rec[i]
			return &v
		}
		e, err := importRecord{Address: field("address"), Reason: field("reason"), Tenant: field("tenant"),
			Stream: field("stream"), ExpiresAt: field("expires_at"), Source: field("source"), Note: field("note"),
			MessageID: field("message_id"), CreatedAt: field("created_at")}.entry(d)
		if err != nil {
			out.bad(line, err)
			continue
		}
		out.add(line, e)
	}
}

// Import adds entries in one transaction, ImportChunk to a statement,
// under Add's rule: whole or not at all. It returns the entries inserted
// or replaced.
func (s *Store) Import(ctx context.Context, entries []Entry) (changed int, err error) {
	err = s.InTx(ctx, func(tx *Store) error {
		for chunk := range slices.Chunk(entries, ImportChunk) {
			n, err := tx.Add(ctx, chunk)
			if err != nil {
				return err
			}
			changed += n
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return changed, nil
}
