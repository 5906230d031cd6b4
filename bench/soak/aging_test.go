package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/internal/testenv"
)

// TestSteadyAger runs the steady aging against PostgreSQL on a table with
// the columns it touches, and checks which rows it ages, and that it ages
// each once.
func TestSteadyAger(t *testing.T) {
	testenv.Integration(t, "PostgreSQL")
	base := testenv.DatabaseURL()
	ctx := context.Background()
	schema := "soak_aging_" + benchenv.RandomHex(4)
	u, err := benchenv.CreateSchema(ctx, base, schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := benchenv.DropSchema(context.Background(), base, schema); err != nil {
			t.Error(err)
		}
	})
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`CREATE TABLE postline_messages (message_id text PRIMARY KEY, status text NOT NULL,
		created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now())`)
	exec(`CREATE INDEX ON postline_messages (created_at)`)
	exec(`INSERT INTO postline_messages (message_id, status, created_at, updated_at)
		VALUES ('before', 'sent', now() - interval '10 seconds', now() - interval '10 seconds')`)

	const lag = time.Second
	g := &steadyAger{pool: pool, shift: time.Hour, lag: lag, every: 100 * time.Millisecond}
	stop := make(chan struct{})
	type result struct {
		a   *aging
		err error
	}
	done := make(chan result, 1)
	go func() {
		a, err := g.run(ctx, stop, 0, 1)
		done <- result{a, err}
	}()
	time.Sleep(200 * time.Millisecond) // the aging has begun
	// Rows claimed now: one sent at once, one sent within the lag of its
	// range coming up (still aged), one sent too late for any range (never
	// aged), one never sent.
	exec(`INSERT INTO postline_messages (message_id, status) VALUES
		('sent', 'sent'), ('late', 'sending'), ('too late', 'sending'), ('in flight', 'sending')`)
	time.Sleep(1400 * time.Millisecond)
	exec(`UPDATE postline_messages SET status = 'sent' WHERE message_id = 'late'`)
	time.Sleep(1600 * time.Millisecond)
	exec(`UPDATE postline_messages SET status = 'sent' WHERE message_id = 'too late'`)
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}

	for _, tc := range []struct {
		id   string
		aged bool
	}{
		{"before", false}, // created before the aging began
		{"sent", true},
		{"late", true},
		{"too late", false},
		{"in flight", false},
	} {
		// Aged once, its timestamps are an hour and a few seconds old;
		// twice, two hours.
		var age time.Duration
		var updatedMoved bool
		err := pool.QueryRow(ctx, `SELECT extract(epoch FROM now() - created_at)::float8 * interval '1 second',
			updated_at < now() - interval '59 minutes' FROM postline_messages WHERE message_id = $1`, tc.id).Scan(&age, &updatedMoved)
		if err != nil {
			t.Fatalf("%s: %v", tc.id, err)
		}
		wasAged := age > time.Hour && age < time.Hour+time.Minute
		if wasAged != tc.aged || updatedMoved != tc.aged || (!tc.aged && age > time.Minute) {
			t.Errorf("row %q is %s old (updated_at moved: %v); want aged once: %v", tc.id, age.Round(time.Second), updatedMoved, tc.aged)
		}
	}
	if r.a.Rows != 2 || r.a.Statements < 2 || r.a.Took <= 0 || r.a.Longest > r.a.Took || r.a.Mode != agingSteady || g.rows.Load() != 2 {
		t.Errorf("aging %+v (progress %d); want 2 rows in at least 2 statements", r.a, g.rows.Load())
	}
}
