package mailquery

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ExplainFind returns PostgreSQL's plan of the statement that selects the
// page Find returns for f (the page's recipients are then read by primary
// key), as EXPLAIN prints it, or with analyze as EXPLAIN (ANALYZE, BUFFERS)
// prints it, which runs the statement. It is for the search benchmark and
// for whoever asks why a search is slow: the plan is of the statement and
// values Find sends.
func (r *Reader) ExplainFind(ctx context.Context, f Filter, analyze bool) (string, error) {
	if err := f.Validate(); err != nil {
		return "", err
	}
	var match *RecipientMatch
	if f.Recipient != "" {
		m, _ := ParseRecipient(f.Recipient) // checked by Validate
		match = &m
	}
	var after *cursor
	if f.Cursor != "" {
		c, _ := decodeCursor(f.Cursor) // checked by Validate
		after = &c
	}
	sql, args := findSQL(f, match, after, f.limit())
	plan, err := r.explain(ctx, sql, args, analyze)
	if err != nil {
		return "", fmt.Errorf("mailquery: explain find: %w", err)
	}
	return plan, nil
}

// ExplainLife returns the plans of the statements Life runs for
// messageID, as ExplainFind does, each after a line naming it.
func (r *Reader) ExplainLife(ctx context.Context, messageID string, analyze bool) (string, error) {
	var b strings.Builder
	for _, s := range []struct{ name, sql string }{
		{"row", lifeRowSQL}, {"recipients", recipientsSQL}, {"events", lifeEventsSQL}, {"webhooks", lifeWebhooksSQL},
	} {
		arg := any(messageID)
		if s.sql == recipientsSQL {
			arg = []string{messageID}
		}
		plan, err := r.explain(ctx, s.sql, []any{arg}, analyze)
		if err != nil {
			return "", fmt.Errorf("mailquery: explain life (%s): %w", s.name, err)
		}
		fmt.Fprintf(&b, "-- %s\n%s\n", s.name, plan)
	}
	return b.String(), nil
}

// explain runs EXPLAIN of sql with args in a read-only transaction, as an
// unnamed statement: planned for these values, not cached.
func (r *Reader) explain(ctx context.Context, sql string, args []any, analyze bool) (string, error) {
	head := "EXPLAIN "
	if analyze {
		head = "EXPLAIN (ANALYZE, BUFFERS) "
	}
	var lines []string
	err := pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, head+sql, append([]any{pgx.QueryExecModeDescribeExec}, args...)...)
		if err != nil {
			return err
		}
		lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return strings.Join(lines, "\n"), err
}
