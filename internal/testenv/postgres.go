package testenv

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// NewSchema creates a schema with a unique name in the test database and
// returns a URL whose connections use it (search_path is set as a run-time
// parameter of the connection, so it holds for every pooled connection) and a
// pool on that URL, closed when the test ends. The schema is dropped with
// CASCADE when the test ends; pools the test opens itself on the URL must be
// closed by then (register their Close with t.Cleanup after NewSchema). It
// skips t under -short.
func NewSchema(t testing.TB) (databaseURL string, pool *pgxpool.Pool) {
	t.Helper()
	Integration(t, "PostgreSQL")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := DatabaseURL()
	schema := UniqueName("test")

	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testenv: connect to %s: %v (is the stack up? scripts/stack.sh up)", redact(base), err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("testenv: create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("testenv: drop schema %s: connect: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("testenv: drop schema %s: %v", schema, err)
		}
	})

	databaseURL = withSearchPath(base, schema)
	pool, err = pgxpool.New(ctx, databaseURL)
	if err != nil {
		t.Fatalf("testenv: pool on schema %s: %v", schema, err)
	}
	t.Cleanup(pool.Close) // runs before the drop above
	var current *string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&current); err != nil {
		t.Fatalf("testenv: check schema %s: %v", schema, err)
	}
	if current == nil || *current != schema {
		t.Fatalf("testenv: connections on %s use schema %v, want %s", redact(databaseURL), current, schema)
	}
	return databaseURL, pool
}

// withSearchPath adds search_path=schema to a postgres:// URL or a
// keyword/value connection string; pgx sends it as a run-time parameter.
func withSearchPath(connString, schema string) string {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err == nil {
			q := u.Query()
			q.Set("search_path", schema)
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	return connString + " search_path=" + schema
}

// redact hides the password of a connection string for messages.
func redact(connString string) string {
	u, err := url.Parse(connString)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "(keyword/value connection string)"
	}
	return u.Redacted()
}
