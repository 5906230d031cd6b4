package main

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/testenv"
)

func millis(ms ...int) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		out[i] = time.Duration(m) * time.Millisecond
	}
	return out
}

func TestPercentile(t *testing.T) {
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100 ms down to 1 ms
	}
	tests := []struct {
		name string
		ds   []time.Duration
		q    float64
		want time.Duration
	}{
		{"none", nil, 0.99, 0},
		{"one", millis(7), 0.99, 7 * time.Millisecond},
		{"median of three", millis(3, 1, 2), 0.5, 2 * time.Millisecond},
		{"p99 of 100 is the 99th", millis(hundred...), 0.99, 99 * time.Millisecond},
		{"p50 of 100 is the 50th", millis(hundred...), 0.50, 50 * time.Millisecond},
		{"max", millis(hundred...), 1, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := percentile(tt.ds, tt.q); got != tt.want {
			t.Errorf("%s: percentile(%v) = %v, want %v", tt.name, tt.q, got, tt.want)
		}
	}
}

func TestVaryDomainCaseKeepsTheLocalPartAndTheDomain(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	for range 200 {
		for _, in := range []string{"Customer.12@corp3.example", "@shop17.example.co", "u0a@Gmail.Example"} {
			got := varyDomainCase(rng, in)
			seen[got] = true
			want, err := mailquery.ParseRecipient(in)
			if err != nil {
				t.Fatal(err)
			}
			m, err := mailquery.ParseRecipient(got)
			if err != nil || m != want {
				t.Fatalf("varyDomainCase(%q) = %q, parsed %+v (%v); want %+v", in, got, m, err, want)
			}
		}
	}
	for _, want := range []string{"Customer.12@CORP3.EXAMPLE", "Customer.12@Corp3.Example", "@shop17.example.co", "u0a@gmail.example"} {
		if !seen[want] {
			t.Errorf("varyDomainCase never wrote %q", want)
		}
	}
}

func TestReport(t *testing.T) {
	fast := millis(1, 2, 3, 4, 5)
	res := func(slowKind string, slow time.Duration) results {
		r := results{seed: marker{Version: 1, Mails: 10_000_000, EventsEvery: 10, Took: 20 * time.Minute},
			reused: true, size: 10 << 30, times: map[string][]time.Duration{}, found: map[string]int{},
			indexed: map[string]bool{}}
		for _, k := range append(append([]string{}, searchKinds...), kindLife) {
			r.times[k] = append(append([]time.Duration{}, fast...), 0)
			r.found[k] = 6 * 50
			r.indexed[k] = k != kindBig // as if its plan missed
		}
		r.times[slowKind][5] = slow
		return r
	}
	o := options{schema: "bench_search", warmup: 200, searchP99: 100 * time.Millisecond, lifeP99: 50 * time.Millisecond}
	tests := []struct {
		name     string
		r        results
		wantRows []string
		verdict  string
	}{
		{name: "all within", r: res(kindSmall, 100*time.Millisecond),
			wantRows: []string{"| small domain | 6 | 3.0 ms | 100.0 ms | 100.0 ms | 50.0 | yes | ≤ 100.0 ms | PASS |",
				"| big domain | 6 | 2.0 ms | 5.0 ms | 5.0 ms | 50.0 | no | ≤ 100.0 ms | PASS |",
				"| all recipient searches | 30 | 3.0 ms | 100.0 ms | 100.0 ms | 50.0 | - | ≤ 100.0 ms | PASS |",
				"10M mails", "kept from an earlier run", "10.0 GiB on disk"},
			verdict: "the mail page p99 ≤ 50.0 ms: PASS"},
		{name: "a slow search", r: res(kindRare, 101*time.Millisecond),
			wantRows: []string{"| rare address | 6 | 3.0 ms | 101.0 ms | 101.0 ms | 50.0 | yes | ≤ 100.0 ms | FAIL |"},
			verdict:  "FAIL"},
		{name: "a slow page", r: res(kindLife, 51*time.Millisecond),
			wantRows: []string{"| mail page (Life) | 6 | 3.0 ms | 51.0 ms | 51.0 ms | 50.0 | - | ≤ 50.0 ms | FAIL |"},
			verdict:  "FAIL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := report(&out, o, tt.r)
			if (err != nil) != (tt.verdict == "FAIL") {
				t.Errorf("report error = %v with verdict %s", err, tt.verdict)
			}
			for _, want := range append(tt.wantRows, tt.verdict) {
				if !strings.Contains(out.String(), want) {
					t.Errorf("report lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func TestFlagsRejected(t *testing.T) {
	for _, args := range [][]string{
		{"-mails", "10"},
		{"-events-every", "0"},
		{"-queries", "4"},
		{"-lives", "0"},
		{"-warmup", "-1"},
		{"-search-p99", "0s"},
		{"-schema", "Bench"},
		{"-schema", "a;drop"},
		{"stray"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%v) succeeded, want an error", args)
		}
	}
	o, err := parseFlags(nil, io.Discard)
	if err != nil || o.mails != 10_000_000 || o.schema != "bench_search" || o.queries != 2000 {
		t.Errorf("defaults = %+v, %v", o, err)
	}
}

// TestSeedAndMeasure seeds a small schema of its own, measures it, runs
// again on the kept seed, and drops it.
func TestSeedAndMeasure(t *testing.T) {
	testenv.Integration(t, "PostgreSQL")
	schema := strings.ToLower(testenv.UniqueName("bench_search_test"))
	schema = strings.NewReplacer("-", "_", ".", "_").Replace(schema)
	args := []string{"-database-url", testenv.DatabaseURL(), "-schema", schema, "-mails", "20000",
		"-queries", "50", "-lives", "20", "-warmup", "5", "-search-p99", "10s", "-life-p99", "10s"}
	for i, extra := range [][]string{nil, {"-drop"}} {
		var out, log bytes.Buffer
		if err := run(t.Context(), append(args, extra...), &out, &log); err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, log.String())
		}
		for _, want := range []string{"| rare address | 10 |", "| mail page (Life) | 20 |", ": PASS"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("run %d: report lacks %q:\n%s", i, want, out.String())
			}
		}
		wantLog := map[int]string{0: "seeded 20000 mails", 1: "re-using schema " + schema}[i]
		if !strings.Contains(log.String(), wantLog) {
			t.Errorf("run %d: log lacks %q:\n%s", i, wantLog, log.String())
		}
	}
}
