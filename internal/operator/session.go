package operator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Session is a logged-in operator. Token is set only on the value Login
// returns: the store keeps its hash, never the token.
type Session struct {
	Token     string
	Operator  string
	Role      Role
	CSRF      string
	ExpiresAt time.Time
}

// newToken returns 32 random bytes, URL-safe base64.
func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("operator: token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func tokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// Login checks name and password and starts a session. client is the
// caller's ClientAddress ("" if unknown). A name or a client address
// blocked by its throttle is refused with a *ThrottledError before the
// password is looked at; an unknown name, a disabled account and a wrong
// password are all ErrWrongPassword, and each counts against the name and
// the address.
func (s *Store) Login(ctx context.Context, name, password, client string) (Session, error) {
	// Names are lower case: "Ada " is ada. One that no account can have
	// (not text, too long) is not looked up and counts against the client only.
	name = strings.ToLower(strings.TrimSpace(name))
	valid := CheckName(name) == nil
	keys := s.throttleKeys(name, client, valid)
	now := s.cfg.Now()
	if wait, err := s.blocked(ctx, keys, now); err != nil {
		return Session{}, err
	} else if wait > 0 {
		return Session{}, &ThrottledError{RetryAfter: wait}
	}
	var role Role
	var hash string
	var disabled *time.Time
	found := false
	if valid {
		err := s.db.QueryRow(ctx, `SELECT role, password_hash, disabled_at FROM postline_console_operators WHERE name = $1`,
			name).Scan(&role, &hash, &disabled)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return Session{}, fmt.Errorf("operator login: %w", err)
		}
		found = err == nil
	}
	if !found || len(password) > MaxPasswordBytes {
		hash = s.decoy
	}
	ok, err := VerifyPassword(hash, password)
	if err != nil {
		return Session{}, fmt.Errorf("operator login %s: %w", name, err)
	}
	if !found || !ok || disabled != nil {
		if err := s.fail(ctx, keys, now); err != nil {
			return Session{}, err
		}
		return Session{}, ErrWrongPassword
	}
	return s.start(ctx, name, role, client, "account:"+name, now)
}

// start records a new session of name and forgets the account's failures.
func (s *Store) start(ctx context.Context, name string, role Role, client, accountKey string, now time.Time) (Session, error) {
	token, err := newToken()
	if err != nil {
		return Session{}, err
	}
	csrf, err := newToken()
	if err != nil {
		return Session{}, err
	}
	sess := Session{Token: token, Operator: name, Role: role, CSRF: csrf, ExpiresAt: now.Add(s.cfg.SessionLifetime)}
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO postline_console_sessions (token_hash, operator, csrf_token, client, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, tokenHash(token), name, csrf, client, now, sess.ExpiresAt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM postline_console_login_failures WHERE key = $1`, accountKey); err != nil {
			return err
		}
		// Logins are rare: each sweeps what has ended, so neither table grows.
		if _, err := tx.Exec(ctx, `DELETE FROM postline_console_sessions WHERE expires_at <= $1`, now); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM postline_console_login_failures WHERE blocked_until <= $1 AND last_failure_at < $2`,
			now, now.Add(-max(s.cfg.AccountThrottle.Forget, s.cfg.ClientThrottle.Forget)))
		return err
	})
	if err != nil {
		return Session{}, fmt.Errorf("operator login %s: start session: %w", name, err)
	}
	return sess, nil
}

// Lookup returns the live session of token, with its account's current
// role, or ErrNoSession.
func (s *Store) Lookup(ctx context.Context, token string) (Session, error) {
	if token == "" || len(token) > 128 {
		return Session{}, ErrNoSession
	}
	var sess Session
	err := s.db.QueryRow(ctx, `SELECT s.operator, o.role, s.csrf_token, s.expires_at
		FROM postline_console_sessions s JOIN postline_console_operators o ON o.name = s.operator
		WHERE s.token_hash = $1 AND s.expires_at > $2 AND o.disabled_at IS NULL`,
		tokenHash(token), s.cfg.Now()).Scan(&sess.Operator, &sess.Role, &sess.CSRF, &sess.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrNoSession
	}
	if err != nil {
		return Session{}, fmt.Errorf("operator session lookup: %w", err)
	}
	return sess, nil
}

// Logout ends the session of token; its cookie is refused from then on.
func (s *Store) Logout(ctx context.Context, token string) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM postline_console_sessions WHERE token_hash = $1`, tokenHash(token)); err != nil {
		return fmt.Errorf("operator logout: %w", err)
	}
	return nil
}

// throttleKey is one row of the login throttle and its schedule.
type throttleKey struct {
	key      string
	schedule Throttle
}

// throttleKeys are the keys a login counts against: the account name,
// when it is one an account may have, and the client, when known.
func (s *Store) throttleKeys(name, client string, validName bool) []throttleKey {
	var keys []throttleKey
	if validName {
		keys = append(keys, throttleKey{key: "account:" + name, schedule: s.cfg.AccountThrottle})
	}
	if client != "" {
		keys = append(keys, throttleKey{key: "client:" + client, schedule: s.cfg.ClientThrottle})
	}
	return keys
}
