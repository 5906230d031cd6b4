package suppression

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/internal/testenv"
)

// MigrationFile is the DDL of postline_suppressions, applied on its own to
// each test's schema so these tests do not depend on other migrations.
const migrationFile = "../schema/migrations/0008_suppressions.sql"

// clock is a settable NowFunc.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.now = t }

// newTestStore returns a store on a fresh schema holding the table, on a
// clock set to t0, and its registry.
func newTestStore(t *testing.T) (*Store, *clock, *pgxpool.Pool, *prometheus.Registry) {
	t.Helper()
	_, pool := testenv.NewSchema(t)
	ddl, err := os.ReadFile(migrationFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), string(ddl)); err != nil {
		t.Fatalf("apply %s: %v", migrationFile, err)
	}
	c := &clock{now: t0}
	reg := prometheus.NewRegistry()
	s, err := New(Config{NowFunc: c.Now}, pool, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	return s, c, pool, reg
}

func mustAdd(t *testing.T, s *Store, entries ...Entry) int {
	t.Helper()
	n, err := s.Add(t.Context(), entries)
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	return n
}

func TestCheckPostgres(t *testing.T) {
	t.Parallel()
	s, c, _, reg := newTestStore(t)
	ctx := t.Context()
	mustAdd(t, s,
		Entry{Tenant: "acme", Stream: StreamAll, Address: "All@Example.com", Reason: ReasonHardBounce, Source: "dsn", MessageID: "m1@x"},
		Entry{Tenant: "acme", Stream: StreamBulk, Address: "bulk@example.com", Reason: ReasonUnsubscribe, Source: "list-unsubscribe"},
		Entry{Tenant: "acme", Stream: StreamBulk, Address: "both@example.com", Reason: ReasonSoftBounce, Source: "dsn"},
		Entry{Tenant: "acme", Stream: StreamAll, Address: "both@example.com", Reason: ReasonComplaint, Source: "arf"},
		Entry{Tenant: "acme", Stream: StreamTransactional, Address: "soft@example.com", Reason: ReasonSoftBounce, Source: "dsn",
			ExpiresAt: t0.Add(time.Hour)},
		Entry{Tenant: "", Stream: StreamAll, Address: "notenant@example.com", Reason: ReasonManual, Source: "postctl"},
	)
	keys := []Key{
		{Tenant: "acme", Stream: StreamTransactional, Address: "all@example.com"},    // 0: "*" entry
		{Tenant: "acme", Stream: StreamBulk, Address: "Someone <ALL@EXAMPLE.COM>"},   // 1: case, display name
		{Tenant: "acme", Stream: StreamTransactional, Address: "bulk@example.com"},   // 2: other stream only
		{Tenant: "acme", Stream: StreamBulk, Address: "bulk@example.com"},            // 3
		{Tenant: "acme", Stream: StreamBulk, Address: "both@example.com"},            // 4: complaint wins
		{Tenant: "acme", Stream: StreamTransactional, Address: "soft@example.com"},   // 5: until expiry
		{Tenant: "other", Stream: StreamTransactional, Address: "all@example.com"},   // 6: other tenant
		{Tenant: "", Stream: StreamBulk, Address: "notenant@example.com"},            // 7
		{Tenant: "acme", Stream: StreamTransactional, Address: "not an address"},     // 8: skipped
		{Tenant: "acme", Stream: StreamTransactional, Address: "nobody@example.com"}, // 9
	}
	got, err := s.Check(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]Reason{0: ReasonHardBounce, 1: ReasonHardBounce, 3: ReasonUnsubscribe, 4: ReasonComplaint,
		5: ReasonSoftBounce, 7: ReasonManual}
	for i, k := range keys {
		e, hit := got[k]
		if r, ok := want[i]; ok != hit || (hit && e.Reason != r) {
			t.Errorf("key %d %+v: got %+v (hit %v), want reason %q", i, k, e, hit, want[i])
		}
	}
	if len(got) != len(want) {
		t.Errorf("Check returned %d entries, want %d", len(got), len(want))
	}
	if e := got[keys[1]]; e.Address != "all@example.com" || e.Stream != StreamAll || e.MessageID != "m1@x" ||
		e.Source != "dsn" || !e.CreatedAt.Equal(t0) || !e.ExpiresAt.IsZero() {
		t.Errorf("entry read back as %+v", e)
	}

	// At the soft bounce's expiry it no longer suppresses.
	c.Set(t0.Add(time.Hour))
	got, err = s.Check(ctx, keys[5:6])
	if err != nil || len(got) != 0 {
		t.Errorf("Check at expiry = %v, %v; want nothing", got, err)
	}
	if _, err := s.Check(ctx, []Key{{Tenant: "acme", Stream: "", Address: "a@b"}}); err == nil {
		t.Error("Check with an empty stream succeeded")
	}
	if n := testutil.ToFloat64(s.m.checks); n != float64(len(keys)+1) {
		t.Errorf("checks_total = %v, want %d", n, len(keys)+1)
	}
	if n := testutil.ToFloat64(s.m.hits.WithLabelValues(string(ReasonHardBounce))); n != 2 {
		t.Errorf("hits_total{reason=hard_bounce} = %v, want 2", n)
	}
	if n, err := testutil.GatherAndCount(reg, "postline_suppression_hits_total"); err != nil || n != len(Reasons()) {
		t.Errorf("hits_total series = %d, %v; want one per reason", n, err)
	}
}

// TestCheckManyKeys checks 2,000 keys in one call, half of them suppressed,
// and that the statement is one round trip served by the primary key.
func TestCheckManyKeys(t *testing.T) {
	t.Parallel()
	s, _, pool, _ := newTestStore(t)
	ctx := t.Context()
	var entries []Entry
	var keys []Key
	for i := range 2000 {
		addr := fmt.Sprintf("User%04d@Example.com", i)
		if i%2 == 0 {
			entries = append(entries, Entry{Tenant: "t", Stream: StreamAll, Address: addr, Reason: ReasonHardBounce, Source: "dsn"})
		}
		keys = append(keys, Key{Tenant: "t", Stream: StreamBulk, Address: addr})
	}
	// Unrelated rows, so the planner has a table worth an index.
	for i := range 20000 {
		entries = append(entries, Entry{Tenant: fmt.Sprintf("x%d", i%50), Stream: StreamBulk,
			Address: fmt.Sprintf("other%d@example.org", i), Reason: ReasonManual, Source: "import"})
	}
	if n := mustAdd(t, s, entries...); n != len(entries) {
		t.Fatalf("Add = %d, want %d", n, len(entries))
	}
	if _, err := pool.Exec(ctx, "ANALYZE postline_suppressions"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Check(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1000 {
		t.Fatalf("Check of 2000 keys found %d, want 1000", len(got))
	}
	for i, k := range keys {
		if _, hit := got[k]; hit != (i%2 == 0) {
			t.Fatalf("key %d: hit %v", i, hit)
		}
	}
	tenants, streams, addrs := make([]string, len(keys)), make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		n, _ := normalizeKey(k, false)
		tenants[i], streams[i], addrs[i] = n.Tenant, string(n.Stream), n.Address
	}
	// On a table this small a hash join over a scan is cheaper; with
	// scans priced out the plan shows that the statement can be served by
	// the primary key (it could not if, say, collations mismatched).
	var plan string
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "EXPLAIN "+checkSQL, tenants, streams, addrs, t0)
		if err != nil {
			return err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		plan = strings.Join(lines, "\n")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "postline_suppressions_pkey") {
		t.Errorf("check plan does not use the primary key:\n%s", plan)
	}
}

// TestAddPrecedencePostgres runs the precedence table through the
// statement: each case's old entry is written, then its next entry, and the
// row must hold next exactly when Supersedes says so.
func TestAddPrecedencePostgres(t *testing.T) {
	t.Parallel()
	s, c, _, _ := newTestStore(t)
	ctx := t.Context()
	for i, tt := range precedenceCases {
		addr := fmt.Sprintf("case%d@example.com", i)
		old, next := tt.old, tt.next
		old.Stream, old.Address, old.CreatedAt = StreamAll, addr, t0.Add(-2*time.Hour)
		next.Stream, next.Address, next.CreatedAt = StreamAll, addr, old.CreatedAt
		if old.ExpiresAt.Equal(t0) {
			// An entry that expired at t0: written while it was live.
			c.Set(t0.Add(-time.Hour))
		}
		if n := mustAdd(t, s, old); n != 1 {
			t.Fatalf("%s: Add old = %d", tt.name, n)
		}
		c.Set(t0)
		n := mustAdd(t, s, next)
		if (n == 1) != tt.want {
			t.Errorf("%s: Add next changed %d rows, want replaced %v", tt.name, n, tt.want)
		}
		got, err := s.List(ctx, Filter{AddressPrefix: addr, IncludeExpired: true})
		if err != nil || len(got) != 1 {
			t.Fatalf("%s: List = %+v, %v", tt.name, got, err)
		}
		want := old
		if tt.want {
			want = next
		}
		if !same(got[0], want) {
			t.Errorf("%s: row holds %+v, want %+v", tt.name, got[0], want)
		}
	}

	// Several entries of one key in a batch: the one that supersedes wins,
	// whatever the order, and the batch writes one row.
	batch := []Entry{
		{Stream: StreamBulk, Address: "dup@example.com", Reason: ReasonSoftBounce, Source: "a"},
		{Stream: StreamBulk, Address: "DUP@example.com", Reason: ReasonComplaint, Source: "b"},
		{Stream: StreamBulk, Address: "dup@example.com", Reason: ReasonHardBounce, Source: "c"},
	}
	if n := mustAdd(t, s, batch...); n != 1 {
		t.Errorf("batch of one key changed %d rows, want 1", n)
	}
	got, err := s.List(ctx, Filter{AddressPrefix: "dup@"})
	if err != nil || len(got) != 1 || got[0].Reason != ReasonComplaint {
		t.Errorf("batch of one key left %+v, %v; want the complaint", got, err)
	}

	// An invalid entry fails the batch, naming it, and writes nothing.
	_, err = s.Add(ctx, []Entry{{Stream: StreamBulk, Address: "fine@example.com", Reason: ReasonManual},
		{Stream: StreamBulk, Address: "broken", Reason: ReasonManual}})
	if err == nil || !strings.Contains(err.Error(), "entry 1") {
		t.Errorf("Add with an invalid entry: %v, want entry 1 named", err)
	}
	if got, _ := s.List(ctx, Filter{AddressPrefix: "fine@"}); len(got) != 0 {
		t.Errorf("a failed Add wrote %+v", got)
	}
}

func TestListPagingAndFilters(t *testing.T) {
	t.Parallel()
	s, c, _, _ := newTestStore(t)
	ctx := t.Context()
	var all []Entry
	for i := range 25 {
		for _, tenant := range []string{"", "acme"} {
			e := Entry{Tenant: tenant, Stream: []Stream{StreamAll, StreamBulk, StreamTransactional}[i%3],
				Address: fmt.Sprintf("u%02d@example.com", i), Reason: Reasons()[i%len(Reasons())], Source: "test"}
			if e.Reason == ReasonSoftBounce {
				e.ExpiresAt = t0.Add(time.Duration(i) * time.Minute)
			}
			all = append(all, e)
		}
	}
	mustAdd(t, s, all...)
	c.Set(t0.Add(30 * time.Minute)) // every soft bounce has expired

	tests := []struct {
		name string
		f    Filter
		keep func(Entry) bool
	}{
		{"everything live", Filter{}, func(e Entry) bool { return e.Reason != ReasonSoftBounce }},
		{"with expired", Filter{IncludeExpired: true}, func(Entry) bool { return true }},
		{"no tenant", Filter{Tenant: new("")}, func(e Entry) bool { return e.Tenant == "" && e.Reason != ReasonSoftBounce }},
		{"tenant and stream", Filter{Tenant: new("acme"), Stream: StreamBulk},
			func(e Entry) bool {
				return e.Tenant == "acme" && e.Stream == StreamBulk && e.Reason != ReasonSoftBounce
			}},
		{"reason", Filter{Reason: ReasonComplaint}, func(e Entry) bool { return e.Reason == ReasonComplaint }},
		{"prefix lowercased", Filter{AddressPrefix: "U1"}, func(e Entry) bool {
			return strings.HasPrefix(e.Address, "u1") && e.Reason != ReasonSoftBounce
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want []Key
			for _, e := range all {
				if tt.keep(e) {
					n, _ := normalizeKey(e.Key(), false)
					want = append(want, n)
				}
			}
			slices.SortFunc(want, compareKeys)
			// Pages of 4 until a short page.
			var got []Key
			f := tt.f
			f.Limit = 4
			for pages := 0; ; pages++ {
				page, err := s.List(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range page {
					got = append(got, e.Key())
				}
				if len(page) < f.Limit {
					break
				}
				if pages > 20 {
					t.Fatal("paging does not end")
				}
				last := page[len(page)-1].Key()
				f.After = &last
			}
			if !slices.Equal(got, want) {
				t.Errorf("paged List = %v\nwant %v", got, want)
			}
			var exported []Key
			if err := s.Export(ctx, tt.f, func(e Entry) error { exported = append(exported, e.Key()); return nil }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(exported, want) {
				t.Errorf("Export = %v\nwant %v", exported, want)
			}
		})
	}
	if _, err := s.List(ctx, Filter{Stream: "nope"}); err == nil {
		t.Error("List with a bad stream succeeded")
	}
	stop := fmt.Errorf("stop")
	var seen int
	if err := s.Export(ctx, Filter{}, func(Entry) error { seen++; return stop }); err != stop || seen != 1 {
		t.Errorf("Export with a failing fn: %v after %d entries, want stop after 1", err, seen)
	}
}

func TestRemovePurgeAndTx(t *testing.T) {
	t.Parallel()
	s, c, _, _ := newTestStore(t)
	ctx := t.Context()
	mustAdd(t, s,
		Entry{Tenant: "a", Stream: StreamBulk, Address: "x@example.com", Reason: ReasonManual},
		Entry{Tenant: "a", Stream: StreamTransactional, Address: "x@example.com", Reason: ReasonManual},
		Entry{Tenant: "a", Stream: StreamAll, Address: "y@example.com", Reason: ReasonManual},
		Entry{Tenant: "b", Stream: StreamBulk, Address: "x@example.com", Reason: ReasonManual},
		Entry{Tenant: "a", Stream: StreamAll, Address: "s1@example.com", Reason: ReasonSoftBounce, ExpiresAt: t0.Add(time.Minute)},
		Entry{Tenant: "a", Stream: StreamAll, Address: "s2@example.com", Reason: ReasonSoftBounce, ExpiresAt: t0.Add(2 * time.Minute)},
		Entry{Tenant: "a", Stream: StreamAll, Address: "s3@example.com", Reason: ReasonSoftBounce, ExpiresAt: t0.Add(3 * time.Minute)},
	)
	n, err := s.Remove(ctx, []Key{{Tenant: "a", Stream: StreamBulk, Address: "X@Example.com"}})
	if err != nil || n != 1 {
		t.Errorf("Remove of one stream = %d, %v; want 1", n, err)
	}
	n, err = s.Remove(ctx, []Key{{Tenant: "a", Address: "x@example.com"}, {Tenant: "a", Stream: StreamBulk, Address: "y@example.com"}})
	if err != nil || n != 1 {
		t.Errorf("Remove of every stream and of a missing stream = %d, %v; want 1", n, err)
	}
	if _, err := s.Remove(ctx, []Key{{Address: "bad"}}); err == nil {
		t.Error("Remove of a bad address succeeded")
	}

	// PurgeExpired deletes in batches, expired entries only.
	small, err := New(Config{NowFunc: c.Now, PurgeBatch: 1}, s.db, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Set(t0.Add(2 * time.Minute))
	for _, want := range []int{1, 1, 0} {
		if n, err := small.PurgeExpired(ctx); err != nil || n != want {
			t.Errorf("PurgeExpired = %d, %v; want %d", n, err, want)
		}
	}
	left, err := s.List(ctx, Filter{IncludeExpired: true})
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, e := range left {
		addrs = append(addrs, e.Tenant+"/"+e.Address)
	}
	if want := []string{"a/s3@example.com", "a/y@example.com", "b/x@example.com"}; !slices.Equal(addrs, want) {
		t.Errorf("after Remove and PurgeExpired: %v, want %v", addrs, want)
	}

	// A failed transaction leaves nothing; a committed one keeps all.
	err = s.InTx(ctx, func(tx *Store) error {
		if _, err := tx.Add(ctx, []Entry{{Stream: StreamAll, Address: "tx1@example.com", Reason: ReasonManual}}); err != nil {
			return err
		}
		_, err := tx.Add(ctx, []Entry{{Stream: StreamAll, Address: "broken", Reason: ReasonManual}})
		return err
	})
	if err == nil {
		t.Fatal("InTx with a failing Add succeeded")
	}
	if got, _ := s.List(ctx, Filter{AddressPrefix: "tx"}); len(got) != 0 {
		t.Errorf("rolled back transaction left %+v", got)
	}
	if err := s.InTx(ctx, func(tx *Store) error {
		_, err := tx.Add(ctx, []Entry{{Stream: StreamAll, Address: "tx2@example.com", Reason: ReasonManual}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.List(ctx, Filter{AddressPrefix: "tx"}); len(got) != 1 {
		t.Errorf("committed transaction left %+v", got)
	}
}

// TestAddConcurrent runs Adds of the same keys in opposite orders at once:
// none deadlocks, and the strongest entry of each key is left.
func TestAddConcurrent(t *testing.T) {
	t.Parallel()
	s, _, _, _ := newTestStore(t)
	ctx := t.Context()
	var forward, backward []Entry
	for i := range 300 {
		addr := fmt.Sprintf("c%03d@example.com", i)
		forward = append(forward, Entry{Stream: StreamAll, Address: addr, Reason: ReasonHardBounce, Source: "f"})
		backward = append([]Entry{{Stream: StreamAll, Address: addr, Reason: ReasonComplaint, Source: "b"}}, backward...)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		batch := forward
		if i%2 == 1 {
			batch = backward
		}
		wg.Go(func() { _, errs[i] = s.Add(ctx, batch) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Add %d: %v", i, err)
		}
	}
	got, err := s.List(ctx, Filter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 300 {
		t.Fatalf("%d entries, want 300", len(got))
	}
	for _, e := range got {
		if e.Reason != ReasonComplaint {
			t.Errorf("%s: %s, want the complaint", e.Address, e.Reason)
		}
	}
}
