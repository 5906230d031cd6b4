package mailquery

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

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
// the rows of the addresses m matches, through the indexes of migration
// 0021: an address is an equality on the lowercased address, a domain an
// equality on the lowercased text after the address's last "@". An
// address's local part, matched exactly, is compared on the rows read
// (localPartMatches): as a condition here, the planner would count it as
// selective and, for an address in thousands of mails, sort them all
// rather than walk the index.
func (b *sqlBuilder) recipientMatchSQL(m RecipientMatch) string {
	if m.Local == "" {
		return "lower(split_part(r.address, '@', -1)) = " + b.arg(m.Domain) + "::text"
	}
	return "lower(r.address) = lower(" + b.arg(m.Address()) + "::text)"
}

// localPartMatches says whether a stored address that recipientMatchSQL
// selected for m has m's local part, in its case: the lowercased
// addresses are equal, so what precedes their last "@" is the local part.
func localPartMatches(m RecipientMatch, address string) bool {
	if m.Local == "" {
		return true
	}
	at := strings.LastIndexByte(address, '@')
	return at >= 0 && address[:at] == m.Local
}

// mailColumns are the columns scanMails reads, of postline_messages m.
const mailColumns = `m.message_id, COALESCE(m.tenant, ''), m.status, COALESCE(m.stream, ''), COALESCE(m.priority, ''),
	COALESCE(m.provider, ''), COALESCE(m.error_class, ''), COALESCE(m.last_error, ''), COALESCE(m.confirmation, ''),
	m.confirm_by, m.attempt, m.created_at, m.updated_at, m.sent_at, m.replayed_at`

// findSQL is the statement of one page of f (checked by Validate): the
// mails it selects after c (nil: from the newest), newest first, one more
// than limit so that the caller knows whether a page follows. Its last
// parameter is that row limit.
//
// A listing walks postline_messages along postline_messages_created_idx,
// newest first, and checks the other conditions on each row, unless a
// Message-ID lets the planner start from the mail's key. With a recipient
// the statement is instead recipientSQL's, whose rows findByRecipient
// makes the page of (walksRecipients), unless the listing ends at an
// Until: the recipient rows are in the order they were written, so a walk
// of them would pass every row written since Until before reaching the
// listing (a big domain's mail of last week: millions). Then the
// recipient condition is a semi-join the planner may run either way: from
// the mail created before Until, newest first, for an address or domain
// with mail on every page, or from the recipient indexes for one with
// little.
func findSQL(f Filter, match *RecipientMatch, c *cursor, limit int) (string, []any) {
	var b sqlBuilder
	mailConditions(&b, f, c)
	if walksRecipients(f, match) {
		return recipientSQL(&b, f, *match, firstCandidates(limit))
	}
	if match != nil {
		cond := b.recipientMatchSQL(*match)
		if match.Local != "" {
			local := b.arg(match.Local)
			cond += fmt.Sprintf(" AND left(r.address, char_length(%[1]s::text)) = %[1]s::text", local)
		}
		b.cond("EXISTS (SELECT 1 FROM postline_recipients r WHERE r.message_id = m.message_id\n\t\tAND " + cond + ")")
	}
	sql := "SELECT " + mailColumns + "\nFROM postline_messages m"
	if len(b.where) > 0 {
		sql += "\nWHERE " + strings.Join(b.where, "\n\tAND ")
	}
	sql += "\nORDER BY m.created_at DESC, m.message_id DESC\nLIMIT " + b.arg(limit+1)
	return sql, b.args
}

// mailConditions adds the conditions of f and c on postline_messages m.
func mailConditions(b *sqlBuilder, f Filter, c *cursor) {
	if f.MessageID != "" {
		b.cond("m.message_id = " + b.arg(f.MessageID))
	}
	if f.Tenant != "" {
		b.cond("m.tenant = " + b.arg(f.Tenant))
	}
	if f.State != "" {
		s := b.arg(f.State)
		inRecipients := "EXISTS (SELECT 1 FROM postline_recipients o WHERE o.message_id = m.message_id AND o.state = " + s + ")"
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
		b.cond(fmt.Sprintf(`(m.error_class = %[1]s OR EXISTS (SELECT 1 FROM postline_recipients o
		WHERE o.message_id = m.message_id AND (o.rule = %[1]s OR o.bounce_type = %[1]s)))`, r))
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
}

// recipientSQL is the statement of a recipient search: the recipient rows
// match selects, newest written first, along the address's or domain's
// index (migration 0021), each with its mail, which must meet the
// conditions in b; at most the last parameter's rows. A recipient row is
// never older than its mail, so the rows of a mail created since f.Since
// were written since then too.
func recipientSQL(b *sqlBuilder, f Filter, match RecipientMatch, rows int) (string, []any) {
	b.cond(b.recipientMatchSQL(match))
	if !f.Since.IsZero() {
		b.cond("r.created_at >= " + b.arg(f.Since))
	}
	sql := "SELECT " + mailColumns + ", r.created_at, r.address\nFROM postline_recipients r JOIN postline_messages m ON m.message_id = r.message_id" +
		"\nWHERE " + strings.Join(b.where, "\n\tAND ") + "\nORDER BY r.created_at DESC\nLIMIT " + b.arg(rows)
	return sql, b.args
}

// walksRecipients says whether Find reads the page of f by walking the
// recipient rows of match (findByRecipient).
func walksRecipients(f Filter, match *RecipientMatch) bool { return match != nil && f.Until.IsZero() }

// firstCandidates is how many recipient rows the first read of a
// recipient search for a page of limit takes: the page and the mail after
// it, twice over, as a mail may have more than one matching recipient.
func firstCandidates(limit int) int { return 2 * (limit + 1) }

// findByRecipient reads the mails of a recipient search for match (sql
// and args, from findSQL, whose last argument is the row limit) and
// returns the first limit+1 of them in the listing's order.
//
// The rows come newest written first, and a recipient row is never
// written before its mail is created (migration 0021). So once limit+1
// mails are known and the (limit+1)-th of them, in the listing's order,
// was created after the last row read was written, no row not yet read
// can be of a mail that belongs before it: the page is certain. Until
// then, or until the rows run out, the read is made again with four times
// the rows. A mail is rarely written long after its creation, so the first
// read is nearly always the only one.
//
// The statement is planned for its values each time (an unnamed
// statement), not once for all as a prepared one: which index walk is
// cheap depends on how much mail the address or domain has.
func findByRecipient(ctx context.Context, tx pgx.Tx, match RecipientMatch, sql string, args []any, limit int) ([]Mail, error) {
	for n := args[len(args)-1].(int); ; n *= 4 {
		args[len(args)-1] = n
		rows, err := tx.Query(ctx, sql, append([]any{pgx.QueryExecModeCacheDescribe}, args...)...)
		if err != nil {
			return nil, err
		}
		mails, read, lastWritten, err := scanCandidates(rows, match)
		if err != nil {
			return nil, err
		}
		slices.SortFunc(mails, func(a, b Mail) int {
			if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
				return c
			}
			return strings.Compare(b.MessageID, a.MessageID) // bytes, as the column's "C" collation orders
		})
		if read < n || (len(mails) > limit && mails[limit].CreatedAt.After(lastWritten)) {
			return mails[:min(len(mails), limit+1)], nil
		}
	}
}

// scanCandidates reads recipientSQL's rows: the mails of the rows whose
// address has match's local part, each once, how many rows there were,
// and when the last one was written.
func scanCandidates(rows pgx.Rows, match RecipientMatch) (mails []Mail, read int, lastWritten time.Time, err error) {
	var (
		m                         Mail
		confirmBy, sent, replayed pgtype.Timestamptz
		written                   time.Time
		address                   string
	)
	seen := map[string]bool{}
	_, err = pgx.ForEachRow(rows, []any{&m.MessageID, &m.Tenant, &m.Status, &m.Stream, &m.Priority, &m.Provider,
		&m.ErrorClass, &m.LastError, &m.Confirmation, &confirmBy, &m.Attempt, &m.CreatedAt, &m.UpdatedAt, &sent,
		&replayed, &written, &address}, func() error {
		read++
		lastWritten = written
		if !seen[m.MessageID] && localPartMatches(match, address) {
			seen[m.MessageID] = true
			m.ConfirmBy, m.SentAt, m.ReplayedAt = timeOf(confirmBy), timeOf(sent), timeOf(replayed)
			m.CreatedAt, m.UpdatedAt = m.CreatedAt.UTC(), m.UpdatedAt.UTC()
			mails = append(mails, m)
		}
		m = Mail{}
		return nil
	})
	return mails, read, lastWritten, err
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
		var mails []Mail
		if walksRecipients(f, match) {
			var err error
			if mails, err = findByRecipient(ctx, tx, *match, sql, args, limit); err != nil {
				return err
			}
		} else {
			if match != nil {
				// Planned for the address or domain, as findByRecipient's.
				args = append([]any{pgx.QueryExecModeCacheDescribe}, args...)
			}
			rows, err := tx.Query(ctx, sql, args...)
			if err != nil {
				return err
			}
			if mails, err = scanMails(rows); err != nil {
				return err
			}
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
