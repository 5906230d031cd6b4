package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/suppression"
)

// suppressColumns are the CSV columns of export, in order; import takes
// any subset that includes address, in any order.
var suppressColumns = suppression.ImportColumns

// suppressRecord is an entry in JSON output and in JSON Lines import and
// export. Import takes pointers so that a missing field (given by a flag)
// differs from an empty one.
type suppressRecord struct {
	Address   string     `json:"address"`
	Reason    string     `json:"reason"`
	Tenant    string     `json:"tenant"`
	Stream    string     `json:"stream"`
	ExpiresAt *time.Time `json:"expires_at"` // null: never
	Source    string     `json:"source"`
	Note      string     `json:"note,omitempty"`
	MessageID string     `json:"message_id,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
}

func newSuppressRecord(e suppression.Entry) suppressRecord {
	return suppressRecord{Address: e.Address, Reason: string(e.Reason), Tenant: e.Tenant, Stream: string(e.Stream),
		ExpiresAt: timePtr(e.ExpiresAt), Source: e.Source, Note: e.Note, MessageID: e.MessageID, CreatedAt: e.CreatedAt.UTC()}
}

// csvRow is the record in suppressColumns order.
func (r suppressRecord) csvRow() []string {
	expires := ""
	if r.ExpiresAt != nil {
		expires = r.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	return []string{r.Address, r.Reason, r.Tenant, r.Stream, expires, r.Source, r.Note, r.MessageID,
		r.CreatedAt.UTC().Format(time.RFC3339Nano)}
}

// suppressFilterFlags are the filters of ls and export.
type suppressFilterFlags struct {
	tenant, stream, reason, prefix string
	expired                        bool
}

func (f *suppressFilterFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.tenant, "tenant", "", `only this tenant ("" for mail without one); every tenant when not given`)
	fl.StringVar(&f.stream, "stream", "", "only entries of this stream: transactional, bulk or * (the entries of every stream)")
	fl.StringVar(&f.reason, "reason", "", "only entries of this reason: "+reasonNames())
	fl.StringVar(&f.prefix, "prefix", "", "only addresses that begin with this (case-insensitive)")
	fl.BoolVar(&f.expired, "expired", false, "also entries that have expired but are not purged yet")
}

// filter builds the store's filter; a bad value is a usage error.
func (f *suppressFilterFlags) filter(cmd *cobra.Command) (suppression.Filter, error) {
	var out suppression.Filter
	if cmd.Flags().Changed("tenant") {
		out.Tenant = new(f.tenant)
	}
	if f.stream != "" {
		st, err := suppression.ParseStream(f.stream)
		if err != nil {
			return out, usagef("--stream: %w", err)
		}
		out.Stream = st
	}
	if f.reason != "" {
		r, err := suppression.ParseReason(f.reason)
		if err != nil {
			return out, usagef("--reason: %w", err)
		}
		out.Reason = r
	}
	out.AddressPrefix, out.IncludeExpired = f.prefix, f.expired
	return out, nil
}

func reasonNames() string {
	names := make([]string, len(suppression.Reasons()))
	for i, r := range suppression.Reasons() {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

func newSuppressCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "suppress",
		Short: "List, add, remove, import and export suppressed addresses",
		Long: `Manage the suppression lists in PostgreSQL (--database-url, table
postline_suppressions): the addresses mail is not sent to, per tenant ("" for
mail without one) and stream (transactional, bulk, or * for every stream).

Each entry has a reason (` + reasonNames() + `), a
source (what added it: dsn, postctl, import, ...), the Message-ID it came from
if any, when it was made, when it expires (never, unless set; soft bounces
always expire) and an optional note. Addresses are stored as their bare
addr-spec, lowercased: "Ada <ADA@Example.com>" is ada@example.com.

An entry never gets weaker on its own: adding an entry that expires does not
replace one that does not, and a bounce does not replace a complaint. An
entry with reason manual (the default of add) replaces whatever was there.`,
	}
	cmd.AddCommand(newSuppressLsCmd(g), newSuppressAddCmd(g), newSuppressRmCmd(g),
		newSuppressImportCmd(g), newSuppressExportCmd(g))
	return cmd
}

// openSuppressions connects to --database-url and returns a store and a
// func that closes the connections.
func openSuppressions(ctx context.Context, g *globals) (*suppression.Store, func(), error) {
	return openOnPool(ctx, g, func(pool *pgxpool.Pool) (*suppression.Store, error) {
		return suppression.New(suppression.Config{}, pool, nil, nil)
	})
}

// encodeCursor and decodeCursor turn a page's last key into the --after
// token and back.
func encodeCursor(k suppression.Key) string {
	b, _ := json.Marshal([]string{k.Tenant, k.Address, string(k.Stream)})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (suppression.Key, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	var parts []string
	if err == nil {
		err = json.Unmarshal(b, &parts)
	}
	if err == nil && len(parts) != 3 {
		err = errors.New("want three parts")
	}
	if err != nil {
		return suppression.Key{}, fmt.Errorf("not a token printed by suppress ls: %w", err)
	}
	return suppression.Key{Tenant: parts[0], Address: parts[1], Stream: suppression.Stream(parts[2])}, nil
}

// suppressList is the output of suppress ls.
type suppressList struct {
	Entries []suppressRecord `json:"entries"`
	// NextAfter is the --after token of the next page; set when the page
	// is full.
	NextAfter string `json:"next_after,omitempty"`
}

func newSuppressLsCmd(g *globals) *cobra.Command {
	var (
		ff    suppressFilterFlags
		limit int
		after string
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List suppressed addresses",
		Long: `List the live entries, ordered by tenant, address and stream, a page at a time.
A full page ends with the --after token of the next one.

--output json prints one object:
  {"entries": [{"address", "reason", "tenant", "stream",
                "expires_at": time or null (never), "source",
                "note"?, "message_id"?, "created_at"}],
   "next_after"?: token of the next page}
Times are RFC 3339 in UTC; fields marked ? are left out when empty.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := ff.filter(cmd)
			if err != nil {
				return err
			}
			if limit < 1 || limit > suppression.MaxListLimit {
				return usagef("--limit %d: want 1 to %d", limit, suppression.MaxListLimit)
			}
			f.Limit = limit
			if after != "" {
				k, err := decodeCursor(after)
				if err != nil {
					return usagef("--after: %w", err)
				}
				f.After = &k
			}
			return suppressLs(cmd.Context(), g, f)
		},
	}
	ff.register(cmd)
	cmd.Flags().IntVar(&limit, "limit", suppression.DefaultListLimit, "entries per page")
	cmd.Flags().StringVar(&after, "after", "", "the next_after token of the previous page")
	return cmd
}

func suppressLs(ctx context.Context, g *globals, f suppression.Filter) error {
	s, closeDB, err := openSuppressions(ctx, g)
	if err != nil {
		return err
	}
	defer closeDB()
	entries, err := s.List(ctx, f)
	if err != nil {
		return withMigrateHint(err)
	}
	out := suppressList{Entries: make([]suppressRecord, len(entries))}
	for i, e := range entries {
		out.Entries[i] = newSuppressRecord(e)
	}
	if len(entries) == f.Limit {
		out.NextAfter = encodeCursor(entries[len(entries)-1].Key())
	}
	return printReport(g, out, func() error {
		if len(entries) == 0 {
			_, err := fmt.Fprintln(g.stdout, "no suppressed addresses match")
			return err
		}
		rows := make([][]string, len(out.Entries))
		for i, r := range out.Entries {
			expires := "never"
			if r.ExpiresAt != nil {
				expires = formatTime(*r.ExpiresAt)
			}
			rows[i] = []string{oneLine(r.Address, 80), oneLine(r.Tenant, 30), r.Stream, r.Reason, oneLine(r.Source, 20),
				formatTime(r.CreatedAt), expires, oneLine(r.Note, 40)}
		}
		if err := writeTable(g.stdout, []string{"ADDRESS", "TENANT", "STREAM", "REASON", "SOURCE", "CREATED", "EXPIRES", "NOTE"}, rows); err != nil {
			return err
		}
		if out.NextAfter != "" {
			_, err := fmt.Fprintf(g.stdout, "more: --after %s\n", out.NextAfter)
			return err
		}
		return nil
	})
}

// suppressChange is the output of suppress add and import.
type suppressChange struct {
	// Entries counts the entries given (rows of an import).
	Entries int `json:"entries"`
	// Changed counts the entries inserted or replaced; the others met an
	// entry as strong or stronger and left it alone.
	Changed   int `json:"changed"`
	Unchanged int `json:"unchanged"`
}

func (c suppressChange) text(verb string) string {
	return fmt.Sprintf("%s %d %s: %d added or replaced, %d unchanged (an entry as strong or stronger was there)",
		verb, c.Entries, plural(c.Entries, "entry", "entries"), c.Changed, c.Unchanged)
}

func newSuppressAddCmd(g *globals) *cobra.Command {
	var (
		reason, tenant, stream, note, source string
		expires                              time.Duration
	)
	cmd := &cobra.Command{
		Use:   "add ADDRESS...",
		Short: "Suppress addresses",
		Long: `Add an entry for each ADDRESS (an RFC 5322 address; a display name is dropped)
of --tenant on --stream, in one statement. With the default --reason manual the
entries replace what was there; with another reason they follow the rule that
an entry never gets weaker (see postctl suppress --help).

--output json prints {"entries", "changed", "unchanged"}.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := suppression.ParseReason(reason)
			if err != nil {
				return usagef("--reason: %w", err)
			}
			st, err := suppression.ParseStream(stream)
			if err != nil {
				return usagef("--stream: %w", err)
			}
			if expires < 0 {
				return usagef("--expires %s: must not be negative", expires)
			}
			now := time.Now()
			entries := make([]suppression.Entry, len(args))
			for i, a := range args {
				e := suppression.Entry{Tenant: tenant, Stream: st, Address: a, Reason: r, Source: source, Note: note, CreatedAt: now}
				if expires > 0 {
					e.ExpiresAt = now.Add(expires)
				}
				if err := e.Validate(); err != nil {
					return usagef("%s: %w", oneLine(a, 80), err)
				}
				entries[i] = e
			}
			return suppressAdd(cmd.Context(), g, entries)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&reason, "reason", string(suppression.ReasonManual), "why: "+reasonNames())
	fl.StringVar(&tenant, "tenant", "", `the tenant ("" for mail without one)`)
	fl.StringVar(&stream, "stream", string(suppression.StreamAll), "the stream: transactional, bulk or * (every stream)")
	fl.DurationVar(&expires, "expires", 0, "expire the entries after this long, e.g. 720h (0: never; soft_bounce: 72h)")
	fl.StringVar(&note, "note", "", "a note kept with the entries")
	fl.StringVar(&source, "source", "postctl", "what added the entries")
	return cmd
}

func suppressAdd(ctx context.Context, g *globals, entries []suppression.Entry) error {
	s, closeDB, err := openSuppressions(ctx, g)
	if err != nil {
		return err
	}
	defer closeDB()
	n, err := s.Add(ctx, entries)
	if err != nil {
		return withMigrateHint(err)
	}
	c := suppressChange{Entries: len(entries), Changed: n, Unchanged: max(len(entries)-n, 0)}
	return g.print(c, c.text("added"))
}

func newSuppressRmCmd(g *globals) *cobra.Command {
	var tenant, stream string
	cmd := &cobra.Command{
		Use:   "rm ADDRESS...",
		Short: "Stop suppressing addresses",
		Long: `Remove the entries of each ADDRESS of --tenant: of every stream, or only the
entry of --stream (transactional, bulk or *) when given.

--output json prints {"removed"}.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var st suppression.Stream
			if cmd.Flags().Changed("stream") {
				var err error
				if st, err = suppression.ParseStream(stream); err != nil {
					return usagef("--stream: %w", err)
				}
			}
			keys := make([]suppression.Key, len(args))
			for i, a := range args {
				if _, err := suppression.Normalize(a); err != nil {
					return usagef("%s: %w", oneLine(a, 80), err)
				}
				keys[i] = suppression.Key{Tenant: tenant, Stream: st, Address: a}
			}
			return suppressRm(cmd.Context(), g, keys)
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", `the tenant ("" for mail without one)`)
	cmd.Flags().StringVar(&stream, "stream", "", "only the entry of this stream (default: every stream)")
	return cmd
}

func suppressRm(ctx context.Context, g *globals, keys []suppression.Key) error {
	s, closeDB, err := openSuppressions(ctx, g)
	if err != nil {
		return err
	}
	defer closeDB()
	n, err := s.Remove(ctx, keys)
	if err != nil {
		return withMigrateHint(err)
	}
	return g.print(struct {
		Removed int `json:"removed"`
	}{n}, fmt.Sprintf("removed %d %s", n, plural(n, "entry", "entries")))
}

// importDefaults fill the fields a row does not have.
type importDefaults struct {
	reason, tenant, stream, source string
	now                            time.Time
}

func newSuppressImportCmd(g *globals) *cobra.Command {
	var d importDefaults
	cmd := &cobra.Command{
		Use:   "import FILE|-",
		Short: "Add the entries of a CSV or JSON Lines file",
		Long: `Add the entries of FILE (- for standard input), the output of suppress export
or a list from elsewhere. The format is detected: JSON Lines when the first
character is {, else CSV with a header row naming its columns, in any order:
  ` + strings.Join(suppressColumns, ",") + `
Only address is required. A column (or JSON field) that is missing takes the
value of --reason, --tenant, --stream or --source; a missing created_at is now.
expires_at and created_at are RFC 3339 times; an empty expires_at is never.

The whole file is checked first: bad rows are reported by line number and
nothing is imported. Then every entry is added in one transaction, under the
rule that an entry never gets weaker (see postctl suppress --help).

--output json prints {"entries", "changed", "unchanged"}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if d.reason != "" {
				if _, err := suppression.ParseReason(d.reason); err != nil {
					return usagef("--reason: %w", err)
				}
			}
			if _, err := suppression.ParseStream(d.stream); err != nil {
				return usagef("--stream: %w", err)
			}
			var in io.Reader = g.stdin
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return usagef("%w", err)
				}
				defer f.Close()
				in = f
			}
			d.now = time.Now()
			entries, err := parseSuppressions(in, d)
			if err != nil {
				return err
			}
			return suppressImport(cmd.Context(), g, entries)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&d.reason, "reason", "", "the reason of rows without one ("+reasonNames()+"); without it, rows need a reason")
	fl.StringVar(&d.tenant, "tenant", "", "the tenant of rows without a tenant column or field")
	fl.StringVar(&d.stream, "stream", string(suppression.StreamAll), "the stream of rows without one")
	fl.StringVar(&d.source, "source", "import", "the source of rows without one")
	return cmd
}

// parseSuppressions reads every row of in (JSON Lines or CSV, detected)
// into validated entries, or fails listing the bad rows by line.
func parseSuppressions(in io.Reader, d importDefaults) ([]suppression.Entry, error) {
	parsed, err := suppression.ParseImport(in, suppression.ImportDefaults{Reason: d.reason, Tenant: d.tenant, Stream: d.stream,
		Source: d.source, Now: d.now})
	if err == nil {
		err = parsed.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	return parsed.Entries, nil
}

func suppressImport(ctx context.Context, g *globals, entries []suppression.Entry) error {
	s, closeDB, err := openSuppressions(ctx, g)
	if err != nil {
		return err
	}
	defer closeDB()
	changed, err := s.Import(ctx, entries)
	if err != nil {
		return fmt.Errorf("import: nothing imported: %w", withMigrateHint(err))
	}
	c := suppressChange{Entries: len(entries), Changed: changed, Unchanged: max(len(entries)-changed, 0)}
	return g.print(c, c.text("imported"))
}

func newSuppressExportCmd(g *globals) *cobra.Command {
	var (
		ff     suppressFilterFlags
		format string
	)
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write the entries as CSV or JSON Lines, for suppress import",
		Long: `Write the live entries (every tenant unless --tenant is given) to standard
output, ordered by tenant, address and stream: CSV with a header row
(-o csv, the default) or JSON Lines (-o json), one entry per line in the shape
of suppress ls's entries. suppress import reads either back.

CSV columns: ` + strings.Join(suppressColumns, ",") + `
Times are RFC 3339 in UTC; an empty expires_at is never.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := ff.filter(cmd)
			if err != nil {
				return err
			}
			switch format {
			case "csv", "text":
				format = "csv"
			case "json":
			default:
				return usagef("--output %q: want csv or json", format)
			}
			return suppressExport(cmd.Context(), g, f, format)
		},
	}
	ff.register(cmd)
	// This command's own --output (csv or json) stands in for the global
	// one (text or json), which it does not use.
	cmd.Flags().StringVarP(&format, "output", "o", "csv", "output format: csv or json (JSON Lines)")
	return cmd
}

func suppressExport(ctx context.Context, g *globals, f suppression.Filter, format string) error {
	s, closeDB, err := openSuppressions(ctx, g)
	if err != nil {
		return err
	}
	defer closeDB()
	w := bufio.NewWriter(g.stdout)
	var write func(suppressRecord) error
	if format == "json" {
		enc := json.NewEncoder(w)
		write = func(r suppressRecord) error { return enc.Encode(r) }
	} else {
		cw := csv.NewWriter(w)
		if err := cw.Write(suppressColumns); err != nil {
			return err
		}
		write = func(r suppressRecord) error {
			if err := cw.Write(r.csvRow()); err != nil {
				return err
			}
			cw.Flush() // into w, which buffers
			return cw.Error()
		}
	}
	if err := s.Export(ctx, f, func(e suppression.Entry) error { return write(newSuppressRecord(e)) }); err != nil {
		return withMigrateHint(err)
	}
	return w.Flush()
}
