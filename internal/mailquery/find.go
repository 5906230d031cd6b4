package mailquery

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// sqlBuilder gathers a statement's conditions and their parameters.
type sqlBuilder struct {
	where []string
	args  []any
}

// arg adds a parameter and returns its placeholder.
func (b *sqlBuilder) arg(v any) string {
	b.args = append(b.args, v)
	return "$" + strconv.Itoa(len(b.args))
}

func (b *sqlBuilder) cond(c string) { b.where = append(b.where, c) }

// recipientMatchSQL is the condition on postline_recipients r that selects
// the addresses m matches, through postline_recipients_address_idx
// (migration 0019): the lowercased, reversed address equals the asked one's
// for an address, and starts with the reversed "@domain" for a domain. The
// range of a domain ends at its prefix with the final "@" (0x40) raised to
// "A" (0x41): ~<~ compares bytes, so the range holds exactly the strings
// with that prefix. An address's local part is then compared exactly: the
// lowercased addresses are equal, so the stored one's local part has as many
// characters as the asked one's.
func (b *sqlBuilder) recipientMatchSQL(m RecipientMatch) string {
	if m.Local == "" {
		domain := b.arg(m.Domain)
		return fmt.Sprintf(`reverse(lower(r.address)) ~>=~ reverse(lower('@' || %[1]s::text))
		AND reverse(lower(r.address)) ~<~ (reverse(lower(%[1]s::text)) || 'A')`, domain)
	}
	addr, local := b.arg(m.Address()), b.arg(m.Local)
	return fmt.Sprintf(`reverse(lower(r.address)) = reverse(lower(%s::text))
		AND left(r.address, char_length(%[2]s::text)) = %[2]s::text`, addr, local)
}

// mailColumns are the columns scanMails reads, of postline_messages m.
const mailColumns = `m.message_id, COALESCE(m.tenant, ''), m.status, COALESCE(m.stream, ''), COALESCE(m.priority, ''),
	COALESCE(m.provider, ''), COALESCE(m.error_class, ''), COALESCE(m.last_error, ''), COALESCE(m.confirmation, ''),
	m.confirm_by, m.attempt, m.created_at, m.updated_at, m.sent_at, m.replayed_at`

// findSQL is the statement of one page of f (checked by Validate): the
// mails it selects after c (nil: from the newest), newest first, one more
// than limit so that the caller knows whether a page follows.
//
// A listing walks postline_messages along postline_messages_created_idx,
// newest first, and checks the other conditions on each row, unless a
// Message-ID or a recipient lets the planner start from their indexes:
// the recipient conditions are semi-joins it may run either way, from the
// address index for a rare address or domain, along the time index for a
// domain with mail on every page.
func findSQL(f Filter, match *RecipientMatch, c *cursor, limit int) (string, []any) {
	var b sqlBuilder
	if f.MessageID != "" {
		b.cond("m.message_id = " + b.arg(f.MessageID))
	}
	if f.Tenant != "" {
		b.cond("m.tenant = " + b.arg(f.Tenant))
	}
	if f.State != "" {
		s := b.arg(f.State)
		inRecipients := "EXISTS (SELECT 1 FROM postline_recipients r WHERE r.message_id = m.message_id AND r.state = " + s + ")"
		switch {
		case isMailStatus(f.State) && isRecipientState(f.State):
			b.cond("(m.status = " + s + " OR " + inRecipients + ")")
		case isMailStatus(f.State):
			b.cond("m.status = " + s)
		default:
			b.cond(inRecipients)
		}
	}
	if f.Reason != "" {
		r := b.arg(f.Reason)
		b.cond(fmt.Sprintf(`(m.error_class = %[1]s OR EXISTS (SELECT 1 FROM postline_recipients r
		WHERE r.message_id = m.message_id AND (r.rule = %[1]s OR r.bounce_type = %[1]s)))`, r))
	}
	if match != nil {
		b.cond("EXISTS (SELECT 1 FROM postline_recipients r WHERE r.message_id = m.message_id\n\t\tAND " +
			b.recipientMatchSQL(*match) + ")")
	}
	if !f.Since.IsZero() {
		b.cond("m.created_at >= " + b.arg(f.Since))
	}
	if !f.Until.IsZero() {
		b.cond("m.created_at < " + b.arg(f.Until))
	}
	if c != nil {
		// Spelled out rather than as a row comparison: the time bound is
		// then a condition of the single-column time index.
		at, id := b.arg(c.createdAt), b.arg(c.messageID)
		b.cond(fmt.Sprintf("m.created_at <= %[1]s AND (m.created_at < %[1]s OR m.message_id < %[2]s)", at, id))
	}
	sql := "SELECT " + mailColumns + "\nFROM postline_messages m"
	if len(b.where) > 0 {
		sql += "\nWHERE " + strings.Join(b.where, "\n\tAND ")
	}
	sql += "\nORDER BY m.created_at DESC, m.message_id DESC\nLIMIT " + b.arg(limit+1)
	return sql, b.args
}

// Find returns one page of the mail f selects, newest first (by creation,
// then Message-ID), each with its recipients. Page.Next continues the
// listing; pages read at different times may show a mail's newer state,
// and mail created since the first page is not listed (the listing
// continues back in time), but no mail appears twice or is skipped.
//
// Find reads the rows, so mail whose row retention purged is not found;
// Life still shows its indexed events.
func (r *Reader) Find(ctx context.Context, f Filter) (Page, error) {
	if err := f.Validate(); err != nil {
		return Page{}, err
	}
	var after *cursor
	if f.Cursor != "" {
		c, _ := decodeCursor(f.Cursor) // checked by Validate
		if c.filter != f.fingerprint() {
			return Page{}, filterError("Cursor", "belongs to a listing with other filters: start again without it")
		}
		after = &c
	}
	var match *RecipientMatch
	if f.Recipient != "" {
		m, _ := ParseRecipient(f.Recipient) // checked by Validate
		match = &m
	}
	limit := f.limit()
	sql, args := findSQL(f, match, after, limit)

	var page Page
	err := pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		mails, err := scanMails(rows)
		if err != nil {
			return err
		}
		if len(mails) > limit {
			mails = mails[:limit]
			last := mails[limit-1]
			page.Next = cursor{createdAt: last.CreatedAt, messageID: last.MessageID, filter: f.fingerprint()}.encode()
		}
		if err := attachRecipients(ctx, tx, mails); err != nil {
			return err
		}
		page.Mails = mails
		return nil
	})
	if err != nil {
		return Page{}, fmt.Errorf("mailquery: find: %w", err)
	}
	return page, nil
}

func scanMails(rows pgx.Rows) ([]Mail, error) {
	var (
		out                       []Mail
		m                         Mail
		confirmBy, sent, replayed pgtype.Timestamptz
	)
	_, err := pgx.ForEachRow(rows, []any{&m.MessageID, &m.Tenant, &m.Status, &m.Stream, &m.Priority, &m.Provider,
		&m.ErrorClass, &m.LastError, &m.Confirmation, &confirmBy, &m.Attempt, &m.CreatedAt, &m.UpdatedAt, &sent,
		&replayed}, func() error {
		m.ConfirmBy, m.SentAt, m.ReplayedAt = timeOf(confirmBy), timeOf(sent), timeOf(replayed)
		m.CreatedAt, m.UpdatedAt = m.CreatedAt.UTC(), m.UpdatedAt.UTC()
		out = append(out, m)
		m = Mail{}
		return nil
	})
	return out, err
}

// recipientsSQL reads the recipient rows of some mails, by mail and index.
const recipientsSQL = `SELECT message_id, idx, address, state, attempt, COALESCE(provider, ''),
	COALESCE(bounce_type, ''), COALESCE(status, ''), COALESCE(code, 0), COALESCE(diagnostic, ''),
	COALESCE(rule, ''), COALESCE(source, ''), COALESCE(feedback_type, ''), accepted_at, resolved_at, updated_at
FROM postline_recipients WHERE message_id = ANY($1::text[]) ORDER BY message_id, idx`

// attachRecipients reads the recipients of mails into them.
func attachRecipients(ctx context.Context, q pgx.Tx, mails []Mail) error {
	if len(mails) == 0 {
		return nil
	}
	ids := make([]string, len(mails))
	at := make(map[string]int, len(mails))
	for i, m := range mails {
		ids[i] = m.MessageID
		at[m.MessageID] = i
	}
	rows, err := q.Query(ctx, recipientsSQL, ids)
	if err != nil {
		return err
	}
	var (
		id                 string
		rc                 Recipient
		idx                int16
		accepted, resolved pgtype.Timestamptz
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &idx, &rc.Address, &rc.State, &rc.Attempt, &rc.Provider, &rc.BounceType,
		&rc.Status, &rc.Code, &rc.Diagnostic, &rc.Rule, &rc.Source, &rc.FeedbackType, &accepted, &resolved,
		&rc.UpdatedAt}, func() error {
		rc.Index, rc.AcceptedAt, rc.ResolvedAt, rc.UpdatedAt = int(idx), timeOf(accepted), timeOf(resolved), rc.UpdatedAt.UTC()
		m := &mails[at[id]]
		m.Recipients = append(m.Recipients, rc)
		rc = Recipient{}
		return nil
	})
	return err
}
