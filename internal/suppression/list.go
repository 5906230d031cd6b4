package suppression

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Filter selects entries for List and Export. Entries come ordered by
// tenant, address, then stream.
type Filter struct {
	// Tenant selects one tenant ("" is mail without one); nil selects
	// every tenant.
	Tenant *string
	// Stream selects entries of one stream ("*" selects the entries of
	// every stream, not all entries); "" selects all.
	Stream Stream
	// Reason selects entries of one reason; "" selects all.
	Reason Reason
	// AddressPrefix selects addresses that begin with it once lowercased.
	AddressPrefix string
	// IncludeExpired also selects entries that have expired but are not
	// purged yet.
	IncludeExpired bool
	// After is the keyset cursor: List returns the entries after this key
	// (the last entry of the previous page, Entry.Key()); nil starts at the
	// beginning. Its address is used as given (entries' addresses are
	// normalized already).
	After *Key
	// Limit is the most entries List returns, at most MaxListLimit.
	// Defaults to DefaultListLimit (100). Export ignores it.
	Limit int
}

// validate checks f's fields.
func (f Filter) validate() error {
	if f.Tenant != nil {
		if err := checkText("tenant", *f.Tenant, MaxTenantBytes); err != nil {
			return err
		}
	}
	if f.Stream != "" && !f.Stream.Valid() {
		return fmt.Errorf("%w stream %q: want transactional, bulk or *", ErrInvalid, f.Stream)
	}
	if f.Reason != "" && !f.Reason.Valid() {
		return fmt.Errorf("%w reason %q: want one of %s", ErrInvalid, f.Reason, joinReasons())
	}
	if err := checkText("address prefix", f.AddressPrefix, MaxAddressBytes); err != nil {
		return err
	}
	if f.Limit < 0 || f.Limit > MaxListLimit {
		return fmt.Errorf("%w limit %d: want 1 to %d (0 for %d)", ErrInvalid, f.Limit, MaxListLimit, DefaultListLimit)
	}
	if f.After != nil {
		if err := checkText("cursor", f.After.Tenant+f.After.Address+string(f.After.Stream), 2*MaxInputBytes); err != nil {
			return err
		}
	}
	return nil
}

// query returns the statement and arguments selecting f's entries; limit 0
// selects all.
func (f Filter) query(now time.Time, limit int) (string, []any) {
	var after [3]*string
	if f.After != nil {
		st := string(f.After.Stream)
		after = [3]*string{&f.After.Tenant, &f.After.Address, &st}
	}
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	return `SELECT ` + entryColumns + ` FROM postline_suppressions
		WHERE ($1::text IS NULL OR tenant = $1)
			AND ($2::text = '' OR stream = $2)
			AND ($3::text = '' OR reason = $3)
			AND ($4::text = '' OR starts_with(address, $4))
			AND ($5::boolean OR expires_at IS NULL OR expires_at > $6)
			AND ($7::text IS NULL OR (tenant, address, stream) > ($7, $8::text, $9::text))
		ORDER BY tenant, address, stream
		LIMIT $10`,
		[]any{f.Tenant, string(f.Stream), string(f.Reason), strings.ToLower(strings.TrimSpace(f.AddressPrefix)), f.IncludeExpired, now,
			after[0], after[1], after[2], lim}
}

// List returns a page of the entries f selects, in key order; when it
// returns Limit entries, the next page is After the last one's Key.
func (s *Store) List(ctx context.Context, f Filter) ([]Entry, error) {
	if err := f.validate(); err != nil {
		return nil, fmt.Errorf("suppression list: %w", err)
	}
	sql, args := f.query(s.cfg.NowFunc(), cmp.Or(f.Limit, DefaultListLimit))
	start := time.Now()
	rows, err := s.db.Query(ctx, sql, args...)
	var out []Entry
	if err == nil {
		out, err = pgx.CollectRows(rows, scanEntry)
	}
	s.observe(ctx, opList, start, err)
	if err != nil {
		return nil, fmt.Errorf("suppression list: %w", err)
	}
	return out, nil
}

// Export calls fn with every entry f selects, in key order, as one query
// streams them (f.Limit is ignored); an error of fn stops it and is
// returned.
func (s *Store) Export(ctx context.Context, f Filter, fn func(Entry) error) error {
	f.Limit = 0
	if err := f.validate(); err != nil {
		return fmt.Errorf("suppression export: %w", err)
	}
	sql, args := f.query(s.cfg.NowFunc(), 0)
	start := time.Now()
	rows, err := s.db.Query(ctx, sql, args...)
	var fnErr error
	if err == nil {
		for rows.Next() {
			e, err := scanEntry(rows)
			if err != nil {
				fnErr = fmt.Errorf("suppression export: %w", err)
				break
			}
			if fnErr = fn(e); fnErr != nil {
				break
			}
		}
		rows.Close()
		err = rows.Err()
	}
	s.observe(ctx, opExport, start, err)
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("suppression export: %w", err)
	}
	return nil
}
