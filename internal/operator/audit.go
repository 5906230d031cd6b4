package operator

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Audit results.
const (
	ResultOK        = "ok"
	ResultDenied    = "denied" // the role may not act
	ResultNoCSRF    = "csrf_refused"
	ResultFailed    = "failed"    // the action was allowed and failed
	ResultInvalid   = "invalid"   // the request's fields were refused
	ResultThrottled = "throttled" // a login refused by the throttle
	ResultWrong     = "wrong_password"
)

// AuditEntry is one line of the audit log.
type AuditEntry struct {
	ID     int64
	At     time.Time
	Actor  string
	Action string
	// Target is what the action was on, or the search's filter, as JSON.
	Target json.RawMessage
	Result string
	Client string
}

// AuditLog writes and reads postline_console_audit.
type AuditLog struct {
	db  DB
	now func() time.Time
}

// NewAuditLog returns the audit log on db; a nil now is time.Now.
func NewAuditLog(db DB, now func() time.Time) *AuditLog {
	if now == nil {
		now = time.Now
	}
	return &AuditLog{db: db, now: now}
}

// Write appends an entry; target is marshalled to JSON (nil is {}). The
// caller must not put a password, token or body in it.
func (a *AuditLog) Write(ctx context.Context, actor, action string, target any, result, client string) error {
	raw := []byte("{}")
	if target != nil {
		var err error
		if raw, err = json.Marshal(target); err != nil {
			return fmt.Errorf("audit %s: target: %w", action, err)
		}
	}
	if _, err := a.db.Exec(ctx, `INSERT INTO postline_console_audit (at, actor, action, target, result, client)
		VALUES ($1, $2, $3, $4, $5, $6)`, a.now(), actor, action, raw, result, client); err != nil {
		return fmt.Errorf("audit %s: %w", action, err)
	}
	return nil
}

// Page sizes of the audit log.
const (
	DefaultAuditLimit = 100
	MaxAuditLimit     = 1000
)

// AuditFilter selects entries for Read, newest first.
type AuditFilter struct {
	// Actor selects one account's entries; "" selects all.
	Actor string
	// Action selects one action; "" selects all.
	Action string
	// Before continues a listing: entries with an ID below it; 0 starts
	// at the newest.
	Before int64
	// Limit is the page size, DefaultAuditLimit when 0, at most MaxAuditLimit.
	Limit int
}

// Read returns a page of entries, newest first; the next page is Before
// the last one's ID.
func (a *AuditLog) Read(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	limit := min(cmp.Or(f.Limit, DefaultAuditLimit), MaxAuditLimit)
	rows, err := a.db.Query(ctx, `SELECT id, at, actor, action, target, result, client FROM postline_console_audit
		WHERE ($1 = '' OR actor = $1) AND ($2 = '' OR action = $2) AND ($3 = 0 OR id < $3)
		ORDER BY id DESC LIMIT $4`, f.Actor, f.Action, f.Before, limit)
	if err != nil {
		return nil, fmt.Errorf("audit read: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := r.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Target, &e.Result, &e.Client)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("audit read: %w", err)
	}
	return out, nil
}
