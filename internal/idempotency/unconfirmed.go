package idempotency

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// DefaultLateGrace is the default of UnconfirmedSweep.LateGrace.
const DefaultLateGrace = 5 * time.Minute

// UnconfirmedSweep says what one pass of SweepUnconfirmed reads.
type UnconfirmedSweep struct {
	// Limit is how many due recipients the walks read at most; the mail
	// they end in is read whole. Required.
	Limit int
	// LateGrace is how long after a relay took a recipient past its mail's
	// window the pass waits before reading it: longer than any transaction
	// writing a recipient row stays open, so that one committing late is
	// not walked past. Such mail is a window late already; this is nothing
	// beside it. Defaults to DefaultLateGrace (5m).
	LateGrace time.Duration
}

// UnconfirmedPass is what one pass of the unconfirmed sweep did.
type UnconfirmedPass struct {
	// Swept is false when another pass held the sweep's turn: this one
	// read and wrote nothing.
	Swept bool
	// Recipients is how many recipients the pass handed to publish: the
	// accepted recipients of the mail it found due.
	Recipients int
	// Marked is how many mails it marked unconfirmed.
	Marked int
	// More reports that a walk stopped at the limit: more may be due now.
	More bool
}

// sweepTurnSQL lets one pass of the fleet's sweeps at a time touch the
// sweep's place; the others skip theirs. An advisory lock, not a lock of
// the row: a row lock gives the transaction an ID while it waits for the
// events to be published, and an open transaction ID holds back what
// vacuum may remove in every table. The key is the table's own (its OID),
// so schemas of one database do not wait for each other; the lock ends
// with the transaction.
const sweepTurnSQL = `SELECT pg_try_advisory_xact_lock('postline_unconfirmed_sweep'::regclass::oid::int, 1)`

const sweepPlaceSQL = `SELECT due_by, due_message_id, due_idx, late_at, late_message_id, late_idx, now(),
	now() - make_interval(secs => $1) FROM postline_unconfirmed_sweep`

// sweepDueSQL walks the accepted recipients by their mail's confirm_by
// (postline_recipients_confirm_by_idx) from the sweep's place to now: what
// came due since the last pass. Mail already marked behind the place is
// never read again. The mail's recipients are neighbours in this order (they
// carry its confirm_by).
const sweepDueSQL = `SELECT ` + recipientColumnsSQL + `
	FROM postline_recipients r JOIN postline_messages m ON m.message_id = r.message_id
	WHERE r.state = 'accepted' AND r.confirm_by >= $1 AND r.confirm_by < now()
		AND (r.confirm_by, r.message_id, r.idx) > ($1, $2::text, $3::int2)
		AND m.confirm_by IS NOT NULL AND m.confirmation IS NULL
	ORDER BY r.confirm_by, r.message_id, r.idx
	LIMIT $4`

// sweepLateSQL walks the recipients accepted after their mail's window had
// passed (postline_recipients_late_idx, migration 0016) by when they were
// accepted, up to the pass's LateGrace ago: their confirm_by was behind the
// first walk's place before they were written.
const sweepLateSQL = `SELECT ` + recipientColumnsSQL + `
	FROM postline_recipients r JOIN postline_messages m ON m.message_id = r.message_id
	WHERE r.state = 'accepted' AND r.accepted_at >= r.confirm_by
		AND r.accepted_at >= $1 AND r.accepted_at < now() - make_interval(secs => $5)
		AND (r.accepted_at, r.message_id, r.idx) > ($1, $2::text, $3::int2)
		AND m.confirm_by IS NOT NULL AND m.confirmation IS NULL
	ORDER BY r.accepted_at, r.message_id, r.idx
	LIMIT $4`

// sweepMailsSQL reads the accepted recipients of the given mail whole: the
// rest of the mail a walk stopped in at its limit, and the late mail
// (whose recipients may have been accepted at different times).
const sweepMailsSQL = `SELECT ` + recipientColumnsSQL + `
	FROM postline_recipients r JOIN postline_messages m ON m.message_id = r.message_id
	WHERE r.message_id = ANY($1::text[]) AND r.state = 'accepted'
		AND m.confirm_by IS NOT NULL AND m.confirmation IS NULL AND m.confirm_by < now()
	ORDER BY r.message_id, r.idx`

// markUnconfirmedSQL marks mail unconfirmed if it still awaits confirmation
// past its window.
const markUnconfirmedSQL = `UPDATE postline_messages SET confirmation = 'unconfirmed', confirmed_at = now()
	WHERE message_id = ANY($1::text[]) AND confirm_by IS NOT NULL AND confirmation IS NULL AND confirm_by < now()`

const sweepMoveSQL = `UPDATE postline_unconfirmed_sweep SET due_by = $1, due_message_id = $2, due_idx = $3,
	late_at = $4, late_message_id = $5, late_idx = $6, swept_at = now()`

// sweepPlace is a position in one of the sweep's walks: a timestamp (due:
// confirm_by; late: accepted_at), then the recipient's key.
type sweepPlace struct {
	at  pgtype.Timestamptz
	id  string
	idx int16
}

// before reports whether p comes before q in the walk's order.
func (p sweepPlace) before(q sweepPlace) bool {
	if c := compareTimestamptz(p.at, q.at); c != 0 {
		return c < 0
	}
	if p.id != q.id {
		return p.id < q.id // COLLATE "C": byte order
	}
	return p.idx < q.idx
}

// compareTimestamptz orders timestamps, -infinity and infinity included.
func compareTimestamptz(a, b pgtype.Timestamptz) int {
	rank := func(t pgtype.Timestamptz) int { return int(t.InfinityModifier) } // -1, 0, 1
	if c := cmp.Compare(rank(a), rank(b)); c != 0 || a.InfinityModifier != pgtype.Finite {
		return c
	}
	return a.Time.Compare(b.Time)
}

// pastMail is the place after every recipient of mail id at at: indexes
// are below 100.
func pastMail(at pgtype.Timestamptz, id string) sweepPlace { return sweepPlace{at, id, 100} }

// SweepUnconfirmed makes one pass of the sweep that marks mail unconfirmed
// once its confirmation window passed with recipients still accepted, in
// one transaction:
//
//   - It takes the sweep's turn, or returns at once with Swept false when
//     another pass (another worker's, as a rule) holds it: one pass of the
//     fleet at a time does the work, and each reads only what came due
//     since the one before.
//   - It walks from the sweep's place (migration 0016) up to sw.Limit
//     recipients due: first by confirm_by up to now, then, with what the
//     limit leaves, the recipients accepted after their mail's window had
//     passed, up to sw.LateGrace ago. What it reads costs in proportion to
//     what came due since the last pass, not to the mail marked before it.
//   - It calls publish with the accepted recipients of the mail found,
//     whole: the walk's rows in its order, then the rest of the mail the
//     limit cut and the late mail, read again by key (so publish may get
//     more than sw.Limit recipients). An error from publish ends the pass
//     with nothing marked and the place where it was, so the next pass
//     publishes them again. publish runs inside the transaction: it holds
//     the turn, and a pool connection, until it returns.
//   - It marks that mail unconfirmed, moves the place past what it read,
//     and commits.
//
// Mail whose recipients a report resolves in the meantime is not marked;
// its events may already be published, as before. A pass reads rows as
// they are committed: a recipient committed after the walk passed its
// confirm_by is missed, which takes a window shorter than the transaction
// that wrote it (or a clock that far behind the database's).
func (s *Store) SweepUnconfirmed(ctx context.Context, sw UnconfirmedSweep, publish func(ctx context.Context, due []Recipient) error) (UnconfirmedPass, error) {
	sw.LateGrace = cmp.Or(sw.LateGrace, DefaultLateGrace)
	if sw.Limit < 1 || sw.LateGrace < 0 {
		return UnconfirmedPass{}, fmt.Errorf("unconfirmed sweep: Limit %d must be positive and LateGrace %v not negative", sw.Limit, sw.LateGrace)
	}
	var pass UnconfirmedPass
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		start := time.Now()
		due, ids, err := s.sweepRead(ctx, tx, sw, &pass)
		s.observe(ctx, opUnconfirmed, start, err)
		if err != nil || !pass.Swept || len(due) == 0 {
			return err
		}
		if err := publish(ctx, due); err != nil {
			return err
		}
		start = time.Now()
		tag, err := tx.Exec(ctx, markUnconfirmedSQL, ids)
		s.observe(ctx, opUnconfirmed, start, err)
		if err != nil {
			return fmt.Errorf("mark %d mails: %w", len(ids), err)
		}
		pass.Marked = int(tag.RowsAffected())
		return nil
	})
	if err != nil {
		return UnconfirmedPass{}, fmt.Errorf("unconfirmed sweep: %w", err)
	}
	return pass, nil
}

// sweepRead takes the turn, walks, moves the place (the move commits only
// with the pass) and reads the mail found whole: the recipients to publish
// and the mail to mark.
func (s *Store) sweepRead(ctx context.Context, tx pgx.Tx, sw UnconfirmedSweep, pass *UnconfirmedPass) ([]Recipient, []string, error) {
	var turn bool
	if err := tx.QueryRow(ctx, sweepTurnSQL).Scan(&turn); err != nil {
		return nil, nil, fmt.Errorf("take the turn: %w", err)
	}
	if !turn {
		return nil, nil, nil
	}
	pass.Swept = true
	var due, late sweepPlace
	var now, lateNow pgtype.Timestamptz
	err := tx.QueryRow(ctx, sweepPlaceSQL, sw.LateGrace.Seconds()).Scan(&due.at, &due.id, &due.idx, &late.at, &late.id, &late.idx, &now, &lateNow)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, errors.New("no place row in postline_unconfirmed_sweep (migration 0016)")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read the place: %w", err)
	}
	// walk reads up to limit recipients from a place and returns them with
	// the place after them: past the last one's mail when the limit
	// stopped it, else end, the instant it looked up to ('' and -1 come
	// before every recipient of that instant).
	walk := func(sql string, from, end sweepPlace, limit int, at func(Recipient) time.Time, args ...any) ([]Recipient, sweepPlace, error) {
		rows, err := tx.Query(ctx, sql, append([]any{from.at, from.id, from.idx, limit}, args...)...)
		if err != nil {
			return nil, from, err
		}
		list, err := scanRecipients(rows)
		switch {
		case err != nil:
			return nil, from, err
		case len(list) == limit:
			last := list[len(list)-1]
			return list, pastMail(pgtype.Timestamptz{Time: at(last), Valid: true}, last.MessageID), nil
		case from.before(end):
			return list, end, nil
		}
		return list, from, nil // a place ahead of the clock stays
	}
	dueList, nextDue, err := walk(sweepDueSQL, due, sweepPlace{now, "", -1}, sw.Limit,
		func(r Recipient) time.Time { return r.ConfirmBy })
	if err != nil {
		return nil, nil, fmt.Errorf("walk due mail: %w", err)
	}
	var lateList []Recipient
	nextLate := late
	dueFull, lateFull := len(dueList) == sw.Limit, false
	// The late walk waits for a pass the first one leaves room in: what it
	// finds is a window late already.
	if !dueFull {
		lateList, nextLate, err = walk(sweepLateSQL, late, sweepPlace{lateNow, "", -1}, sw.Limit-len(dueList),
			func(r Recipient) time.Time { return r.AcceptedAt }, sw.LateGrace.Seconds())
		if err != nil {
			return nil, nil, fmt.Errorf("walk late mail: %w", err)
		}
		lateFull = len(lateList) == sw.Limit-len(dueList)
	}
	pass.More = dueFull || lateFull
	if _, err := tx.Exec(ctx, sweepMoveSQL, nextDue.at, nextDue.id, nextDue.idx, nextLate.at, nextLate.id, nextLate.idx); err != nil {
		return nil, nil, fmt.Errorf("move the place: %w", err)
	}

	// Whole mail: the rest of the one the due walk stopped in, and the
	// late mail, read again by key.
	var ids, again []string
	seen := map[string]bool{}
	for _, r := range dueList {
		if !seen[r.MessageID] {
			seen[r.MessageID] = true
			ids = append(ids, r.MessageID)
		}
	}
	if dueFull {
		last := ids[len(ids)-1]
		again = append(again, last)
		for len(dueList) > 0 && dueList[len(dueList)-1].MessageID == last {
			dueList = dueList[:len(dueList)-1]
		}
		ids = ids[:len(ids)-1]
		delete(seen, last)
	}
	for _, r := range lateList {
		if !seen[r.MessageID] {
			seen[r.MessageID] = true
			again = append(again, r.MessageID)
		}
	}
	list := dueList
	if len(again) > 0 {
		rows, err := tx.Query(ctx, sweepMailsSQL, again)
		if err != nil {
			return nil, nil, fmt.Errorf("read %d mails whole: %w", len(again), err)
		}
		whole, err := scanRecipients(rows)
		if err != nil {
			return nil, nil, fmt.Errorf("read %d mails whole: %w", len(again), err)
		}
		list = append(list, whole...)
		// Mark only the mail read: a report may have settled one since
		// the walk.
		for i, r := range whole {
			if i == 0 || r.MessageID != whole[i-1].MessageID {
				ids = append(ids, r.MessageID)
			}
		}
	}
	pass.Recipients = len(list)
	return list, ids, nil
}
