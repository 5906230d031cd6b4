package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/pgpool"
)

// pageSize is the console's first page.
const pageSize = 50

// kindLife is the report's row of Life.
const kindLife = "mail page (Life)"

// results are what a run measured.
type results struct {
	seed marker
	// reused says the kept schema was used rather than seeded now.
	reused bool
	size   int64
	// times holds the timed calls per kind.
	times map[string][]time.Duration
	// found is the mails the timed searches of each kind listed.
	found map[string]int
	// plans are the EXPLAIN output of one call of each kind.
	plans map[string]string
	// indexed says which kinds' plans use the address index.
	indexed map[string]bool
}

// measure picks the queries, checks their plans and times them.
func measure(ctx context.Context, o options, s seeded, log io.Writer) (results, error) {
	res := results{seed: s.marker, reused: s.reused, times: map[string][]time.Duration{}, found: map[string]int{},
		plans: map[string]string{}, indexed: map[string]bool{}}
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 31))
	perKind := (o.queries + len(searchKinds) - 1) / len(searchKinds)
	timed, err := pick(ctx, conn, rng, o, max(perKind, o.lives))
	if err != nil {
		return res, err
	}
	warm, err := pick(ctx, conn, rng, o, max(o.warmup, 1))
	if err != nil {
		return res, err
	}

	cfg, _, err := pgpool.ParseConfig(pgpool.Config{URL: s.url})
	if err != nil {
		return res, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	reader, err := mailquery.New(pool)
	if err != nil {
		return res, err
	}

	// The plans, once per kind, before anything is timed.
	var misses []string
	for _, kind := range searchKinds {
		f := mailquery.Filter{Recipient: timed.search[kind][0], Limit: pageSize}
		plan, err := reader.ExplainFind(ctx, f, false)
		if err != nil {
			return res, err
		}
		res.plans[kind] = fmt.Sprintf("-- %s: %s\n%s", kind, f.Recipient, plan)
		res.indexed[kind] = strings.Contains(plan, searchIndex(kind)) && !strings.Contains(plan, "Seq Scan on postline_recipients")
		fmt.Fprintf(log, "search: plan of a %s search (%s):\n%s\n", kind, f.Recipient, plan)
		if !res.indexed[kind] {
			misses = append(misses, kind+" ("+searchIndex(kind)+")")
		}
	}
	plan, err := reader.ExplainLife(ctx, timed.lives[0], false)
	if err != nil {
		return res, err
	}
	res.plans[kindLife] = plan
	fmt.Fprintf(log, "search: plans of Life (%s):\n%s\n", timed.lives[0], plan)
	if len(misses) > 0 {
		return res, fmt.Errorf("the recipient lookup does not use its index for: %s (plans above)",
			strings.Join(misses, ", "))
	}

	fmt.Fprintf(log, "search: warm-up: %d searches and %d Life calls\n", o.warmup, o.warmup)
	for i := range o.warmup {
		kind := searchKinds[i%len(searchKinds)]
		if _, err := reader.Find(ctx, mailquery.Filter{Recipient: warm.search[kind][i/len(searchKinds)], Limit: pageSize}); err != nil {
			return res, err
		}
		if _, err := reader.Life(ctx, warm.lives[i]); err != nil {
			return res, err
		}
	}
	fmt.Fprintf(log, "search: timing %d searches and %d Life calls, one after the other\n", o.queries, o.lives)
	start := time.Now()
	for i := range max(o.queries, o.lives) {
		if i < o.queries {
			kind := searchKinds[i%len(searchKinds)]
			recipient := timed.search[kind][i/len(searchKinds)]
			t := time.Now()
			page, err := reader.Find(ctx, mailquery.Filter{Recipient: recipient, Limit: pageSize})
			d := time.Since(t)
			if err != nil {
				return res, err
			}
			if len(page.Mails) == 0 {
				return res, fmt.Errorf("a %s search for %s found nothing: the seed or the search is wrong", kind, recipient)
			}
			res.times[kind] = append(res.times[kind], d)
			res.found[kind] += len(page.Mails)
		}
		if i < o.lives {
			t := time.Now()
			life, err := reader.Life(ctx, timed.lives[i])
			d := time.Since(t)
			if err != nil {
				return res, err
			}
			if len(life.Entries) < 2 || len(life.Mail.Recipients) == 0 {
				return res, fmt.Errorf("the life of %s has %d entries and %d recipients: the seed wrote events and recipients for it",
					timed.lives[i], len(life.Entries), len(life.Mail.Recipients))
			}
			res.times[kindLife] = append(res.times[kindLife], d)
			res.found[kindLife] += len(life.Entries)
		}
		if (i+1)%500 == 0 {
			fmt.Fprintf(log, "search: %d rounds timed (%v)\n", i+1, time.Since(start).Round(time.Millisecond))
		}
	}
	return res, nil
}

// percentile is the q-th quantile of ds by the nearest rank (the value
// below which a share q of the calls fall), 0 for none.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(q*float64(len(s)) + 0.999999999)
	return s[min(max(rank, 1), len(s))-1]
}
