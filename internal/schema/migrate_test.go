package schema_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
)

func TestMigrateTwiceAndConcurrently(t *testing.T) {
	t.Parallel()
	url, pool := testenv.NewSchema(t)
	many := openPool(t, url, 8)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = schema.Migrate(t.Context(), many) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Migrate %d: %v", i, err)
		}
	}
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	var applied, embedded int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM postline_schema_migrations").Scan(&applied); err != nil {
		t.Fatal(err)
	}
	migs, err := schema.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	embedded = len(migs)
	if applied != embedded {
		t.Errorf("postline_schema_migrations has %d rows, want %d (one per embedded migration)", applied, embedded)
	}
	var tables int
	if err := pool.QueryRow(t.Context(),
		"SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = 'postline_messages'").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 1 {
		t.Errorf("postline_messages exists %d times in the schema, want 1", tables)
	}
}

func TestMigrateWithoutSchema(t *testing.T) {
	t.Parallel()
	url, _ := testenv.NewSchema(t)
	pool := openPool(t, strings.Replace(url, "search_path=", "search_path=missing_", 1), 1)
	if err := schema.Migrate(t.Context(), pool); err == nil || !strings.Contains(err.Error(), "no existing schema") {
		t.Errorf("Migrate without a schema: %v, want a no-schema error", err)
	}
}

func openPool(t *testing.T, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
