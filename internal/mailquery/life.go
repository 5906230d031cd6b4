package mailquery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/postline/postline/event"
)

// Entry types that are not event types.
const (
	EntryClaimed  = "claimed"
	EntryRedriven = "redriven"
)

const lifeRowSQL = `SELECT ` + mailColumns + `, COALESCE(m.template, ''), COALESCE(m.template_version, 0),
	COALESCE(m.template_why, '')
FROM postline_messages m WHERE m.message_id = $1`

// lifeEventsSQL reads a mail's indexed events through
// postline_mail_events_message_idx, oldest first.
const lifeEventsSQL = `SELECT doc FROM postline_mail_events WHERE message_id = $1
ORDER BY at, recipient_index, event_id`

// lifeWebhooksSQL reads the queue rows of a mail's indexed events, through
// postline_webhook_queue_event_idx.
const lifeWebhooksSQL = `SELECT q.endpoint, q.event_id, q.event_type, q.status, q.attempts, q.last_status,
	q.last_error, q.next_at, q.dead_at, COALESCE(q.dead_reason, ''), e.disabled_at
FROM postline_webhook_queue q LEFT JOIN postline_webhook_endpoints e ON e.endpoint = q.endpoint
WHERE q.event_id IN (SELECT event_id FROM postline_mail_events WHERE message_id = $1)
ORDER BY q.endpoint, q.event_at, q.event_id`

// Life returns everything known of the mail messageID (its bare
// Message-ID): its row and recipients, its claim, its indexed events
// (what the Indexer has read of mail.events, within its retention) and
// the webhook deliveries of those events, in one consistent snapshot. A
// mail whose row was purged but whose events remain has Mail.Purged set.
// An ID with neither yields an error wrapping ErrNotFound.
func (r *Reader) Life(ctx context.Context, messageID string) (Life, error) {
	var (
		life   Life
		found  bool
		events []event.Event
	)
	err := pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var (
			tmpl                      TemplateUse
			confirmBy, sent, replayed pgtype.Timestamptz
			m                         = &life.Mail
		)
		err := tx.QueryRow(ctx, lifeRowSQL, messageID).Scan(&m.MessageID, &m.Tenant, &m.Status, &m.Stream,
			&m.Priority, &m.Provider, &m.ErrorClass, &m.LastError, &m.Confirmation, &confirmBy, &m.Attempt,
			&m.CreatedAt, &m.UpdatedAt, &sent, &replayed, &tmpl.Name, &tmpl.Version, &tmpl.Why)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			found = true
			m.ConfirmBy, m.SentAt, m.ReplayedAt = timeOf(confirmBy), timeOf(sent), timeOf(replayed)
			m.CreatedAt, m.UpdatedAt = m.CreatedAt.UTC(), m.UpdatedAt.UTC()
			if tmpl.Name != "" {
				life.Template = &tmpl
			}
			mails := []Mail{*m}
			if err := attachRecipients(ctx, tx, mails); err != nil {
				return err
			}
			*m = mails[0]
		}
		if events, err = readEvents(ctx, tx, messageID); err != nil {
			return err
		}
		life.Webhooks, err = readWebhooks(ctx, tx, messageID)
		return err
	})
	if err != nil {
		return Life{}, fmt.Errorf("mailquery: life of %s: %w", messageID, err)
	}
	if !found && len(events) == 0 {
		return Life{}, fmt.Errorf("mailquery: life of %s: %w", messageID, ErrNotFound)
	}
	if !found {
		first := events[0]
		life.Mail = Mail{MessageID: first.MessageID, Tenant: first.Tenant, Stream: first.Stream, Purged: true}
	}
	life.Entries = entries(life.Mail, events)
	for _, e := range events {
		if life.Template == nil && e.Template != nil {
			life.Template = &TemplateUse{Name: e.Template.Name, Version: e.Template.Version, Why: e.Template.Why}
		}
		if e.Type == event.Accepted && e.DKIMDomain != "" {
			life.DKIMDomain = e.DKIMDomain
		}
	}
	return life, nil
}

// readEvents reads the indexed events of messageID, oldest first.
func readEvents(ctx context.Context, tx pgx.Tx, messageID string) ([]event.Event, error) {
	rows, err := tx.Query(ctx, lifeEventsSQL, messageID)
	if err != nil {
		return nil, err
	}
	var (
		out []event.Event
		doc []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&doc}, func() error {
		var e event.Event
		if err := json.Unmarshal(doc, &e); err != nil {
			return fmt.Errorf("indexed event: %w", err)
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

func readWebhooks(ctx context.Context, tx pgx.Tx, messageID string) ([]WebhookDelivery, error) {
	rows, err := tx.Query(ctx, lifeWebhooksSQL, messageID)
	if err != nil {
		return nil, err
	}
	var (
		out            []WebhookDelivery
		w              WebhookDelivery
		dead, disabled pgtype.Timestamptz
	)
	_, err = pgx.ForEachRow(rows, []any{&w.Endpoint, &w.EventID, &w.EventType, &w.State, &w.Attempts,
		&w.LastStatus, &w.LastError, &w.NextAt, &dead, &w.DeadReason, &disabled}, func() error {
		w.NextAt, w.DeadAt, w.EndpointDisabledAt = w.NextAt.UTC(), timeOf(dead), timeOf(disabled)
		if w.State == "dead" {
			w.NextAt = time.Time{} // a dead letter is not due
		}
		out = append(out, w)
		w = WebhookDelivery{}
		return nil
	})
	return out, err
}

// reopenSlack is how far apart a row's re-open (replayed_at, the
// database's clock) and a redriven event (the re-driving process's clock)
// may be and still be the one re-drive.
const reopenSlack = time.Minute

// entries are the transitions of m, oldest first: its claim (at the row's
// creation), its last re-open, and its events. Entries at the same instant
// keep that order, events among themselves their indexed order.
//
// The row keeps only its last re-open (replayed_at). postctl dlq redrive
// also publishes a redriven event per recipient, which says more (the
// operator's note, who); the row's re-open is shown only when no such
// event is near it: a postctl dlq replay, which publishes none.
func entries(m Mail, events []event.Event) []Entry {
	out := make([]Entry, 0, len(events)+2)
	if !m.Purged {
		out = append(out, Entry{At: m.CreatedAt, Type: EntryClaimed, RecipientIndex: -1})
	}
	if !m.ReplayedAt.IsZero() && !slices.ContainsFunc(events, func(e event.Event) bool {
		return e.Type == event.Redriven && e.At.Sub(m.ReplayedAt).Abs() <= reopenSlack
	}) {
		out = append(out, Entry{At: m.ReplayedAt, Type: EntryRedriven, RecipientIndex: -1,
			Note: "the row was re-opened for another life (postctl dlq replay); its last re-open"})
	}
	for _, e := range events {
		out = append(out, entryOf(e))
	}
	slices.SortStableFunc(out, func(a, b Entry) int { return a.At.Compare(b.At) })
	return out
}

// entryOf is the entry of one event.
func entryOf(e event.Event) Entry {
	en := Entry{At: e.At.UTC(), Type: string(e.Type), EventID: e.ID, RecipientIndex: e.RecipientIndex,
		Recipient: e.Recipient, Attempt: e.Attempt, Provider: e.Provider, Class: e.Class, Reason: e.Reason,
		FeedbackType: e.FeedbackType, DKIMDomain: e.DKIMDomain, Note: e.Note, Actor: e.Actor}
	if e.NextAttemptAt != nil {
		en.NextAttemptAt = e.NextAttemptAt.UTC()
	}
	switch {
	case e.Bounce != nil:
		b := e.Bounce
		en.Code, en.Status, en.Diagnostic = b.Code, b.Status, b.Diagnostic
		en.BounceType, en.Rule, en.Source = b.Type, b.Rule, b.Source
	case e.Reply != nil:
		// A deferred, failed or dead attempt's reply: what the relay said.
		en.Code, en.Status, en.Diagnostic = e.Reply.Code, e.Reply.Status, e.Reply.Text
	}
	return en
}
