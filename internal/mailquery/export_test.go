package mailquery

import (
	"context"

	"github.com/postline/postline/event"
)

// FindSQL is the statement Find runs for f, for plan checks.
func FindSQL(f Filter) (string, []any) {
	var match *RecipientMatch
	if f.Recipient != "" {
		m, _ := ParseRecipient(f.Recipient)
		match = &m
	}
	return findSQL(f, match, nil, f.limit())
}

// WriteEvents writes events as Run writes a batch.
func (ix *Indexer) WriteEvents(ctx context.Context, events []event.Event) error {
	return ix.write(ctx, events)
}
