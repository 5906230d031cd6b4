package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/internal/schema"
)

// seedVersion names the shape seedChunkSQL writes. Change it with the
// shape: a kept schema of another version is seeded again. 2: recipient
// rows have created_at (migration 0021).
const seedVersion = 2

// seedTables are the tables the seed fills, whose indexes are dropped for
// the load and built again after it.
var seedTables = []string{"postline_messages", "postline_recipients", "postline_mail_events", "postline_webhook_queue"}

// seedChunk is how many mails one statement writes.
const seedChunk = 250_000

// marker is what the seeded schema's bench_search_seed row says.
type marker struct {
	Version     int
	Mails       int64
	EventsEvery int
	SeededAt    time.Time
	Took        time.Duration
}

// seeded is the benchmark's schema, filled and migrated.
type seeded struct {
	url    string // the database URL with search_path set to the schema
	marker marker
	reused bool
}

// prepareSchema returns the seeded schema o asks for: the kept one when
// its marker matches, else a new one (a kept one that does not match is
// dropped first). Either way the migrations of this tree are applied to
// it, so that it is the real schema.
func prepareSchema(ctx context.Context, o options, log io.Writer) (seeded, error) {
	conn, err := pgx.Connect(ctx, o.databaseURL)
	if err != nil {
		return seeded{}, fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	m, found, err := readMarker(ctx, conn, o.schema)
	if err != nil {
		return seeded{}, err
	}
	want := marker{Version: seedVersion, Mails: int64(o.mails), EventsEvery: o.eventsEvery}
	switch {
	case found && !o.reseed && m.Version == want.Version && m.Mails == want.Mails && m.EventsEvery == want.EventsEvery:
		fmt.Fprintf(log, "search: re-using schema %s: %d mails seeded %s (in %v)\n", o.schema, m.Mails,
			m.SeededAt.UTC().Format(time.RFC3339), m.Took.Round(time.Second))
		url, err := benchenv.SchemaURL(o.databaseURL, o.schema)
		if err != nil {
			return seeded{}, err
		}
		if err := migrate(ctx, url); err != nil {
			return seeded{}, err
		}
		// The query picker's helpers, as this tree defines them.
		if _, err := conn.Exec(ctx, "SET search_path TO "+pgx.Identifier{o.schema}.Sanitize()+"; "+seedHelpersSQL); err != nil {
			return seeded{}, fmt.Errorf("define the seed's helpers: %w", err)
		}
		return seeded{url: url, marker: m, reused: true}, nil
	case found:
		fmt.Fprintf(log, "search: schema %s holds seed version %d of %d mails (events every %d); want version %d of %d (every %d): seeding again\n",
			o.schema, m.Version, m.Mails, m.EventsEvery, want.Version, want.Mails, want.EventsEvery)
	}
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{o.schema}.Sanitize()+" CASCADE"); err != nil {
		return seeded{}, fmt.Errorf("drop schema %s: %w", o.schema, err)
	}
	url, err := benchenv.CreateSchema(ctx, o.databaseURL, o.schema)
	if err != nil {
		return seeded{}, err
	}
	start := time.Now()
	if err := seed(ctx, url, o, log); err != nil {
		return seeded{}, fmt.Errorf("seed %s: %w (the schema is left half seeded: the next run seeds it again)", o.schema, err)
	}
	want.Took = time.Since(start)
	if want.SeededAt, err = writeMarker(ctx, url, want); err != nil {
		return seeded{}, err
	}
	fmt.Fprintf(log, "search: seeded %d mails in %v\n", o.mails, want.Took.Round(time.Second))
	return seeded{url: url, marker: want}, nil
}

// readMarker reads the marker of schemaName; found is false when the
// schema or its marker does not exist (a seed that did not finish).
func readMarker(ctx context.Context, conn *pgx.Conn, schemaName string) (m marker, found bool, err error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass(quote_ident($1) || '.bench_search_seed') IS NOT NULL`, schemaName).Scan(&exists); err != nil {
		return m, false, fmt.Errorf("look for the seed marker: %w", err)
	}
	if !exists {
		return m, false, nil
	}
	var took float64
	err = conn.QueryRow(ctx, `SELECT version, mails, events_every, seeded_at, seed_seconds FROM `+
		pgx.Identifier{schemaName, "bench_search_seed"}.Sanitize()).Scan(&m.Version, &m.Mails, &m.EventsEvery, &m.SeededAt, &took)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, false, nil
	}
	if err != nil {
		return m, false, fmt.Errorf("read the seed marker: %w", err)
	}
	m.Took = time.Duration(took * float64(time.Second))
	return m, true, nil
}

// writeMarker records a finished seed; it is written last, so that a seed
// cut short has none.
func writeMarker(ctx context.Context, url string, m marker) (time.Time, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var at time.Time
	err = conn.QueryRow(ctx, `INSERT INTO bench_search_seed (version, mails, events_every, seed_seconds)
VALUES ($1, $2, $3, $4) RETURNING seeded_at`, m.Version, m.Mails, m.EventsEvery, m.Took.Seconds()).Scan(&at)
	if err != nil {
		return time.Time{}, fmt.Errorf("write the seed marker: %w", err)
	}
	return at, nil
}

// migrate applies this tree's migrations to the schema of url.
func migrate(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := schema.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// seed migrates the empty schema of url and fills it: the tables'
// indexes (primary keys included) are read from the catalog and dropped,
// the rows written by seedChunkSQL in chunks, and the indexes built again
// from their definitions, so that they are the migrations' own.
func seed(ctx context.Context, url string, o options, log io.Writer) error {
	if err := migrate(ctx, url); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range []string{
		// The load's commits need not wait for the disk: a crash loses
		// the seed, whose marker is then missing.
		"SET synchronous_commit = off",
		"SET maintenance_work_mem = '512MB'",
		seedHelpersSQL,
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("prepare the load: %w", err)
		}
	}
	indexes, err := dropIndexes(ctx, conn)
	if err != nil {
		return err
	}
	var t0 time.Time
	if err := conn.QueryRow(ctx, "SELECT now()").Scan(&t0); err != nil {
		return err
	}
	start := time.Now()
	for from := 1; from <= o.mails; from += seedChunk {
		to := min(from+seedChunk-1, o.mails)
		if _, err := conn.Exec(ctx, seedChunkSQL, from, to, o.mails, t0, o.eventsEvery); err != nil {
			return fmt.Errorf("write mails %d to %d: %w", from, to, err)
		}
		elapsed := time.Since(start)
		fmt.Fprintf(log, "search: seed: %d of %d mails written (%v, about %v left)\n", to, o.mails,
			elapsed.Round(time.Second), (time.Duration(float64(elapsed)/float64(to)*float64(o.mails)) - elapsed).Round(time.Second))
	}
	for _, ix := range indexes {
		t := time.Now()
		if _, err := conn.Exec(ctx, ix.create); err != nil {
			return fmt.Errorf("build %s: %w", ix.name, err)
		}
		fmt.Fprintf(log, "search: seed: built %s (%v)\n", ix.name, time.Since(t).Round(time.Second))
	}
	for _, table := range seedTables {
		t := time.Now()
		if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) "+table); err != nil {
			return fmt.Errorf("vacuum %s: %w", table, err)
		}
		fmt.Fprintf(log, "search: seed: vacuumed and analyzed %s (%v)\n", table, time.Since(t).Round(time.Second))
	}
	return nil
}

// index is one index of a seeded table and the statement that builds it.
type index struct {
	name, create string
	drop         string
}

// dropIndexes drops the indexes of seedTables and returns how to build
// them again: an index of a constraint (a primary key) as the constraint,
// every other one by its definition.
func dropIndexes(ctx context.Context, conn *pgx.Conn) ([]index, error) {
	rows, err := conn.Query(ctx, `
SELECT i.relname,
	CASE WHEN c.conname IS NOT NULL
		THEN format('ALTER TABLE %I ADD CONSTRAINT %I %s', t.relname, c.conname, pg_get_constraintdef(c.oid))
		ELSE pg_get_indexdef(x.indexrelid) END,
	CASE WHEN c.conname IS NOT NULL
		THEN format('ALTER TABLE %I DROP CONSTRAINT %I', t.relname, c.conname)
		ELSE format('DROP INDEX %I', i.relname) END
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
LEFT JOIN pg_constraint c ON c.conindid = x.indexrelid AND c.conrelid = t.oid
WHERE t.relnamespace = current_schema()::regnamespace AND t.relname = ANY($1)
ORDER BY array_position($1, t.relname::text), c.conname IS NULL, i.relname`, seedTables)
	if err != nil {
		return nil, fmt.Errorf("read the indexes: %w", err)
	}
	indexes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
		var ix index
		err := r.Scan(&ix.name, &ix.create, &ix.drop)
		return ix, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the indexes: %w", err)
	}
	for _, ix := range indexes {
		if _, err := conn.Exec(ctx, ix.drop); err != nil {
			return nil, fmt.Errorf("drop %s for the load: %w", ix.name, err)
		}
	}
	return indexes, nil
}
