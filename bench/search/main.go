// Command search is the console's search benchmark behind `make bench`:
// how fast internal/mailquery finds mail by recipient, and shows one mail's
// life, over 10,000,000 mails in the real schema on the local stack's
// PostgreSQL (issue 31).
//
// It seeds, in a schema of its own (-schema, bench_search), -mails mails as
// a service that sent them over 30 days leaves them (seed_sql.go): 1 to 3
// recipients each, addresses at five big webmail domains, 200 company ones
// and 100,000 small ones, 5,000 customers that recur in many mails, 40
// tenants, mostly sent and delivered with some bounced, failed, dead and
// suppressed, and the indexed events (with a few dead webhook deliveries)
// of every -events-every-th mail. The schema's migrations are applied
// first; the tables' indexes are dropped for the load and built again from
// their definitions after it, then the tables are vacuumed and analyzed.
// Seeding 10M mails takes tens of minutes, so the schema is kept, with a
// marker row of the seed's version and size: a later run re-uses it when
// they match (applying the tree's newer migrations to it), and seeds again
// when not or with -reseed. -drop removes it at the end.
//
// It then times, sequentially through mailquery.Reader on a pool built as
// postctl's (internal/pgpool), after -warmup untimed rounds, -queries
// recipient searches (the first page, 50 mails) of five kinds in turn: a
// rare address, a recurring customer's address, a big domain, a company
// domain and a small domain, every address and domain in a case the rows do
// not all have; and -lives calls of Life for random mails with events. It
// runs EXPLAIN once for each kind first and fails when a search does not
// start from its index (migration 0021): postline_recipients_address_idx
// for an address, postline_recipients_domain_idx for a domain.
//
// The report gives p50, p99 and max per kind, and PASSes when every search
// kind's p99 is within -search-p99 (100 ms) and Life's within -life-p99
// (50 ms).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postline/postline/bench/internal/benchcli"
	"github.com/postline/postline/bench/internal/benchenv"
)

type options struct {
	databaseURL string
	schema      string
	mails       int
	eventsEvery int
	queries     int
	lives       int
	warmup      int
	searchP99   time.Duration
	lifeP99     time.Duration
	reseed      bool
	drop        bool
	seedOnly    bool
}

func main() { benchcli.Main("search", run) }

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("search", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.databaseURL, "database-url", cmp.Or(os.Getenv("POSTLINE_TEST_DATABASE_URL"), benchenv.DefaultDatabaseURL),
		"PostgreSQL to measure on (the seeded schema is kept in it)")
	fs.StringVar(&o.schema, "schema", "bench_search", "the schema the seed is kept in")
	fs.IntVar(&o.mails, "mails", 10_000_000, "mails to seed")
	fs.IntVar(&o.eventsEvery, "events-every", 10, "seed the events of every n-th mail (1: of all)")
	fs.IntVar(&o.queries, "queries", 2000, "timed recipient searches, the kinds in turn")
	fs.IntVar(&o.lives, "lives", 2000, "timed Life calls")
	fs.IntVar(&o.warmup, "warmup", 200, "untimed searches and Life calls before the timed ones")
	fs.DurationVar(&o.searchP99, "search-p99", 100*time.Millisecond, "target: largest p99 of each recipient search kind")
	fs.DurationVar(&o.lifeP99, "life-p99", 50*time.Millisecond, "target: largest p99 of Life")
	fs.BoolVar(&o.reseed, "reseed", false, "seed again even when the kept schema matches")
	fs.BoolVar(&o.drop, "drop", false, "drop the seeded schema at the end")
	fs.BoolVar(&o.seedOnly, "seed-only", false, "seed (or check) the schema and stop")
	if err := benchcli.ParseFlags(fs, args); err != nil {
		return o, err
	}
	switch {
	case o.mails < 1000:
		return o, fmt.Errorf("-mails %d: want at least 1,000", o.mails)
	case o.eventsEvery < 1:
		return o, fmt.Errorf("-events-every %d: want at least 1", o.eventsEvery)
	case o.queries < len(searchKinds) || o.lives < 1 || o.warmup < 0:
		return o, fmt.Errorf("-queries must be at least %d, -lives positive, -warmup not negative", len(searchKinds))
	case o.searchP99 <= 0 || o.lifeP99 <= 0:
		return o, errors.New("-search-p99 and -life-p99 must be positive")
	case !plainName.MatchString(o.schema):
		return o, fmt.Errorf("-schema %q: want a plain name", o.schema)
	}
	return o, nil
}

// plainName is a schema name that needs no quoting.
var plainName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.drop {
		defer func() {
			if e := benchenv.DropSchema(context.WithoutCancel(ctx), o.databaseURL, o.schema); e != nil {
				err = errors.Join(err, e)
			} else {
				fmt.Fprintf(stderr, "search: dropped schema %s\n", o.schema)
			}
		}()
	}
	s, err := prepareSchema(ctx, o, stderr)
	if err != nil {
		return err
	}
	size, err := schemaSize(ctx, s.url)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "search: schema %s takes %s on disk\n", o.schema, bytesIEC(size))
	if o.seedOnly {
		return nil
	}
	res, err := measure(ctx, o, s, stderr)
	if err != nil {
		return err
	}
	res.size = size
	return report(stdout, o, res)
}

// schemaSize is the disk size of the schema's tables with their indexes
// and TOAST.
func schemaSize(ctx context.Context, url string) (int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int64
	err = conn.QueryRow(ctx, `SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::int8 FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'm')`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("schema size: %w", err)
	}
	return n, nil
}

func bytesIEC(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", n>>10)
}
