package main

import (
	"testing"
	"time"

	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
)

func TestNoIndexTarget(t *testing.T) {
	// 10,000 mails in 2 s: 5,000 mails/s.
	row := func(variant string, span time.Duration) result {
		return result{Variant: variant, Mails: 10000, Span: span,
			Stack: stackCPU{Measured: true, Own: time.Second, Postgres: 500 * time.Millisecond}}
	}
	tests := []struct {
		name     string
		rows     []result
		verdict  string
		measured string
	}{
		{name: "as fast", rows: []result{row("postline", 2*time.Second), row("noindex", 2*time.Second)},
			verdict: "PASS", measured: "1.00x (5000 vs 5000 mails/s; whole-stack CPU per mail 1.00x)"},
		{name: "0.95x is met", rows: []result{row("postline", 2*time.Second), row("noindex", 1900*time.Millisecond)},
			verdict: "PASS", measured: "0.95x (5000 vs 5263 mails/s; whole-stack CPU per mail 1.00x)"},
		{name: "slower", rows: []result{row("postline", 2200*time.Millisecond), row("noindex", 2*time.Second)},
			verdict: "FAIL", measured: "0.91x (4545 vs 5000 mails/s; whole-stack CPU per mail 1.00x)"},
		{name: "no noindex row", rows: []result{row("postline", 2*time.Second)}, verdict: "not measured", measured: "n/a"},
		{name: "no postline row", rows: []result{row("noindex", 2*time.Second)}, verdict: "not measured", measured: "n/a"},
		{name: "no span", rows: []result{row("postline", 0), row("noindex", 2*time.Second)}, verdict: "not measured", measured: "n/a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := noIndexTarget(tt.rows, "postline", "noindex")
			if got.verdict() != tt.verdict || got.Measured != tt.measured {
				t.Errorf("noIndexTarget = %q, %q; want %q, %q", got.verdict(), got.Measured, tt.verdict, tt.measured)
			}
		})
	}
}

// TestPrepareNoIndexDropsTheSearchIndexes checks, on the stack's
// PostgreSQL, that the noindex schema lacks both indexes and keeps lacking
// them when the worker migrates it again at its start.
func TestPrepareNoIndexDropsTheSearchIndexes(t *testing.T) {
	_, pool := testenv.NewSchema(t)
	ctx := t.Context()
	if err := prepareNoIndex(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var left []string
	rows, err := pool.Query(ctx, `SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()
		AND tablename = 'postline_recipients' AND indexname = ANY($1)`, noIndexIndexes)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		left = append(left, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("indexes left after prepareNoIndex and a migration: %v", left)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema()
		AND tablename = 'postline_recipients'`).Scan(&n); err != nil || n == 0 {
		t.Errorf("postline_recipients has %d indexes (%v): the schema was not migrated", n, err)
	}
}
