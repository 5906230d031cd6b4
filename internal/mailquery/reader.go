package mailquery

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotFound is wrapped by Life's error for a Message-ID Postline knows
// nothing of: no row and no indexed event.
var ErrNotFound = errors.New("mailquery: mail not found")

// Reader answers operators' questions about mail. It only reads, so it is
// safe to point at a live database; it is safe for concurrent use.
type Reader struct {
	pool *pgxpool.Pool
}

// New returns a Reader on pool, whose schema has the migrations applied
// (internal/schema).
func New(pool *pgxpool.Pool) (*Reader, error) {
	if pool == nil {
		return nil, errors.New("mailquery: nil pool")
	}
	return &Reader{pool: pool}, nil
}

// timeOf is t's time, zero when NULL.
func timeOf(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}
