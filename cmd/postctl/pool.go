package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/pgpool"
)

// openPool returns a pool on --database-url, built like the worker's
// (package pgpool); a remote database reachable without TLS is warned about
// on stderr. It does not connect yet.
func openPool(ctx context.Context, g *globals) (*pgxpool.Pool, error) {
	cfg, warning, err := pgpool.ParseConfig(pgpool.Config{URL: g.databaseURL})
	if err != nil {
		return nil, fmt.Errorf("--database-url: %w", err)
	}
	if warning != "" {
		fmt.Fprintln(g.stderr, "postctl: warning:", warning)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("--database-url: %w", err)
	}
	return pool, nil
}

// connectPool is openPool followed by a ping, so that an unreachable
// database is reported as a --database-url error before a command starts.
func connectPool(ctx context.Context, g *globals) (*pgxpool.Pool, error) {
	pool, err := openPool(ctx, g)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("--database-url: connect: %w", err)
	}
	return pool, nil
}

// openOnPool connects to --database-url and builds what a command reads and
// writes on the pool with build; it returns that and a func that closes the
// connections.
func openOnPool[T any](ctx context.Context, g *globals, build func(*pgxpool.Pool) (T, error)) (T, func(), error) {
	var zero T
	pool, err := connectPool(ctx, g)
	if err != nil {
		return zero, nil, err
	}
	v, err := build(pool)
	if err != nil {
		pool.Close()
		return zero, nil, err
	}
	return v, pool.Close, nil
}
