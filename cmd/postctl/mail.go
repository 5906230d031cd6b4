package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/timearg"
)

// mailFlags are the flags of postctl mail find, by mailquery.Filter field.
var mailFlags = map[string]string{
	"MessageID": "--message-id", "Recipient": "--recipient", "Tenant": "--tenant", "State": "--state",
	"Reason": "--reason", "Since": "--since", "Until": "--until", "Cursor": "--cursor", "Limit": "--limit",
}

func newMailCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mail",
		Short: "Find mail by recipient, tenant, state, reason or time, and show a mail's whole life",
	}
	cmd.AddCommand(newMailFindCmd(g), newMailShowCmd(g))
	return cmd
}

// mailFindFlags are the raw flags of postctl mail find.
type mailFindFlags struct {
	messageID, recipient, tenant, state, reason, since, until, cursor string
	limit                                                             int
}

// filter is the mailquery filter of the flags, checked, with times read
// relative to now.
func (f mailFindFlags) filter(now time.Time) (mailquery.Filter, error) {
	out := mailquery.Filter{MessageID: bareMessageID(f.messageID), Recipient: f.recipient, Tenant: f.tenant,
		State: f.state, Reason: f.reason, Cursor: strings.TrimSpace(f.cursor), Limit: f.limit}
	var err error
	if out.Since, err = timearg.Parse(f.since, now); err != nil {
		return out, fmt.Errorf("--since %q: %w", f.since, err)
	}
	if out.Until, err = timearg.Parse(f.until, now); err != nil {
		return out, fmt.Errorf("--until %q: %w", f.until, err)
	}
	return out, flagError(out.Validate())
}

// flagError names the flag of a mailquery filter error.
func flagError(err error) error {
	var fe *mailquery.FilterError
	if errors.As(err, &fe) {
		if flag, ok := mailFlags[fe.Field]; ok {
			return errors.New(flag + ": " + fe.Problem)
		}
	}
	return err
}

func newMailFindCmd(g *globals) *cobra.Command {
	var f mailFindFlags
	cmd := &cobra.Command{
		Use:   "find",
		Short: "List mail, newest first, by recipient, tenant, state, reason and creation time",
		Long: `List the mail in PostgreSQL (--database-url) that every given flag selects,
newest first (by creation), a page at a time, each with its recipients and
their states. Mail whose row retention purged is not listed (mail show still
shows its indexed events).

--recipient is an address, matched exactly in its local part and in any case
in its domain (Ada@Example.com finds Ada@example.com, not ada@example.com),
or @domain for every address of a domain. --state is a mail status (pending,
sending, retrying, sent, failed, dead, suppressed) or a recipient state
(accepted, delivered, bounced, complained): a mail matches when it or one of
its recipients is in it. --reason matches the mail's failure class or a
recipient's bounce type or rule. --since and --until bound the creation time
(since <= t < until): RFC 3339, or a duration ago (90m, 2h, 7d).

When more mail follows, the last line gives the --cursor of the next page
(the same flags, and that cursor). Prints "no mail found" when none is; the
exit code is 0 either way.

--output json prints one object:
  {"mails": [{"message_id", "tenant"?, "status", "stream"?, "priority"?,
              "provider"?, "error_class"?, "last_error"?, "confirmation"?,
              "attempt", "created_at", "updated_at", "sent_at"?,
              "confirm_by"?, "replayed_at"?,
              "recipients": [{"index", "address", "state", "attempt",
                              "provider"?, "bounce_type"?, "status"?, "code"?,
                              "diagnostic"?, "rule"?, "source"?,
                              "feedback_type"?, "accepted_at"?,
                              "resolved_at"?, "updated_at"}]}],
   "next"?: cursor}
Times are RFC 3339 in UTC; fields marked ? are left out when empty.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, err := f.filter(time.Now())
			if err != nil {
				return usageError{err}
			}
			return mailFind(cmd.Context(), g, filter)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.recipient, "recipient", "", "an address (exact local part, any-case domain) or @domain")
	fl.StringVar(&f.messageID, "message-id", "", "one Message-ID")
	fl.StringVar(&f.tenant, "tenant", "", "one tenant's mail")
	fl.StringVar(&f.state, "state", "", "a mail status or a recipient state ("+strings.Join(mailquery.States, ", ")+")")
	fl.StringVar(&f.reason, "reason", "", "a failure class, bounce type or bounce rule")
	fl.StringVar(&f.since, "since", "", "created at or after (RFC 3339, or a duration ago: 2h, 7d)")
	fl.StringVar(&f.until, "until", "", "created before (RFC 3339, or a duration ago)")
	fl.StringVar(&f.cursor, "cursor", "", "continue from the page that printed it")
	fl.IntVar(&f.limit, "limit", mailquery.DefaultLimit, fmt.Sprintf("mails per page, 1 to %d", mailquery.MaxLimit))
	return cmd
}

func mailFind(ctx context.Context, g *globals, f mailquery.Filter) error {
	reader, closePool, err := openOnPool(ctx, g, mailquery.New)
	if err != nil {
		return err
	}
	defer closePool()
	page, err := reader.Find(ctx, f)
	if err != nil {
		if errors.Is(err, mailquery.ErrInvalidFilter) {
			return usageError{flagError(err)} // a cursor of another listing
		}
		return withMigrateHint(err)
	}
	if page.Mails == nil {
		page.Mails = []mailquery.Mail{}
	}
	return printReport(g, page, func() error { return writeMailPage(g, page) })
}

// mailTable is the text table of a page of postctl mail find.
func mailTable(mails []mailquery.Mail) (header []string, rows [][]string) {
	header = []string{"CREATED", "MESSAGE_ID", "TENANT", "STATUS", "PROVIDER", "CLASS", "RECIPIENTS"}
	for _, m := range mails {
		rcpts := make([]string, len(m.Recipients))
		for i, r := range m.Recipients {
			rcpts[i] = r.Address + " " + r.State
		}
		rows = append(rows, []string{formatTime(m.CreatedAt), oneLine(m.MessageID, 80), oneLine(m.Tenant, 30),
			m.Status, oneLine(m.Provider, 20), oneLine(m.ErrorClass, 20), oneLine(strings.Join(rcpts, ", "), 100)})
	}
	return header, rows
}

func writeMailPage(g *globals, page mailquery.Page) error {
	if len(page.Mails) == 0 {
		_, err := fmt.Fprintln(g.stdout, "no mail found")
		return err
	}
	header, rows := mailTable(page.Mails)
	if err := writeTable(g.stdout, header, rows); err != nil {
		return err
	}
	summary := fmt.Sprintf("%d %s", len(page.Mails), plural(len(page.Mails), "mail", "mails"))
	if page.Next != "" {
		summary += "; more follows: the same flags and --cursor " + page.Next
	}
	_, err := fmt.Fprintln(g.stdout, summary)
	return err
}

func newMailShowCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show <message-id>",
		Short: "Show a mail's whole life: its row, recipients, transitions, template, DKIM domain and webhook deliveries",
		Long: `Show everything Postline knows of one mail (its Message-ID, angle brackets
optional), from PostgreSQL (--database-url): its row and recipients, then its
life in time order: its claim, a replay of it, and each recipient's
transitions (deferred with the relay, class and next attempt; accepted;
delivered; bounced with the report's code, enhanced status and diagnostic;
complained; unsubscribed; suppressed; unconfirmed; failed; dead), as the
events indexer of the console copied them from the events topic. Then the
template version that rendered it, the DKIM domain that signed it, and the
webhook deliveries of its events that are still pending or were given up on
(a delivered event leaves no record: it is not listed).

A mail whose row retention purged shows its indexed events only. A
Message-ID with neither fails with exit code 1.

--output json prints one object:
  {"mail": {... as in postctl mail find, "purged"?},
   "entries": [{"at", "type", "event_id"?, "recipient_index" (-1: the whole
                mail), "recipient"?, "attempt", "provider"?, "class"?,
                "reason"?, "next_attempt_at"?, "code"?, "status"?,
                "diagnostic"?, "bounce_type"?, "rule"?, "source"?,
                "feedback_type"?, "dkim_domain"?, "note"?, "actor"?}],
   "template"?: {"name", "version", "why"?}, "dkim_domain"?,
   "webhooks": [{"endpoint", "event_id", "event_type", "state": "pending"
                 or "dead", "attempts", "last_status"?, "last_error"?,
                 "next_at"?, "dead_at"?, "dead_reason"?,
                 "endpoint_disabled_at"?}]}
Times are RFC 3339 in UTC; fields marked ? are left out when empty.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := bareMessageID(args[0])
			if id == "" {
				return usagef("the Message-ID is empty")
			}
			return mailShow(cmd.Context(), g, id)
		},
	}
}

func mailShow(ctx context.Context, g *globals, id string) error {
	reader, closePool, err := openOnPool(ctx, g, mailquery.New)
	if err != nil {
		return err
	}
	defer closePool()
	life, err := reader.Life(ctx, id)
	if errors.Is(err, mailquery.ErrNotFound) {
		return fmt.Errorf("mail show: no row and no indexed event for %s (never consumed by a worker, purged "+
			"past the events' retention, or another database: check --database-url)", id)
	}
	if err != nil {
		return withMigrateHint(err)
	}
	if life.Entries == nil {
		life.Entries = []mailquery.Entry{}
	}
	if life.Webhooks == nil {
		life.Webhooks = []mailquery.WebhookDelivery{}
	}
	if life.Mail.Recipients == nil {
		life.Mail.Recipients = []mailquery.Recipient{}
	}
	return printReport(g, life, func() error { return writeLife(g, life) })
}

// entryTimeLayout shows an entry's time to the millisecond, in a column
// of one width: a mail's transitions are often within a second.
const entryTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// lifeTable is the time-ordered table of a mail's life.
func lifeTable(entries []mailquery.Entry) (header []string, rows [][]string) {
	header = []string{"AT", "RCPT", "EVENT", "ATTEMPT", "RELAY", "DETAIL"}
	for _, e := range entries {
		rcpt := "-"
		if e.RecipientIndex >= 0 {
			rcpt = strconv.Itoa(e.RecipientIndex) + " " + e.Recipient
		}
		attempt := "-"
		if e.Attempt > 0 {
			attempt = strconv.Itoa(e.Attempt)
		}
		rows = append(rows, []string{e.At.UTC().Format(entryTimeLayout), oneLine(rcpt, 60), e.Type, attempt,
			oneLine(e.Provider, 20), oneLine(entryDetail(e), 120)})
	}
	return header, rows
}

// entryDetail is what an entry says beyond its type, for people.
func entryDetail(e mailquery.Entry) string {
	var parts []string
	add := func(label, v string) {
		if v != "" {
			parts = append(parts, label+v)
		}
	}
	add("class ", e.Class)
	add("reason ", e.Reason)
	if !e.NextAttemptAt.IsZero() {
		add("next attempt ", formatTime(e.NextAttemptAt))
	}
	add("", e.BounceType)
	reply := strings.TrimSpace(strings.Join([]string{codeText(e.Code), e.Status}, " "))
	add("", reply)
	add("", e.Diagnostic)
	add("rule ", e.Rule)
	add("from ", e.Source)
	add("feedback ", e.FeedbackType)
	add("signed by ", e.DKIMDomain)
	add("", e.Note)
	add("by ", e.Actor)
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

func codeText(code int) string {
	if code == 0 {
		return ""
	}
	return strconv.Itoa(code)
}

func writeLife(g *globals, life mailquery.Life) error {
	m := life.Mail
	w := g.stdout
	if m.Purged {
		fmt.Fprintf(w, "%s: its row was purged (retention); what follows are its indexed events\n", m.MessageID)
	} else {
		header := []string{"MESSAGE_ID", "TENANT", "STATUS", "STREAM", "ATTEMPT", "PROVIDER", "CLASS", "CREATED", "SENT", "CONFIRMATION"}
		row := []string{oneLine(m.MessageID, 80), oneLine(m.Tenant, 30), m.Status, oneLine(m.Stream, 13),
			strconv.Itoa(m.Attempt), oneLine(m.Provider, 20), oneLine(m.ErrorClass, 20), formatTime(m.CreatedAt),
			formatTime(m.SentAt), oneLine(m.Confirmation, 12)}
		if err := writeTable(w, header, [][]string{row}); err != nil {
			return err
		}
		if m.LastError != "" {
			fmt.Fprintln(w, "last error:", oneLine(m.LastError, 200))
		}
	}
	if t := life.Template; t != nil {
		why := ""
		if t.Why != "" {
			why = " (" + oneLine(t.Why, 80) + ")"
		}
		fmt.Fprintf(w, "template: %s v%d%s\n", oneLine(t.Name, 64), t.Version, why)
	}
	if life.DKIMDomain != "" {
		fmt.Fprintln(w, "DKIM: signed by", oneLine(life.DKIMDomain, 80))
	}
	if len(m.Recipients) > 0 {
		fmt.Fprintln(w)
		rs := make([]recipientStatus, len(m.Recipients))
		for i, r := range m.Recipients {
			rs[i] = recipientStatus{Index: r.Index, Address: r.Address, State: r.State, Status: r.Status,
				Code: r.Code, BounceType: r.BounceType, Source: r.Source, UpdatedAt: r.UpdatedAt}
		}
		header, rows := recipientsTable(rs)
		if err := writeTable(w, header, rows); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	header, rows := lifeTable(life.Entries)
	if err := writeTable(w, header, rows); err != nil {
		return err
	}
	if len(life.Webhooks) == 0 {
		_, err := fmt.Fprintln(w, "\nwebhooks: nothing pending or dead (a delivered event leaves no record)")
		return err
	}
	fmt.Fprintln(w)
	header = []string{"ENDPOINT", "EVENT", "TYPE", "STATE", "ATTEMPTS", "LAST_STATUS", "NEXT/DEAD", "LAST_ERROR"}
	rows = nil
	for _, d := range life.Webhooks {
		when := formatTime(d.NextAt)
		if d.State == "dead" {
			when = formatTime(d.DeadAt) + " " + d.DeadReason
		}
		state := d.State
		if !d.EndpointDisabledAt.IsZero() {
			state += " (endpoint disabled)"
		}
		rows = append(rows, []string{oneLine(d.Endpoint, 40), d.EventID, d.EventType, state, strconv.Itoa(d.Attempts),
			codeText(d.LastStatus), oneLine(when, 60), oneLine(d.LastError, 80)})
	}
	return writeTable(w, header, rows)
}
