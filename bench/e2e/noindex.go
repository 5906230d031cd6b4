package main

// The noindex variant: the postline variant's worker, settings and jobs,
// on a schema without the recipient search's indexes (migration 0021:
// postline_recipients_address_idx and postline_recipients_domain_idx), the
// indexes the console added to the tables the worker writes. The postline
// row beside it, in the same run, pays for them; the target bounds what
// they cost the hot path. The recipients' created_at column, which the
// indexes order by, stays: a default the worker's insert does not name.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/schema"
)

const (
	variantNoIndex = "noindex"
	// noIndexDescription names what the noindex row runs without.
	noIndexDescription = "the recipient search's indexes"
	// noIndexMinRatio is the least share of the noindex row's rate, in the
	// same run, the postline row must reach (issue 31).
	noIndexMinRatio = 0.95
)

// noIndexIndexes are the indexes the noindex row runs without.
var noIndexIndexes = []string{"postline_recipients_address_idx", "postline_recipients_domain_idx"}

// prepareNoIndex migrates the variant's fresh schema and drops the
// indexes: the worker's own migration at start finds them applied and
// leaves them dropped.
func prepareNoIndex(ctx context.Context, pool *pgxpool.Pool) error {
	if err := schema.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, ix := range noIndexIndexes {
		if _, err := pool.Exec(ctx, "DROP INDEX "+ix); err != nil {
			return fmt.Errorf("drop %s: %w", ix, err)
		}
	}
	return nil
}

// noIndexTarget judges the postline row (with the index) against the
// noindex row of the same run; a missing row leaves it not measured.
func noIndexTarget(rows []result, plain, noIndex string) target {
	t := target{Name: fmt.Sprintf("%s (with %s) vs %s in the same run, mails/s", plain, noIndexDescription, noIndex),
		Measured: "n/a", Goal: fmt.Sprintf("≥ %.2fx", noIndexMinRatio)}
	p, okP := findRow(rows, plain)
	n, okN := findRow(rows, noIndex)
	if !okP || !okN {
		return t
	}
	if x := ratio(p.Rate(), n.Rate()); finite(x) {
		t.Known, t.Pass = true, x >= noIndexMinRatio
		t.Measured = fmt.Sprintf("%s (%.0f vs %.0f mails/s", formatRatio(x), p.Rate(), n.Rate())
		if c := ratio(float64(p.StackPerMail()), float64(n.StackPerMail())); p.Stack.Measured && n.Stack.Measured && finite(c) {
			t.Measured += fmt.Sprintf("; whole-stack CPU per mail %s", formatRatio(c))
		}
		t.Measured += ")"
	}
	return t
}
