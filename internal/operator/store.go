package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultSessionLifetime is how long a session lasts when Config does not
// say.
const DefaultSessionLifetime = 12 * time.Hour

// Errors of the Store. None of them quotes a password or a token.
var (
	// ErrNoAccount: no account has that name.
	ErrNoAccount = errors.New("operator: no such account")
	// ErrAccountExists: Add of a name already taken.
	ErrAccountExists = errors.New("operator: an account of that name exists")
	// ErrWrongPassword: Login with an unknown name, a disabled account or
	// a wrong password; which one is not told.
	ErrWrongPassword = errors.New("operator: wrong name or password")
	// ErrNoSession: the token names no live session (never issued,
	// logged out, expired, or its account disabled).
	ErrNoSession = errors.New("operator: no such session")
)

// ThrottledError is Login's refusal of an account or client that had too
// many wrong passwords: try again after RetryAfter.
type ThrottledError struct{ RetryAfter time.Duration }

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("operator: too many wrong passwords: try again in %s", e.RetryAfter.Round(time.Second))
}

// Config configures a Store. Zero fields take the defaults.
type Config struct {
	SessionLifetime time.Duration
	AccountThrottle Throttle
	ClientThrottle  Throttle
	Hash            HashParams
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
}

func (cfg Config) withDefaults() Config {
	cfg.SessionLifetime = cmp.Or(cfg.SessionLifetime, DefaultSessionLifetime)
	if cfg.AccountThrottle == (Throttle{}) {
		cfg.AccountThrottle = DefaultAccountThrottle
	}
	if cfg.ClientThrottle == (Throttle{}) {
		cfg.ClientThrottle = DefaultClientThrottle
	}
	if cfg.Hash == (HashParams{}) {
		cfg.Hash = DefaultHashParams
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg
}

// DB is what a Store runs its statements on: a *pgxpool.Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Store reads and writes the accounts, sessions and login throttle. Its
// schema must be migrated (schema.Migrate). It is safe for concurrent use.
type Store struct {
	cfg Config
	db  DB
	// decoy is verified against when the account does not exist, so that
	// a wrong name takes as long as a wrong password.
	decoy string
}

// New returns a Store on db.
func New(cfg Config, db DB) (*Store, error) {
	cfg = cfg.withDefaults()
	if cfg.SessionLifetime < time.Minute {
		return nil, fmt.Errorf("operator config: SessionLifetime %s is shorter than a minute", cfg.SessionLifetime)
	}
	decoy, err := HashPassword("not a password of anyone", cfg.Hash)
	if err != nil {
		return nil, err
	}
	return &Store{cfg: cfg, db: db, decoy: decoy}, nil
}

// Account is one operator account, without its password hash.
type Account struct {
	Name       string
	Role       Role
	CreatedAt  time.Time
	UpdatedAt  time.Time
	DisabledAt time.Time // zero: enabled
}

var accountName = regexp.MustCompile(`^[a-z0-9][a-z0-9._@-]{0,63}$`)

// CheckName rejects an account name the console would not take.
func CheckName(name string) error {
	if !accountName.MatchString(name) {
		return fmt.Errorf("account name %q: want 1 to 64 of a-z, 0-9, '.', '_', '@', '-', starting with a letter or digit", name)
	}
	return nil
}

// Add creates an account.
func (s *Store) Add(ctx context.Context, name string, role Role, password string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if _, err := ParseRole(string(role)); err != nil {
		return err
	}
	if err := CheckPassword(password); err != nil {
		return err
	}
	hash, err := HashPassword(password, s.cfg.Hash)
	if err != nil {
		return err
	}
	now := s.cfg.Now()
	tag, err := s.db.Exec(ctx, `INSERT INTO postline_console_operators (name, role, password_hash, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $4) ON CONFLICT (name) DO NOTHING`, name, string(role), hash, now)
	if err != nil {
		return fmt.Errorf("operator add %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("operator add %s: %w", name, ErrAccountExists)
	}
	return nil
}

// List returns every account by name.
func (s *Store) List(ctx context.Context) ([]Account, error) {
	rows, err := s.db.Query(ctx, `SELECT name, role, created_at, updated_at, disabled_at
		FROM postline_console_operators ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("operator list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Account, error) {
		var a Account
		var disabled *time.Time
		err := r.Scan(&a.Name, &a.Role, &a.CreatedAt, &a.UpdatedAt, &disabled)
		if disabled != nil {
			a.DisabledAt = *disabled
		}
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("operator list: %w", err)
	}
	return out, nil
}

// Disable turns an account off and ends its sessions.
func (s *Store) Disable(ctx context.Context, name string) error {
	return s.changeAndLogOut(ctx, name, "disable",
		`UPDATE postline_console_operators SET disabled_at = coalesce(disabled_at, $2), updated_at = $2 WHERE name = $1`)
}

// SetPassword replaces an account's password and ends its sessions.
func (s *Store) SetPassword(ctx context.Context, name, password string) error {
	if err := CheckPassword(password); err != nil {
		return err
	}
	hash, err := HashPassword(password, s.cfg.Hash)
	if err != nil {
		return err
	}
	return s.changeAndLogOut(ctx, name, "passwd",
		`UPDATE postline_console_operators SET password_hash = $3, updated_at = $2 WHERE name = $1`, hash)
}

// changeAndLogOut runs update on the account's row ($1 the name, $2 now,
// then args) and deletes its sessions, in one transaction.
func (s *Store) changeAndLogOut(ctx context.Context, name, op, update string, args ...any) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, update, append([]any{name, s.cfg.Now()}, args...)...)
		if err != nil {
			return fmt.Errorf("operator %s %s: %w", op, name, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("operator %s %s: %w", op, name, ErrNoAccount)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM postline_console_sessions WHERE operator = $1`, name); err != nil {
			return fmt.Errorf("operator %s %s: end sessions: %w", op, name, err)
		}
		return nil
	})
}
