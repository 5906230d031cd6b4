package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/idempotency"
)

// inFlightRow is a row in flight in the output of postctl audit.
type inFlightRow struct {
	MessageID        string     `json:"message_id"`
	Status           string     `json:"status"`
	Attempt          int        `json:"attempt"`
	AgeSeconds       float64    `json:"age_seconds"`
	LeaseOwner       string     `json:"lease_owner,omitempty"`
	LeaseExpiresAt   *time.Time `json:"lease_expires_at,omitempty"`
	PastLeaseSeconds float64    `json:"past_lease_seconds,omitempty"`
	ErrorClass       string     `json:"error_class,omitempty"`
	UpdatedAt        time.Time  `json:"updated_at"`
}

func newInFlightRow(f idempotency.InFlight) inFlightRow {
	return inFlightRow{
		MessageID: f.MessageID, Status: string(f.Status), Attempt: f.Attempt, AgeSeconds: seconds(f.Age),
		LeaseOwner: f.LeaseOwner, LeaseExpiresAt: timePtr(f.LeaseExpiresAt), PastLeaseSeconds: seconds(f.PastLease),
		ErrorClass: f.ErrorClass, UpdatedAt: f.UpdatedAt.UTC(),
	}
}

// auditReport is the output of postctl audit.
type auditReport struct {
	At                time.Time                    `json:"at"`
	OK                bool                         `json:"ok"`
	Total             int64                        `json:"total"`
	Counts            map[idempotency.Status]int64 `json:"counts"`
	InFlight          int64                        `json:"in_flight"`
	OldestInFlight    *inFlightRow                 `json:"oldest_in_flight"`
	LeaseGraceSeconds float64                      `json:"lease_grace_seconds"`
	StuckCount        int64                        `json:"stuck_count"`
	Stuck             []inFlightRow                `json:"stuck"`
	MaxAgeSeconds     float64                      `json:"max_age_seconds"`
	TooOldCount       int64                        `json:"too_old_count"`
	TooOld            []inFlightRow                `json:"too_old"`
	// Published and the missing fields are set with --published.
	Published    *int     `json:"published,omitempty"`
	MissingCount *int     `json:"missing_count,omitempty"`
	Missing      []string `json:"missing,omitempty"`
}

// problems lists what makes the audit fail, for the error message.
func (r auditReport) problems() []string {
	var out []string
	if r.MissingCount != nil && *r.MissingCount > 0 {
		out = append(out, fmt.Sprintf("%d published %s no row", *r.MissingCount, plural(*r.MissingCount, "Message-ID has", "Message-IDs have")))
	}
	if r.StuckCount > 0 {
		out = append(out, fmt.Sprintf("%d %s in sending past the lease by more than %s (--lease-grace)",
			r.StuckCount, plural(int(r.StuckCount), "row", "rows"), formatAge(time.Duration(r.LeaseGraceSeconds*float64(time.Second)))))
	}
	if r.TooOldCount > 0 {
		out = append(out, fmt.Sprintf("%d %s in flight for longer than %s (--max-age)",
			r.TooOldCount, plural(int(r.TooOldCount), "row", "rows"), formatAge(time.Duration(r.MaxAgeSeconds*float64(time.Second)))))
	}
	return out
}

func newAuditCmd(g *globals) *cobra.Command {
	var (
		opts      idempotency.AuditOptions
		published string
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Check that every Message-ID is in one terminal state or in flight for a bounded time",
		Long: `Audit the rows in PostgreSQL (--database-url). Every Message-ID has exactly one row
(its primary key), and the row is either terminal (sent, failed, dead) or in flight
(pending, sending, retrying) with an age, counted from the job's first publication.
The audit reports the rows per status, the oldest row in flight, and fails when
  - a row is stuck: sending, with a lease that expired more than --lease-grace ago
    (the reaper should have handed it back: is it running?);
  - a row has been in flight for longer than --max-age (the worker should have made
    it dead: see its max age per priority);
  - with --published FILE, a published Message-ID has no row at all (the job was
    lost before any worker claimed it, or it is still waiting in the jobs topic:
    compare with postctl lag).
All numbers come from one consistent snapshot. Exit code 0 when nothing fails,
1 when something does (or the audit could not run), 2 for a usage error.

--published reads a file ("-" for stdin) of JSON Lines, one per line: a JSON string
(a Message-ID), an object with "message_id" (a job, as publish --file takes), or an
object with "message_ids" (the output of postctl publish --output json). Angle
brackets around IDs are ignored.

--output json prints one object:
  {"at": time, "ok": bool, "total", "counts": {status: n, for all six statuses},
   "in_flight", "oldest_in_flight": ROW or null,
   "lease_grace_seconds", "stuck_count", "stuck": [ROW],
   "max_age_seconds", "too_old_count", "too_old": [ROW],
   "published"?, "missing_count"?, "missing"?: [message_id]}   (with --published)
  ROW = {"message_id", "status", "attempt", "age_seconds", "lease_owner"?,
         "lease_expires_at"?, "past_lease_seconds"?, "error_class"?, "updated_at"}
"stuck", "too_old" and "missing" list at most --limit entries; the counts are exact.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case opts.MaxAge <= 0:
				return usagef("--max-age %s: must be positive", opts.MaxAge)
			case opts.LeaseGrace < 0:
				return usagef("--lease-grace %s: must not be negative", opts.LeaseGrace)
			case opts.Limit < 1:
				return usagef("--limit %d: must be at least 1", opts.Limit)
			}
			if opts.LeaseGrace == 0 {
				opts.LeaseGrace = time.Nanosecond // zero is "any expired lease", not the default
			}
			var ids []string
			if published != "" {
				var err error
				if ids, err = readPublished(g, published); err != nil {
					return usageError{err}
				}
			}
			return audit(cmd.Context(), g, opts, published != "", ids)
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&opts.MaxAge, "max-age", idempotency.DefaultAuditMaxAge, "a row in flight for longer than this fails the audit")
	fl.DurationVar(&opts.LeaseGrace, "lease-grace", idempotency.DefaultAuditLeaseGrace, "a sending row past its lease by more than this is stuck (0: any)")
	fl.IntVar(&opts.Limit, "limit", idempotency.DefaultAuditLimit, "list at most this many stuck, too old and missing messages each")
	fl.StringVar(&published, "published", "", `JSON Lines file of published Message-IDs ("-" for stdin) to check for rows`)
	return cmd
}

func audit(ctx context.Context, g *globals, opts idempotency.AuditOptions, checkPublished bool, published []string) error {
	reader, done, err := openReader(ctx, g)
	if err != nil {
		return err
	}
	defer done()
	var missing []string
	if checkPublished {
		// Checked before the snapshot: a row that appears in between is
		// counted in it, so a missing ID is missing for sure.
		if missing, err = reader.Missing(ctx, published); err != nil {
			return err
		}
	}
	a, err := reader.Audit(ctx, opts)
	if err != nil {
		return err
	}
	rep := newAuditReport(a, opts)
	if checkPublished {
		n, m := len(uniqueStrings(published)), len(missing)
		rep.Published, rep.MissingCount = &n, &m
		rep.Missing = missing[:min(len(missing), opts.Limit)]
	}
	problems := rep.problems()
	rep.OK = len(problems) == 0
	if err := printReport(g, rep, func() error { return writeAudit(g, rep) }); err != nil {
		return err
	}
	if !rep.OK {
		return fmt.Errorf("audit failed: %s", strings.Join(problems, "; "))
	}
	return nil
}

func newAuditReport(a idempotency.AuditReport, opts idempotency.AuditOptions) auditReport {
	rep := auditReport{
		At: a.At.UTC(), Total: a.Total(), Counts: a.Counts, InFlight: a.InFlightCount(),
		LeaseGraceSeconds: seconds(opts.LeaseGrace), StuckCount: a.StuckCount, Stuck: []inFlightRow{},
		MaxAgeSeconds: seconds(opts.MaxAge), TooOldCount: a.TooOldCount, TooOld: []inFlightRow{},
	}
	if a.Oldest != nil {
		o := newInFlightRow(*a.Oldest)
		rep.OldestInFlight = &o
	}
	for _, f := range a.Stuck {
		rep.Stuck = append(rep.Stuck, newInFlightRow(f))
	}
	for _, f := range a.TooOld {
		rep.TooOld = append(rep.TooOld, newInFlightRow(f))
	}
	return rep
}

// writeAudit writes the text form of an audit.
func writeAudit(g *globals, rep auditReport) error {
	var rows [][]string
	for _, st := range idempotency.Statuses {
		kind := "in flight"
		if st.Terminal() {
			kind = "terminal"
		}
		rows = append(rows, []string{string(st), kind, strconv.FormatInt(rep.Counts[st], 10)})
	}
	rows = append(rows, []string{"total", "", strconv.FormatInt(rep.Total, 10)})
	if err := writeTable(g.stdout, []string{"STATUS", "KIND", "ROWS"}, rows); err != nil {
		return err
	}
	fmt.Fprintln(g.stdout)
	if o := rep.OldestInFlight; o != nil {
		fmt.Fprintf(g.stdout, "oldest in flight: %s, %s for %s (attempt %d)\n", o.MessageID, o.Status,
			formatAge(time.Duration(o.AgeSeconds*float64(time.Second))), o.Attempt)
	} else {
		fmt.Fprintln(g.stdout, "oldest in flight: none")
	}
	fmt.Fprintf(g.stdout, "stuck past their lease (grace %s): %d\n", formatAge(time.Duration(rep.LeaseGraceSeconds*float64(time.Second))), rep.StuckCount)
	fmt.Fprintf(g.stdout, "in flight longer than %s: %d\n", formatAge(time.Duration(rep.MaxAgeSeconds*float64(time.Second))), rep.TooOldCount)
	if rep.Published != nil {
		fmt.Fprintf(g.stdout, "published: %d, without a row: %d\n", *rep.Published, *rep.MissingCount)
	}
	for _, list := range []struct {
		title string
		rows  []inFlightRow
	}{{"STUCK", rep.Stuck}, {"TOO OLD", rep.TooOld}} {
		if len(list.rows) == 0 {
			continue
		}
		fmt.Fprintf(g.stdout, "\n%s\n", list.title)
		var rows [][]string
		for _, r := range list.rows {
			lease := "-"
			if r.LeaseOwner != "" {
				lease = r.LeaseOwner
				if r.PastLeaseSeconds > 0 {
					lease += ", expired " + formatAge(time.Duration(r.PastLeaseSeconds*float64(time.Second))) + " ago"
				}
			}
			rows = append(rows, []string{oneLine(r.MessageID, 80), r.Status, strconv.Itoa(r.Attempt),
				formatAge(time.Duration(r.AgeSeconds * float64(time.Second))), oneLine(lease, 60), oneLine(r.ErrorClass, 20)})
		}
		if err := writeTable(g.stdout, []string{"MESSAGE_ID", "STATUS", "ATTEMPT", "AGE", "LEASE", "CLASS"}, rows); err != nil {
			return err
		}
	}
	if len(rep.Missing) > 0 {
		fmt.Fprintf(g.stdout, "\nMISSING (published, no row)\n%s\n", strings.Join(rep.Missing, "\n"))
	}
	return nil
}

// readPublished reads the Message-IDs of the --published file.
func readPublished(g *globals, path string) ([]string, error) {
	var r io.Reader = g.stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("--published: %w", err)
		}
		defer f.Close()
		r = f
	}
	ids, err := parsePublished(r)
	if err != nil {
		return nil, fmt.Errorf("--published %s: %w", path, err)
	}
	return ids, nil
}

// maxPublishedLine bounds one line of a --published file: a job line may
// carry its attachments.
const maxPublishedLine = 16 << 20

// parsePublished reads JSON Lines of published Message-IDs: each non-blank
// line is a JSON string, an object with "message_id", or an object with
// "message_ids". Errors name the line.
func parsePublished(r io.Reader) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxPublishedLine)
	var ids []string
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		got, err := publishedIDs(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		ids = append(ids, got...)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return ids, nil
}

func publishedIDs(line []byte) ([]string, error) {
	if line[0] == '"' {
		var id string
		if err := json.Unmarshal(line, &id); err != nil {
			return nil, err
		}
		if bareMessageID(id) == "" {
			return nil, errors.New("empty Message-ID")
		}
		return []string{bareMessageID(id)}, nil
	}
	var v struct {
		MessageID  *string  `json:"message_id"`
		MessageIDs []string `json:"message_ids"`
	}
	if err := json.Unmarshal(line, &v); err != nil {
		return nil, fmt.Errorf("want a JSON string or an object with message_id or message_ids: %w", err)
	}
	var ids []string
	if v.MessageID != nil {
		ids = append(ids, *v.MessageID)
	}
	ids = append(ids, v.MessageIDs...)
	if len(ids) == 0 {
		return nil, errors.New(`no "message_id" or "message_ids" (a job must carry its message_id to be audited)`)
	}
	for i, id := range ids {
		if ids[i] = bareMessageID(id); ids[i] == "" {
			return nil, errors.New("empty Message-ID")
		}
	}
	return ids, nil
}

// uniqueStrings returns ss without repeats.
func uniqueStrings(ss []string) []string {
	seen := make(map[string]bool, len(ss))
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
