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
		Short: "Show the delivery state of messages: status, attempts, provider, last error, lease",
		Long: `Show the row of each Message-ID in PostgreSQL (--database-url): its status
(pending, sending, retrying; or terminal: sent, failed, dead), attempt, provider,
last failure class and error, age since first publication, time in its status,
and, while sending, the worker holding its lease and how long the lease has left.
Message-IDs may be given with or without angle brackets.

An ID without a row is reported on stderr and makes postctl exit 1 (after the
rows found are printed); a usage error exits 2.

--output json prints one object:
  {"at": time,                          the database's clock when read
   "messages": [{"message_id", "status", "terminal": bool, "attempt", "version",
                 "provider"?, "error_class"?, "last_error"?, "priority"?, "tenant"?,
                 "conflicts", "age_seconds", "status_age_seconds",
                 "lease_owner"?, "lease_expires_at"?, "lease_remaining_seconds"?,
                 "first_seen"?, "enqueued_at"?, "created_at"?, "updated_at"?,
                 "sent_at"?, "replayed_at"?}],
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
	reader, done, err := openReader(ctx, g)
	if err != nil {
		return err
	}
	defer done()
	res, err := reader.Lookup(ctx, ids)
	if err != nil {
		return err
	}
	rep := statusReport{At: res.At.UTC(), Messages: []messageStatus{}, NotFound: res.Missing}
	if rep.NotFound == nil {
		rep.NotFound = []string{}
	}
	for _, row := range res.Rows {
		rep.Messages = append(rep.Messages, newMessageStatus(row, res.At))
	}
	if err := printReport(g, rep, func() error {
		if len(rep.Messages) == 0 {
			return nil
		}
		header, rows := statusTable(rep)
		return writeTable(g.stdout, header, rows)
	}); err != nil {
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
	pool, err := openPool(ctx, g)
	if err != nil {
		return nil, nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("--database-url: connect: %w", err)
	}
	reader, err := idempotency.NewReader(pool)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return reader, pool.Close, nil
}
