package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/idempotency"
)

// messageStatus is one message in the output of postctl status.
type messageStatus struct {
	MessageID  string `json:"message_id"`
	Status     string `json:"status"`
	Terminal   bool   `json:"terminal"`
	Attempt    int    `json:"attempt"`
	Version    int64  `json:"version"`
	Provider   string `json:"provider,omitempty"`
	ErrorClass string `json:"error_class,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	Priority   string `json:"priority,omitempty"`
	Tenant     string `json:"tenant,omitempty"`
	Conflicts  int    `json:"conflicts"`
	// AgeSeconds counts from FirstSeen (the row's creation when unknown);
	// StatusAgeSeconds from the last change of the row.
	AgeSeconds       float64 `json:"age_seconds"`
	StatusAgeSeconds float64 `json:"status_age_seconds"`
	// The lease fields are set while the message is sending;
	// LeaseRemainingSeconds is negative once the lease has expired.
	LeaseOwner            string     `json:"lease_owner,omitempty"`
	LeaseExpiresAt        *time.Time `json:"lease_expires_at,omitempty"`
	LeaseRemainingSeconds *float64   `json:"lease_remaining_seconds,omitempty"`
	FirstSeen             *time.Time `json:"first_seen,omitempty"`
	EnqueuedAt            *time.Time `json:"enqueued_at,omitempty"`
	CreatedAt             *time.Time `json:"created_at,omitempty"`
	UpdatedAt             *time.Time `json:"updated_at,omitempty"`
	SentAt                *time.Time `json:"sent_at,omitempty"`
	ReplayedAt            *time.Time `json:"replayed_at,omitempty"`

	// Stream is the job's stream, known once a worker recorded an attempt.
	Stream string `json:"stream,omitempty"`
	// Confirmation is confirmed, cancelled, unconfirmed, or awaiting
	// (ConfirmBy has not passed, or passed and the sweep has not marked the
	// mail yet); empty while no relay has taken the mail, or when the
	// worker sets no confirmation window.
	Confirmation string     `json:"confirmation,omitempty"`
	ConfirmBy    *time.Time `json:"confirm_by,omitempty"`
	// Recipients are the mail's recipient rows, by index; empty before a
	// worker recorded an attempt.
	Recipients []recipientStatus `json:"recipients"`
}

// recipientStatus is one recipient of a message in the output of postctl
// status.
type recipientStatus struct {
	Index        int        `json:"index"`
	Address      string     `json:"address"`
	State        string     `json:"state"`
	Attempt      int        `json:"attempt"`
	Provider     string     `json:"provider,omitempty"`
	BounceType   string     `json:"bounce_type,omitempty"`
	Status       string     `json:"status,omitempty"`
	Code         int        `json:"code,omitempty"`
	Diagnostic   string     `json:"diagnostic,omitempty"`
	Rule         string     `json:"rule,omitempty"`
	Source       string     `json:"source,omitempty"`
	FeedbackType string     `json:"feedback_type,omitempty"`
	AcceptedAt   *time.Time `json:"accepted_at,omitempty"`
	ResolvedAt   *time.Time `json:"resolved_at,omitempty"`
	UpdatedAt    time.Time  `json:"updated_at"`
}

func newRecipientStatus(r idempotency.Recipient) recipientStatus {
	return recipientStatus{Index: r.Index, Address: r.Address, State: string(r.State), Attempt: r.Attempt,
		Provider: r.Provider, BounceType: r.BounceType, Status: r.Status, Code: r.Code, Diagnostic: r.Diagnostic,
		Rule: r.Rule, Source: r.Source, FeedbackType: r.FeedbackType, AcceptedAt: timePtr(r.AcceptedAt),
		ResolvedAt: timePtr(r.ResolvedAt), UpdatedAt: r.UpdatedAt.UTC()}
}

// withRecipients adds a message's recipient rows, and the confirmation
// and stream of its row they carry, to s.
func (s messageStatus) withRecipients(rs []idempotency.Recipient) messageStatus {
	s.Recipients = make([]recipientStatus, len(rs))
	for i, r := range rs {
		s.Recipients[i] = newRecipientStatus(r)
	}
	if len(rs) == 0 {
		return s
	}
	s.Stream, s.ConfirmBy, s.Confirmation = rs[0].Stream, timePtr(rs[0].ConfirmBy), rs[0].Confirmation
	if s.Confirmation == "" && s.ConfirmBy != nil {
		s.Confirmation = "awaiting"
	}
	return s
}

// confirmationText describes a message's confirmation for people, as read
// at the database time at.
func confirmationText(m messageStatus, at time.Time) string {
	by := "-"
	if m.ConfirmBy != nil {
		by = formatTime(*m.ConfirmBy)
	}
	switch m.Confirmation {
	case "":
		for _, r := range m.Recipients {
			switch r.State {
			case "accepted", "delivered", "bounced", "complained":
				// A relay took it, but no window was set: the worker
				// sends without a bounce domain (or POSTLINE_CONFIRM=off),
				// so no report is awaited.
				return "not tracked (no confirmation window: no bounce domain, or POSTLINE_CONFIRM=off)"
			}
		}
		return "none (no relay has taken the mail)"
	case "awaiting":
		if m.ConfirmBy != nil && !at.Before(*m.ConfirmBy) {
			return fmt.Sprintf("awaiting until %s (passed %s ago, not yet marked unconfirmed)", by, formatAge(at.Sub(*m.ConfirmBy)))
		}
		return "awaiting until " + by
	case "unconfirmed":
		return fmt.Sprintf("unconfirmed (window ended %s with recipients unresolved)", by)
	case "confirmed":
		return "confirmed (every recipient resolved, one or more delivered)"
	case "cancelled":
		return "cancelled (every recipient resolved, none delivered)"
	}
	return m.Confirmation
}

// recipientsTable is the text table of a message's recipients.
func recipientsTable(rs []recipientStatus) (header []string, rows [][]string) {
	header = []string{"IDX", "ADDRESS", "STATE", "BOUNCE", "STATUS", "SOURCE", "UPDATED"}
	for _, r := range rs {
		status := r.Status
		if r.Code != 0 {
			status = strings.TrimSpace(strconv.Itoa(r.Code) + " " + r.Status)
		}
		rows = append(rows, []string{strconv.Itoa(r.Index), oneLine(r.Address, 80), r.State, oneLine(r.BounceType, 10),
			oneLine(status, 20), oneLine(r.Source, 20), formatTime(r.UpdatedAt)})
	}
	return header, rows
}

// writeStatus writes the text output of postctl status: the messages'
// table, then each message's confirmation and recipients.
func writeStatus(g *globals, rep statusReport) error {
	if len(rep.Messages) == 0 {
		return nil
	}
	header, rows := statusTable(rep)
	if err := writeTable(g.stdout, header, rows); err != nil {
		return err
	}
	for _, m := range rep.Messages {
		if len(m.Recipients) == 0 {
			continue
		}
		if _, err := fmt.Fprintf(g.stdout, "\n%s: confirmation %s\n", oneLine(m.MessageID, 80), confirmationText(m, rep.At)); err != nil {
			return err
		}
		header, rows := recipientsTable(m.Recipients)
		if err := writeTable(g.stdout, header, rows); err != nil {
			return err
		}
	}
	return nil
}

// statusReport is the output of postctl status.
type statusReport struct {
	At       time.Time       `json:"at"`
	Messages []messageStatus `json:"messages"`
	NotFound []string        `json:"not_found"`
}

// newMessageStatus describes row as read at the database time at.
func newMessageStatus(row idempotency.Row, at time.Time) messageStatus {
	s := messageStatus{
		MessageID: row.MessageID, Status: string(row.Status), Terminal: row.Status.Terminal(),
		Attempt: row.Attempt, Version: row.Version, Provider: row.Provider, ErrorClass: row.ErrorClass,
		LastError: row.LastError, Priority: row.Priority, Tenant: row.Tenant, Conflicts: row.Conflicts,
		AgeSeconds:       seconds(at.Sub(firstSeen(row))),
		StatusAgeSeconds: seconds(at.Sub(row.UpdatedAt)),
		FirstSeen:        timePtr(row.FirstSeen), EnqueuedAt: timePtr(row.EnqueuedAt),
		CreatedAt: timePtr(row.CreatedAt), UpdatedAt: timePtr(row.UpdatedAt),
		SentAt: timePtr(row.SentAt), ReplayedAt: timePtr(row.ReplayedAt),
	}
	if row.Status == idempotency.StatusSending && !row.LeaseExpiresAt.IsZero() {
		remaining := seconds(row.LeaseExpiresAt.Sub(at))
		s.LeaseOwner, s.LeaseExpiresAt, s.LeaseRemainingSeconds = row.LeaseOwner, timePtr(row.LeaseExpiresAt), &remaining
	}
	return s
}

// firstSeen is when the row's age counts from.
func firstSeen(row idempotency.Row) time.Time {
	if !row.FirstSeen.IsZero() {
		return row.FirstSeen
	}
	return row.CreatedAt
}

// statusTable is the text output of postctl status.
func statusTable(r statusReport) (header []string, rows [][]string) {
	header = []string{"MESSAGE_ID", "STATUS", "ATTEMPT", "PROVIDER", "CLASS", "AGE", "IN_STATUS", "LEASE", "LAST_ERROR"}
	for _, m := range r.Messages {
		lease := "-"
		if m.LeaseRemainingSeconds != nil {
			left := time.Duration(*m.LeaseRemainingSeconds * float64(time.Second))
			if left >= 0 {
				lease = fmt.Sprintf("%s, %s left", m.LeaseOwner, formatAge(left))
			} else {
				lease = fmt.Sprintf("%s, EXPIRED %s ago", m.LeaseOwner, formatAge(-left))
			}
		}
		rows = append(rows, []string{oneLine(m.MessageID, 80), m.Status, strconv.Itoa(m.Attempt), oneLine(m.Provider, 30),
			oneLine(m.ErrorClass, 20), formatAge(time.Duration(m.AgeSeconds * float64(time.Second))),
			formatAge(time.Duration(m.StatusAgeSeconds * float64(time.Second))), oneLine(lease, 60), oneLine(m.LastError, 60)})
	}
	return header, rows
}

func newStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status <message-id>...",
		Short: "Show the delivery state of messages: status, attempts, provider, last error, lease, confirmation, recipients",
		Long: `Show the row of each Message-ID in PostgreSQL (--database-url): its status
(pending, sending, retrying; or terminal: sent, failed, dead, suppressed),
attempt, provider, last failure class and error, age since first publication,
time in its status, and, while sending, the worker holding its lease and how
long the lease has left. Message-IDs may be given with or without angle brackets.

Below the table, each message a worker recorded an attempt of shows its
confirmation (awaiting until its confirm_by; confirmed once every recipient is
resolved and one was delivered; cancelled once every recipient is resolved and
none was; unconfirmed when the window ended first) and its recipients: index
in the job, address, state (pending, accepted, delivered, bounced, complained,
suppressed, failed, dead), bounce type, reply status, source of the decision
and when the row last changed.

An ID without a row is reported on stderr and makes postctl exit 1 (after the
rows found are printed); a usage error exits 2.

--output json prints one object:
  {"at": time,                          the database's clock when read
   "messages": [{"message_id", "status", "terminal": bool, "attempt", "version",
                 "provider"?, "error_class"?, "last_error"?, "priority"?, "tenant"?,
                 "conflicts", "age_seconds", "status_age_seconds",
                 "lease_owner"?, "lease_expires_at"?, "lease_remaining_seconds"?,
                 "first_seen"?, "enqueued_at"?, "created_at"?, "updated_at"?,
                 "sent_at"?, "replayed_at"?, "stream"?,
                 "confirmation"?: "awaiting", "confirmed", "cancelled" or "unconfirmed",
                 "confirm_by"?,
                 "recipients": [{"index", "address", "state", "attempt", "provider"?,
                                 "bounce_type"?, "status"?, "code"?, "diagnostic"?,
                                 "rule"?, "source"?, "feedback_type"?,
                                 "accepted_at"?, "resolved_at"?, "updated_at"}]}],
   "not_found": [message_id]}
Times are RFC 3339 in UTC; fields marked ? are left out when empty.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("status: give at least one Message-ID")
			}
			for _, a := range args {
				if bareMessageID(a) == "" {
					return usagef("status: empty Message-ID %q", a)
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return status(cmd.Context(), g, args)
		},
	}
}

func status(ctx context.Context, g *globals, args []string) error {
	ids := make([]string, len(args))
	for i, a := range args {
		ids[i] = bareMessageID(a)
	}
	store, pool, err := openRecipientStore(ctx, g)
	if err != nil {
		return err
	}
	defer pool.Close()
	reader, err := idempotency.NewReader(pool)
	if err != nil {
		return err
	}
	res, err := reader.Lookup(ctx, ids)
	if err != nil {
		return err
	}
	found := make([]string, len(res.Rows))
	for i, row := range res.Rows {
		found[i] = row.MessageID
	}
	recipients, err := store.Recipients(ctx, found)
	if err != nil {
		return withMigrateHint(err)
	}
	rep := statusReport{At: res.At.UTC(), Messages: []messageStatus{}, NotFound: res.Missing}
	if rep.NotFound == nil {
		rep.NotFound = []string{}
	}
	for _, row := range res.Rows {
		rep.Messages = append(rep.Messages, newMessageStatus(row, res.At).withRecipients(recipients[row.MessageID]))
	}
	if err := printReport(g, rep, func() error { return writeStatus(g, rep) }); err != nil {
		return err
	}
	if len(rep.NotFound) > 0 {
		return fmt.Errorf("status: no row for %s %s in %s", plural(len(rep.NotFound), "Message-ID", "Message-IDs"),
			strings.Join(rep.NotFound, ", "), "postline_messages (never consumed by a worker, or another database: check --database-url)")
	}
	return nil
}

// printReport writes v as one JSON object with --output json, or calls
// text otherwise.
func printReport(g *globals, v any, text func() error) error {
	if g.output == "json" {
		return g.print(v, "")
	}
	return text()
}

// openReader connects to --database-url and returns a row reader and a func
// that closes the connections.
func openReader(ctx context.Context, g *globals) (*idempotency.Reader, func(), error) {
	return openOnPool(ctx, g, idempotency.NewReader)
}
