package schema

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"math"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/backoff"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one embedded SQL file, named NNNN_description.sql.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads the SQL files of fsys's migrations directory, ordered
// by version, and rejects badly named files and duplicate versions.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var migs []migration
	seen := make(map[int]string)
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || path.Ext(name) != ".sql" {
			continue
		}
		prefix, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_description.sql", name)
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("migration %s: version %d already used by %s", name, v, other)
		}
		seen[v] = name
		b, err := fs.ReadFile(fsys, path.Join("migrations", name))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		migs = append(migs, migration{version: v, name: name, sql: string(b)})
	}
	sort.Slice(migs, func(i, j int) bool { return migs[i].version < migs[j].version })
	return migs, nil
}

// migrateLockKey is the advisory lock key for migrating schema: derived from
// the schema name, so migrations of different schemas (parallel tests) do not
// wait for each other.
func migrateLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("postline.schema.migrate:" + schema))
	return int64(h.Sum64())
}

// Migrate applies the embedded migrations that the connection's current schema
// (the first existing schema on search_path) has not seen yet. It runs in one
// transaction holding an advisory lock keyed on the schema name, so concurrent
// callers (several workers starting at once) apply each migration exactly once
// and a failed migration leaves nothing behind. Calling it again is a no-op.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return migrateTo(ctx, pool, math.MaxInt)
}

// migrateTo is Migrate, applying only the migrations up to version last:
// tests use it to write data as an older version left it before applying
// the rest.
func migrateTo(ctx context.Context, pool *pgxpool.Pool, last int) error {
	migs, err := loadMigrations(migrationFS)
	if err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: begin: %w", err)
	}
	// Rollback after Commit is a no-op; on failure it also unlocks.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	var schema *string
	if err := tx.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return fmt.Errorf("migrate: current schema: %w", err)
	}
	if schema == nil {
		return errors.New("migrate: no existing schema on the connection's search_path")
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey(*schema)); err != nil {
		return fmt.Errorf("migrate schema %s: advisory lock: %w", *schema, err)
	}
	// Statements after the lock see what a concurrent migrator committed.
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS postline_schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("migrate schema %s: create version table: %w", *schema, err)
	}
	rows, err := tx.Query(ctx, "SELECT version FROM postline_schema_migrations")
	if err != nil {
		return fmt.Errorf("migrate schema %s: read versions: %w", *schema, err)
	}
	applied := make(map[int]bool)
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("migrate schema %s: read versions: %w", *schema, err)
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("migrate schema %s: read versions: %w", *schema, err)
	}
	for _, m := range migs {
		if applied[m.version] || m.version > last {
			continue
		}
		// Without arguments pgx uses the simple protocol: a file may hold
		// several statements.
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("migrate schema %s: apply %s: %w", *schema, m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO postline_schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
			return fmt.Errorf("migrate schema %s: note %s: %w", *schema, m.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate schema %s: commit: %w", *schema, err)
	}
	return nil
}

// Migration names one embedded migration.
type Migration struct {
	Version int
	Name    string
}

// Embedded lists the embedded migrations in the order Migrate applies them.
func Embedded() ([]Migration, error) {
	migs, err := loadMigrations(migrationFS)
	if err != nil {
		return nil, err
	}
	out := make([]Migration, len(migs))
	for i, m := range migs {
		out[i] = Migration{Version: m.version, Name: m.name}
	}
	return out, nil
}

// MigrateWhenReady is Migrate, made again with a growing wait until
// PostgreSQL answers or ctx ends: a service that starts before its
// database waits for it. The first failure is logged.
func MigrateWhenReady(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	// Stopped, it returns ctx's error: not a database that does not answer.
	return backoff.Policy{First: 200 * time.Millisecond, Max: 5 * time.Second,
		OnWait: func(err error, attempt int, _ time.Duration) {
			if attempt == 1 {
				logger.Error("cannot apply migrations; trying again until postgres answers", "error", err)
			}
		}}.Do(ctx, func() error { return Migrate(ctx, pool) })
}
