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
