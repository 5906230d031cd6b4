package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/idempotency"
)

// Limits of postctl unconfirmed.
const (
	defaultUnconfirmedLimit = 50
	maxUnconfirmedLimit     = 1000
	// maxRecipientsPerMail bounds a mail's recipient rows (the idx column
	// is checked to be under 100): reading limit times this many rows, plus
	// one, gets the first limit mails whole and tells whether more follow.
	maxRecipientsPerMail = 100
)

// openRecipient is an open recipient of unconfirmed mail in the output of
// postctl unconfirmed.
type openRecipient struct {
	Index      int        `json:"index"`
	Address    string     `json:"address"`
	Attempt    int        `json:"attempt"`
	Provider   string     `json:"provider,omitempty"`
	AcceptedAt *time.Time `json:"accepted_at,omitempty"`
}

// unconfirmedMail is one mail in the output of postctl unconfirmed.
type unconfirmedMail struct {
	MessageID string    `json:"message_id"`
	Tenant    string    `json:"tenant,omitempty"`
	Stream    string    `json:"stream,omitempty"`
	ConfirmBy time.Time `json:"confirm_by"`
	// OverdueSeconds is how long ago ConfirmBy passed.
	OverdueSeconds float64 `json:"overdue_seconds"`
	// State is unconfirmed once the workers' sweep marked the mail, due
	// while the window has passed and the sweep has not marked it yet.
	State     string          `json:"state"`
	Providers []string        `json:"providers"`
	Open      []openRecipient `json:"open"`
}

// unconfirmedReport is the output of postctl unconfirmed.
type unconfirmedReport struct {
	At    time.Time         `json:"at"`
	Limit int               `json:"limit"`
	More  bool              `json:"more"`
	Mail  []unconfirmedMail `json:"mail"`
}

// newUnconfirmedReport groups rows (by confirm_by, message and index, as
// Store.Unconfirmed returns them) into at most limit mails, as read at the
// database time at. More is set when rows hold a further mail.
func newUnconfirmedReport(rows []idempotency.Recipient, at time.Time, limit int) unconfirmedReport {
	rep := unconfirmedReport{At: at.UTC(), Limit: limit, Mail: []unconfirmedMail{}}
	for _, r := range rows {
		n := len(rep.Mail)
		if n == 0 || rep.Mail[n-1].MessageID != r.MessageID {
			if n == limit {
				rep.More = true
				break
			}
			state := "due"
			if r.Confirmation == "unconfirmed" {
				state = "unconfirmed"
			}
			rep.Mail = append(rep.Mail, unconfirmedMail{MessageID: r.MessageID, Tenant: r.Tenant, Stream: r.Stream,
				ConfirmBy: r.ConfirmBy.UTC(), OverdueSeconds: seconds(at.Sub(r.ConfirmBy)), State: state,
				Providers: []string{}, Open: []openRecipient{}})
			n++
		}
		m := &rep.Mail[n-1]
		m.Open = append(m.Open, openRecipient{Index: r.Index, Address: r.Address, Attempt: r.Attempt,
			Provider: r.Provider, AcceptedAt: timePtr(r.AcceptedAt)})
		if r.Provider != "" && !slices.Contains(m.Providers, r.Provider) {
			m.Providers = append(m.Providers, r.Provider)
		}
	}
	return rep
}

// unconfirmedTable is the text output of postctl unconfirmed.
func unconfirmedTable(rep unconfirmedReport) (header []string, rows [][]string) {
	header = []string{"MESSAGE_ID", "TENANT", "STREAM", "CONFIRM_BY", "OVERDUE", "STATE", "PROVIDER", "OPEN"}
	for _, m := range rep.Mail {
		open := make([]string, len(m.Open))
		for i, o := range m.Open {
			open[i] = strconv.Itoa(o.Index) + " " + o.Address
		}
		rows = append(rows, []string{oneLine(m.MessageID, 80), oneLine(m.Tenant, 30), oneLine(m.Stream, 13),
			formatTime(m.ConfirmBy), formatAge(time.Duration(m.OverdueSeconds * float64(time.Second))), m.State,
			oneLine(strings.Join(m.Providers, ","), 30), oneLine(strings.Join(open, ", "), 100)})
	}
	return header, rows
}

// writeUnconfirmed writes the text output of postctl unconfirmed.
func writeUnconfirmed(g *globals, rep unconfirmedReport) error {
	if len(rep.Mail) == 0 {
		_, err := fmt.Fprintln(g.stdout, "no unconfirmed mail")
		return err
	}
	header, rows := unconfirmedTable(rep)
	if err := writeTable(g.stdout, header, rows); err != nil {
		return err
	}
	open := 0
	for _, m := range rep.Mail {
		open += len(m.Open)
	}
	summary := fmt.Sprintf("%d %s, %d open %s", len(rep.Mail), plural(len(rep.Mail), "mail", "mails"),
		open, plural(open, "recipient", "recipients"))
	if rep.More {
		summary += fmt.Sprintf("; more unconfirmed mail follows (the oldest %d are shown: raise --limit)", rep.Limit)
	}
	_, err := fmt.Fprintln(g.stdout, summary)
	return err
}

func newUnconfirmedCmd(g *globals) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "unconfirmed",
		Short: "List mail whose confirmation window passed with recipients no report resolved",
		Long: `List the mail in PostgreSQL (--database-url) that a relay took but that is still
not confirmed when its confirmation window ends: recipients the relay accepted
and no delivery, bounce or complaint report has resolved since. Oldest window
first. Such mail may have been lost after the relay, or its reports may not
reach Postline (return path, provider webhooks): it is what to review.

Each mail shows its tenant and stream, when its window ended (confirm_by) and
how long ago, its state (unconfirmed once the workers' sweep marked it, due
while the sweep has not yet), the relays that took it, and its open recipients
(index in the job, address). A later report still settles the mail.

Prints "no unconfirmed mail" when there is none; the exit code is 0 either way.

--output json prints one object:
  {"at": time,                          the database's clock when read
   "limit", "more": bool,               more: mail beyond --limit exists
   "mail": [{"message_id", "tenant"?, "stream"?, "confirm_by": time,
             "overdue_seconds", "state": "unconfirmed" or "due",
             "providers": [name],
             "open": [{"index", "address", "attempt", "provider"?, "accepted_at"?}]}]}
Times are RFC 3339 in UTC; fields marked ? are left out when empty.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > maxUnconfirmedLimit {
				return usagef("--limit %d: want 1 to %d", limit, maxUnconfirmedLimit)
			}
			return unconfirmed(cmd.Context(), g, limit)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", defaultUnconfirmedLimit, "at most this many mails, the oldest")
	return cmd
}

func unconfirmed(ctx context.Context, g *globals, limit int) error {
	store, pool, err := openRecipientStore(ctx, g)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The store's query compares confirm_by with the database's clock: the
	// overdue times are measured on it too.
	var at time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&at); err != nil {
		return fmt.Errorf("read the database clock: %w", err)
	}
	rows, err := store.Unconfirmed(ctx, limit*maxRecipientsPerMail+1)
	if err != nil {
		return withMigrateHint(err)
	}
	rep := newUnconfirmedReport(rows, at, limit)
	return printReport(g, rep, func() error { return writeUnconfirmed(g, rep) })
}

// openRecipientStore connects to --database-url and returns a store that
// only reads recipient rows, and its pool, which the caller closes.
func openRecipientStore(ctx context.Context, g *globals) (*idempotency.Store, *pgxpool.Pool, error) {
	pool, err := connectPool(ctx, g)
	if err != nil {
		return nil, nil, err
	}
	// The owner names lease holders; postctl claims nothing.
	store, err := idempotency.New(idempotency.Config{Owner: "postctl"}, pool, nil, nil)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return store, pool, nil
}
