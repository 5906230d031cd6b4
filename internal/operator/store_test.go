package operator

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
)

// clock is a settable clock for the throttle and session expiry.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newTestStore(t *testing.T) (*Store, *AuditLog, *clock) {
	t.Helper()
	_, pool := testenv.NewSchema(t)
	ctx := context.Background()
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	c := &clock{now: time.Now().UTC().Truncate(time.Microsecond)}
	s, err := New(Config{Hash: testHash, Now: c.Now, SessionLifetime: time.Hour}, pool)
	if err != nil {
		t.Fatal(err)
	}
	return s, NewAuditLog(pool, c.Now), c
}

func TestAccountsAndSessions(t *testing.T) {
	s, _, c := newTestStore(t)
	ctx := context.Background()
	if err := s.Add(ctx, "ada", RoleOperator, "first password!"); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, "ada", RoleViewer, "another password"); !errors.Is(err, ErrAccountExists) {
		t.Fatalf("second Add of ada = %v, want ErrAccountExists", err)
	}
	if err := s.Add(ctx, "bob", RoleViewer, "short"); err == nil {
		t.Fatal("Add took a 5-character password")
	}
	if _, err := s.Login(ctx, "ada", "wrong password", "192.0.2.1"); !errors.Is(err, ErrWrongPassword) {
		t.Fatalf("Login with a wrong password = %v", err)
	}
	if _, err := s.Login(ctx, "nobody", "first password!", "192.0.2.1"); !errors.Is(err, ErrWrongPassword) {
		t.Fatalf("Login of an unknown name = %v, want ErrWrongPassword", err)
	}
	if _, err := s.Login(ctx, "ada\x00\xff", "first password!", "192.0.2.1"); !errors.Is(err, ErrWrongPassword) {
		t.Fatalf("Login of a name that is not text = %v, want ErrWrongPassword", err)
	}
	sess, err := s.Login(ctx, " ADA ", "first password!", "192.0.2.1")
	if err != nil {
		t.Fatalf("Login of ada typed as %q: %v", " ADA ", err)
	}
	if sess.Token == "" || sess.CSRF == "" || sess.Token == sess.CSRF || sess.Role != RoleOperator {
		t.Fatalf("session %+v: want a token, a different CSRF token and role operator", sess)
	}
	got, err := s.Lookup(ctx, sess.Token)
	if err != nil || got.Operator != "ada" || got.CSRF != sess.CSRF || got.Token != "" {
		t.Fatalf("Lookup = %+v, %v", got, err)
	}
	// The table holds the token's hash only.
	var stored int
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM postline_console_sessions WHERE token_hash = $1::text::bytea`,
		sess.Token).Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("a session row holds the token itself (%d, %v)", stored, err)
	}

	if err := s.Logout(ctx, sess.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(ctx, sess.Token); !errors.Is(err, ErrNoSession) {
		t.Fatalf("Lookup after Logout = %v, want ErrNoSession", err)
	}

	// A password change and disabling end the sessions.
	sess, _ = s.Login(ctx, "ada", "first password!", "")
	if err := s.SetPassword(ctx, "ada", "second password!"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(ctx, sess.Token); !errors.Is(err, ErrNoSession) {
		t.Fatalf("Lookup after SetPassword = %v, want ErrNoSession", err)
	}
	if _, err := s.Login(ctx, "ada", "first password!", ""); !errors.Is(err, ErrWrongPassword) {
		t.Fatalf("Login with the old password = %v", err)
	}
	sess, err = s.Login(ctx, "ada", "second password!", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Disable(ctx, "ada"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(ctx, sess.Token); !errors.Is(err, ErrNoSession) {
		t.Fatalf("Lookup after Disable = %v, want ErrNoSession", err)
	}
	if _, err := s.Login(ctx, "ada", "second password!", ""); !errors.Is(err, ErrWrongPassword) {
		t.Fatalf("Login of a disabled account = %v, want ErrWrongPassword", err)
	}
	if err := s.Disable(ctx, "nobody"); !errors.Is(err, ErrNoAccount) {
		t.Fatalf("Disable of an unknown name = %v", err)
	}

	// Sessions expire.
	if err := s.Add(ctx, "cy", RoleViewer, "cy's password!"); err != nil {
		t.Fatal(err)
	}
	sess, _ = s.Login(ctx, "cy", "cy's password!", "")
	c.Add(time.Hour + time.Second)
	if _, err := s.Lookup(ctx, sess.Token); !errors.Is(err, ErrNoSession) {
		t.Fatalf("Lookup of an expired session = %v", err)
	}
	accounts, err := s.List(ctx)
	if err != nil || len(accounts) != 2 || accounts[0].Name != "ada" || accounts[0].DisabledAt.IsZero() || accounts[1].Role != RoleViewer {
		t.Fatalf("List = %+v, %v", accounts, err)
	}
}

func TestTenWrongPasswordsSlowTheNextTry(t *testing.T) {
	s, _, c := newTestStore(t)
	ctx := context.Background()
	if err := s.Add(ctx, "ada", RoleViewer, "the right password"); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		_, err := s.Login(ctx, "ada", "a wrong password", "192.0.2.9")
		var throttled *ThrottledError
		if errors.As(err, &throttled) {
			// Blocked: wait it out as a patient attacker would.
			c.Add(throttled.RetryAfter)
			_, err = s.Login(ctx, "ada", "a wrong password", "192.0.2.9")
		}
		if !errors.Is(err, ErrWrongPassword) {
			t.Fatalf("wrong password %d: %v", i+1, err)
		}
	}
	// Even the right password is refused now, from any address.
	_, err := s.Login(ctx, "ada", "the right password", "198.51.100.1")
	var throttled *ThrottledError
	if !errors.As(err, &throttled) || throttled.RetryAfter != DefaultAccountThrottle.Wait(10) {
		t.Fatalf("login after ten wrong passwords = %v, want a ThrottledError of %s", err, DefaultAccountThrottle.Wait(10))
	}
	c.Add(throttled.RetryAfter)
	if _, err := s.Login(ctx, "ada", "the right password", "198.51.100.1"); err != nil {
		t.Fatalf("login once the wait passed: %v", err)
	}
	// A success forgets the account's failures: one wrong password costs nothing again.
	if _, err := s.Login(ctx, "ada", "a wrong password", "198.51.100.1"); !errors.Is(err, ErrWrongPassword) {
		t.Fatalf("wrong password after a success = %v", err)
	}
	if _, err := s.Login(ctx, "ada", "the right password", "198.51.100.1"); err != nil {
		t.Fatalf("login after one wrong password: %v", err)
	}
}

func TestClientAddressIsThrottledAcrossAccounts(t *testing.T) {
	s, _, _ := newTestStore(t)
	ctx := context.Background()
	if err := s.Add(ctx, "ada", RoleViewer, "the right password"); err != nil {
		t.Fatal(err)
	}
	// One address trying many names: no name reaches its limit, the address does.
	for i := range DefaultClientThrottle.FreeFailures + 1 {
		name := string(rune('a'+i%26)) + "-guess"
		if _, err := s.Login(ctx, name, "a wrong password", "203.0.113.5"); !errors.Is(err, ErrWrongPassword) {
			t.Fatalf("guess %d: %v", i, err)
		}
	}
	var throttled *ThrottledError
	if _, err := s.Login(ctx, "ada", "the right password", "203.0.113.5"); !errors.As(err, &throttled) {
		t.Fatalf("login from an address past its limit = %v, want a ThrottledError", err)
	}
	if _, err := s.Login(ctx, "ada", "the right password", "203.0.113.6"); err != nil {
		t.Fatalf("login from another address: %v", err)
	}
}

func TestAuditLogWritesAndReadsNewestFirst(t *testing.T) {
	_, audit, c := newTestStore(t)
	ctx := context.Background()
	for i, a := range []struct{ actor, action string }{{"ada", "login"}, {"bob", "mail.search"}, {"ada", "suppression.remove"}} {
		c.Add(time.Second)
		if err := audit.Write(ctx, a.actor, a.action, map[string]any{"n": i}, ResultOK, "192.0.2.1"); err != nil {
			t.Fatal(err)
		}
	}
	all, err := audit.Read(ctx, AuditFilter{})
	if err != nil || len(all) != 3 || all[0].Action != "suppression.remove" || all[2].Action != "login" {
		t.Fatalf("Read = %+v, %v", all, err)
	}
	var target map[string]int
	if err := json.Unmarshal(all[0].Target, &target); err != nil || target["n"] != 2 {
		t.Fatalf("target %s: %v", all[0].Target, err)
	}
	ada, err := audit.Read(ctx, AuditFilter{Actor: "ada", Limit: 1})
	if err != nil || len(ada) != 1 || ada[0].Action != "suppression.remove" {
		t.Fatalf("Read ada limit 1 = %+v, %v", ada, err)
	}
	next, err := audit.Read(ctx, AuditFilter{Actor: "ada", Before: ada[0].ID})
	if err != nil || len(next) != 1 || next[0].Action != "login" || !next[0].At.Before(ada[0].At) {
		t.Fatalf("next page = %+v, %v", next, err)
	}
}
