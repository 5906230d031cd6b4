package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/postline/postline/bench/internal/benchfmt"

	"github.com/postline/postline/bench/internal/benchstats"
)

// report prints the table and returns an error when a kind misses its
// target.
func report(w io.Writer, o options, r results) error {
	fmt.Fprintf(w, "### Console search: recipient search and the mail page over %s mails\n\n", benchfmt.Count(int(r.seed.Mails)))
	how := "seeded by this run"
	if r.reused {
		how = "kept from an earlier run"
	}
	fmt.Fprintf(w, "Schema %s (%s, seed version %d, %s on disk; the seed took %v; the events of one mail in %d); "+
		"first pages of %d, sequential, after %d untimed rounds.\n\n",
		o.schema, how, r.seed.Version, bytesIEC(r.size), r.seed.Took.Round(time.Second), r.seed.EventsEvery, pageSize, o.warmup)
	fmt.Fprintln(w, "| kind | calls | p50 | p99 | max | mails (entries) a call | search index | target p99 | verdict |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|:---:|---:|:---:|")
	var misses []string
	row := func(kind string, target time.Duration, index string) {
		ds := r.times[kind]
		p99 := percentile(ds, 0.99)
		verdict := benchstats.Verdict(len(ds) > 0 && p99 <= target)
		if verdict == "FAIL" {
			misses = append(misses, fmt.Sprintf("%s p99 %s > %s", kind, benchfmt.Millis(p99), benchfmt.Millis(target)))
		}
		per := 0.0
		if len(ds) > 0 {
			per = float64(r.found[kind]) / float64(len(ds))
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %.1f | %s | ≤ %s | %s |\n", kind, len(ds), benchfmt.Millis(percentile(ds, 0.50)), benchfmt.Millis(p99),
			benchfmt.Millis(percentile(ds, 1)), per, index, benchfmt.Millis(target), verdict)
	}
	var all []time.Duration
	for _, kind := range searchKinds {
		index := "no"
		if r.indexed[kind] {
			index = "yes"
		}
		row(kind, o.searchP99, index)
		all = append(all, r.times[kind]...)
	}
	r.times["all recipient searches"] = all
	for _, k := range searchKinds {
		r.found["all recipient searches"] += r.found[k]
	}
	row("all recipient searches", o.searchP99, "-")
	row(kindLife, o.lifeP99, "-")
	verdict := benchstats.Verdict(len(misses) == 0)
	fmt.Fprintf(w, "\nRecipient search p99 ≤ %s for every kind, the mail page p99 ≤ %s: %s\n", benchfmt.Millis(o.searchP99), benchfmt.Millis(o.lifeP99), verdict)
	if len(misses) > 0 {
		return fmt.Errorf("missed: %s", strings.Join(misses, "; "))
	}
	return nil
}
