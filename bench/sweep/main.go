// Command sweep is the unconfirmed sweep's benchmark behind `make bench`:
// what one pass of the sweep costs as the mail awaiting a report grows,
// against the real PostgreSQL of the local stack.
//
// For each size of -sizes (10,000, 100,000 and 1,000,000 by default) it
// creates a schema of its own, migrates it and writes that many silent
// recipients: accepted recipients no report resolved, one per mail, spread
// over a 30-day retention as a fleet whose relays send no success notices
// leaves them: 29 in 30 of them of mail whose window passed and which an
// earlier pass marked unconfirmed, the rest of mail sent in the last 24
// hours, still in its window. The sweep's place is where the passes that
// marked them left it. The rows are written by generate_series in SQL, then
// VACUUM ANALYZE leaves the tables as autovacuum would.
//
// On top come (-passes + 1) x -batch recipients whose window has just
// passed: what came due in the interval before each pass. It times the read
// the sweep made before (the query of the removed DueUnconfirmed, which
// walked from the oldest accepted recipient past every marked one) three
// times on each size, then -passes passes of
// idempotency.Store.SweepUnconfirmed with Limit -batch on each (after one
// untimed pass), each handling -batch recipients (their events counted, not
// published: Kafka is not what is measured). The sizes take turns, pass by
// pass, so that whatever else the machine does falls on all of them alike.
//
// The table gives, per size, the median pass, its ratio to the smallest
// size's, and the old read; the run PASSes when every ratio is within
// -target (1.5x). The schemas are dropped at the end (-keep leaves them).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/postline/postline/bench/internal/benchfmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/bench/internal/benchcli"
	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/bench/internal/benchstats"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/schema"
)

// retention and window are the layout of the silent recipients: the
// default POSTLINE_RETENTION and POSTLINE_CONFIRM_WINDOW.
const (
	retention = 30 * 24 * time.Hour
	window    = 24 * time.Hour
)

type options struct {
	databaseURL string
	sizes       []int
	batch       int
	passes      int
	target      float64
	keep        bool
}

func main() { benchcli.Main("sweep", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	sizes := fs.String("sizes", "10000,100000,1000000", "silent recipients to measure at, ascending, comma-separated")
	fs.StringVar(&o.databaseURL, "database-url", cmp.Or(os.Getenv("POSTLINE_TEST_DATABASE_URL"),
		"postgres://postline:postline@127.0.0.1:5432/postline?sslmode=disable"), "PostgreSQL to measure on (a schema of its own is created)")
	fs.IntVar(&o.batch, "batch", 1000, "recipients that come due before each pass, and the pass's limit")
	fs.IntVar(&o.passes, "passes", 15, "timed passes per size (the median is reported)")
	fs.Float64Var(&o.target, "target", 1.5, "largest accepted ratio of a size's pass to the smallest size's")
	fs.BoolVar(&o.keep, "keep", false, "leave the schemas and their rows")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 30 || (len(o.sizes) > 0 && n <= o.sizes[len(o.sizes)-1]) {
			return fmt.Errorf("-sizes %q: want ascending counts of at least 30", *sizes)
		}
		o.sizes = append(o.sizes, n)
	}
	if o.batch < 1 || o.passes < 1 || o.target < 1 {
		return errors.New("-batch and -passes must be positive, -target at least 1")
	}

	prefix := "bench_sweep_" + benchenv.RandomHex(4)
	var sizesAt []*sized
	defer func() {
		for _, z := range sizesAt {
			z.pool.Close()
			if !o.keep {
				if err := benchenv.DropSchema(context.WithoutCancel(ctx), o.databaseURL, z.schema); err != nil {
					fmt.Fprintln(stderr, "sweep:", err)
				}
			}
		}
	}()
	fmt.Fprintf(stderr, "sweep: schemas %s_*; sizes %v; %d passes of %d recipients each\n", prefix, o.sizes, o.passes, o.batch)
	for _, size := range o.sizes {
		z, err := prepare(ctx, o, fmt.Sprintf("%s_%d", prefix, size), size, stderr)
		if z != nil {
			sizesAt = append(sizesAt, z)
		}
		if err != nil {
			return fmt.Errorf("at %d silent recipients: %w", size, err)
		}
	}
	results := make([]result, len(sizesAt))
	for i, z := range sizesAt {
		results[i].size = z.size
	}
	for range 3 {
		for i, z := range sizesAt {
			d, err := z.oldRead(ctx)
			if err != nil {
				return fmt.Errorf("at %d silent recipients: %w", z.size, err)
			}
			results[i].old = append(results[i].old, d)
		}
	}
	// The first pass of each warms the caches and the prepared statements.
	for pass := range o.passes + 1 {
		for i, z := range sizesAt {
			d, err := z.pass(ctx)
			if err != nil {
				return fmt.Errorf("at %d silent recipients, pass %d: %w", z.size, pass, err)
			}
			if pass > 0 {
				results[i].passes = append(results[i].passes, d)
			}
		}
	}
	for _, r := range results {
		fmt.Fprintf(stderr, "sweep: %d silent recipients: pass %v (median of %d), old read %v\n", r.size,
			median(r.passes).Round(time.Microsecond), len(r.passes), median(r.old).Round(time.Microsecond))
	}
	return report(stdout, o, results)
}

// sized is one size's schema, filled.
type sized struct {
	o      options
	size   int
	schema string
	pool   *pgxpool.Pool
	store  *idempotency.Store
}

// prepare creates and migrates schema and fills it: size silent recipients
// and what comes due before each pass. It returns the sized schema, to be
// dropped, as soon as it exists.
func prepare(ctx context.Context, o options, schemaName string, size int, log io.Writer) (*sized, error) {
	start := time.Now()
	url, err := benchenv.CreateSchema(ctx, o.databaseURL, schemaName)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("connect: %w", err), benchenv.DropSchema(context.WithoutCancel(ctx), o.databaseURL, schemaName))
	}
	z := &sized{o: o, size: size, schema: schemaName, pool: pool}
	if err := schema.Migrate(ctx, pool); err != nil {
		return z, err
	}
	if z.store, err = idempotency.New(idempotency.Config{Owner: "bench-sweep"}, pool, nil, nil); err != nil {
		return z, err
	}
	var t0 time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&t0); err != nil {
		return z, err
	}
	if err := z.fill(ctx, t0); err != nil {
		return z, err
	}
	fmt.Fprintf(log, "sweep: %d silent recipients and %d due written in %v\n", size, (o.passes+1)*o.batch, time.Since(start).Round(time.Second))
	return z, nil
}

type result struct {
	size   int
	passes []time.Duration
	old    []time.Duration
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// fill writes the silent recipients, the due ones after them, and the
// sweep's place between the two, where the passes that marked the silent
// mail left it; t0 is the database's now.
func (z *sized) fill(ctx context.Context, t0 time.Time) error {
	// 29 in 30 marked, spread over the retention before the place; the
	// rest in their window, spread over its last 18 hours (none comes due
	// while the benchmark runs). In chunks, so that one statement holds a
	// bounded batch of rows.
	inWindow := z.size / 30
	const chunk = 100_000
	for _, part := range []struct {
		prefix   string
		n        int
		from, to time.Time
		marked   bool
	}{
		{"marked-", z.size - inWindow, t0.Add(-retention), t0.Add(-2 * time.Hour), true},
		{"open-", inWindow, t0.Add(window / 4), t0.Add(window), false},
	} {
		step := part.to.Sub(part.from).Seconds() / float64(max(part.n, 1))
		for done := 0; done < part.n; done += chunk {
			first := part.from.Add(time.Duration(float64(time.Second) * step * float64(done)))
			if _, err := z.pool.Exec(ctx, fillSQL, part.prefix, done, min(chunk, part.n-done), first, step, part.marked); err != nil {
				return fmt.Errorf("write silent mail: %w", err)
			}
		}
	}
	// What comes due before each pass: one a millisecond, an hour ago.
	due := (z.o.passes + 1) * z.o.batch
	if _, err := z.pool.Exec(ctx, fillSQL, "due-", 0, due, t0.Add(-time.Hour), time.Millisecond.Seconds(), false); err != nil {
		return fmt.Errorf("write the due mail: %w", err)
	}
	if _, err := z.pool.Exec(ctx, `UPDATE postline_unconfirmed_sweep SET due_by = $1, due_message_id = '', due_idx = -1`,
		t0.Add(-2*time.Hour)); err != nil {
		return err
	}
	for _, table := range []string{"postline_messages", "postline_recipients"} {
		if _, err := z.pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
			return fmt.Errorf("vacuum %s: %w", table, err)
		}
	}
	return nil
}

// pass times one pass of the sweep, which must handle a batch.
func (z *sized) pass(ctx context.Context) (time.Duration, error) {
	var got int
	t := time.Now()
	pass, err := z.store.SweepUnconfirmed(ctx, idempotency.UnconfirmedSweep{Limit: z.o.batch},
		func(_ context.Context, due []idempotency.Recipient) error { got = len(due); return nil })
	d := time.Since(t)
	if err != nil {
		return 0, err
	}
	if !pass.Swept || got != z.o.batch || pass.Marked != z.o.batch {
		return 0, fmt.Errorf("pass = %+v with %d recipients; want %d due handled", pass, got, z.o.batch)
	}
	return d, nil
}

// fillSQL writes $3 mails of one accepted recipient each, named $1 and a
// number from $2 on: the i-th one's window ends at $4 + i x $5 seconds, and it
// was sent a window before; $6 marks them unconfirmed, as an earlier pass
// did.
const fillSQL = `
WITH m AS (
	INSERT INTO postline_messages (message_id, status, version, attempt, payload_hash, provider, tenant, stream,
		created_at, updated_at, sent_at, confirm_by, confirmation, confirmed_at)
	SELECT '<' || $1::text || i || '@bench>', 'sent', 2, 1, '\x00'::bytea, 'relay', 'bench', 'bulk',
		c - interval '24 hours', c - interval '24 hours', c - interval '24 hours', c,
		CASE WHEN $6::bool THEN 'unconfirmed' END, CASE WHEN $6::bool THEN c END
	FROM generate_series($2::int8, $2::int8 + $3::int8 - 1) AS i,
		LATERAL (SELECT $4::timestamptz + make_interval(secs => (i - $2::int8) * $5::float8) AS c) AS t
	RETURNING message_id, confirm_by
)
INSERT INTO postline_recipients (message_id, idx, ref, address, state, attempt, provider, accepted_at, confirm_by, updated_at)
SELECT message_id, 0, substring(sha256(convert_to(message_id, 'UTF8')) FROM 1 FOR 8), 'r@example.com', 'accepted', 1,
	'relay', confirm_by - interval '24 hours', confirm_by, confirm_by - interval '24 hours'
FROM m`

// oldReadSQL is the read of the sweep before the place (the removed
// Store.DueUnconfirmed): from the oldest accepted recipient, past every one
// of mail already marked.
const oldReadSQL = `SELECT r.message_id, r.idx
	FROM postline_recipients r JOIN postline_messages m ON m.message_id = r.message_id
	WHERE r.state = 'accepted' AND r.confirm_by < now()
		AND m.confirm_by IS NOT NULL AND m.confirmation IS NULL AND m.confirm_by < now()
	ORDER BY r.confirm_by, r.message_id, r.idx LIMIT $1`

// oldRead times the old read, which must find a batch.
func (z *sized) oldRead(ctx context.Context) (time.Duration, error) {
	t := time.Now()
	rows, err := z.pool.Query(ctx, oldReadSQL, z.o.batch)
	if err != nil {
		return 0, fmt.Errorf("old read: %w", err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("old read: %w", err)
	}
	if n != z.o.batch {
		return 0, fmt.Errorf("the old read found %d recipients, want %d", n, z.o.batch)
	}
	return time.Since(t), nil
}

// report prints the table and returns an error when a ratio misses the
// target.
func report(w io.Writer, o options, results []result) error {
	fmt.Fprintf(w, "### Unconfirmed sweep: one pass of %d due recipients against the silent ones\n\n", o.batch)
	fmt.Fprintf(w, "| silent recipients | pass (median of %d) | ratio to %s | before: the old sweep's read (median of 3) |\n", o.passes, benchfmt.Count(results[0].size))
	fmt.Fprintln(w, "|---:|---:|---:|---:|")
	first := median(results[0].passes)
	worst := 0.0
	for _, r := range results {
		ratio := float64(median(r.passes)) / float64(first)
		worst = max(worst, ratio)
		fmt.Fprintf(w, "| %s | %s | %.2fx | %s |\n", benchfmt.Count(r.size), benchfmt.Millis(median(r.passes)), ratio, benchfmt.Millis(median(r.old)))
	}
	verdict := benchstats.Verdict(worst <= o.target)
	fmt.Fprintf(w, "\nFlat within %.1fx from %s to %s silent recipients: %.2fx, %s\n", o.target, benchfmt.Count(results[0].size),
		benchfmt.Count(results[len(results)-1].size), worst, verdict)
	if verdict == "FAIL" {
		return fmt.Errorf("a pass at %s silent recipients took %.2fx the one at %s, above %.1fx",
			benchfmt.Count(results[len(results)-1].size), worst, benchfmt.Count(results[0].size), o.target)
	}
	return nil
}
