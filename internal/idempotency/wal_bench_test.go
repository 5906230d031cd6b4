package idempotency_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
)

// benchBatch is the worker's default POSTLINE_BATCH_SIZE: claims and
// fates go to Postgres in batches of this many.
const benchBatch = 256

// benchPayload stands for a job record of about 1 KiB (a short
// transactional mail: headers, a text and an HTML part).
var benchPayload = []byte(`{"v":1,"message_id":"<x@bench>","from":"shop@example.com","to":["a@example.net"],` +
	`"subject":"Your order","text":"` + strings.Repeat("t", 400) + `","html":"<p>` + strings.Repeat("h", 500) + `</p>"}`)

// BenchmarkClaimRecord drives the claim -> record cycle the worker runs per
// mail, in batches of benchBatch, against a fresh schema, and reports:
//
//	mails/s      claimed and recorded rows per second (one Postgres round
//	             trip per batch and step, as the worker makes them)
//	WAL-B/mail   bytes of WAL the cycle wrote per mail (pg_current_wal_insert_lsn
//	             before and after; the counter is server-wide, so run it on a
//	             quiet server and compare runs of one invocation)
//	schema-WAL-B/mail  the same, counting only the records of this
//	             benchmark's tables and indexes, read with pg_waldump from
//	             the server's WAL directory POSTLINE_BENCH_PG_WAL (when set
//	             and readable): exact whatever else the server does
//	hot-%        the share of the row's updates that were HOT
//	             (pg_stat_user_tables.n_tup_hot_upd / n_tup_upd)
//	pg-CPU-µs/mail  CPU time of the Postgres backend serving the cycle, per
//	             mail (from /proc, so only when Postgres runs on this
//	             machine; less sensitive to other load than mails/s)
//
// "sent" is claim then sent (one recipient taken by the relay, a
// confirmation window, as by default); "retry" is claim, retrying, claim of
// attempt 2, sent. The "-with-copy" variants pass the record's copy to
// Claim, as the worker did before migration 0011. Run it with
//
//	POSTLINE_BENCH_PG_WAL=$PWD/.stack/pg/pg_wal go test -run '^$' -bench ClaimRecord -benchtime 20000x -count 3 ./internal/idempotency/
func BenchmarkClaimRecord(b *testing.B) {
	for _, sc := range []struct {
		name            string
		retry, withCopy bool
	}{{"sent", false, false}, {"retry", true, false}, {"sent-with-copy", false, true}, {"retry-with-copy", true, true}} {
		b.Run(sc.name, func(b *testing.B) {
			pool, backend, s := benchStore(b)
			ctx := b.Context()
			run := testenv.UniqueName("m")
			startLSN, startPos := walLSN(b, pool)
			startCPU, cpuOK := processCPU(backend)
			b.ResetTimer()
			start := time.Now()
			for done := 0; done < b.N; done += benchBatch {
				n := min(benchBatch, b.N-done)
				ids := make([]string, n)
				for i := range ids {
					ids[i] = fmt.Sprintf("<%s-%d@bench>", run, done+i)
				}
				versions := benchClaim(b, ctx, s, ids, 1, sc.withCopy)
				if sc.retry {
					benchRecord(b, ctx, s, ids, versions, idempotency.StatusRetrying, 2)
					versions = benchClaim(b, ctx, s, ids, 2, sc.withCopy)
				}
				benchRecord(b, ctx, s, ids, versions, idempotency.StatusSent, 0)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			if endCPU, ok := processCPU(backend); ok && cpuOK {
				b.ReportMetric(float64((endCPU-startCPU).Microseconds())/float64(b.N), "pg-CPU-µs/mail")
			}
			endLSN, endPos := walLSN(b, pool)
			wal := endLSN - startLSN
			if own, ok := schemaWAL(b, startPos, endPos, relations(b, pool)); ok {
				b.ReportMetric(float64(own)/float64(b.N), "schema-WAL-B/mail")
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "mails/s")
			b.ReportMetric(float64(wal)/float64(b.N), "WAL-B/mail")
			upd, hot := updateCounts(b, pool, int64(b.N)*map[bool]int64{false: 1, true: 3}[sc.retry])
			if upd > 0 {
				b.ReportMetric(100*float64(hot)/float64(upd), "hot-%")
			}
		})
	}
}

// BenchmarkPurge measures the retention purge on its own: b.N rows sent
// through the worker's claim and record statements (one recipient each,
// random Message-IDs as in production), confirmed and aged past a 1 h
// retention before the timer starts, then deleted by Purge in the reaper's
// statements of purgeBatch rows until none is left: by one store
// (purgers=1), or by two on connections of their own at once (purgers=2),
// as the reapers of two workers whose passes overlap. It reports rows/s,
// pg-CPU-µs/row (the serving backends' CPU, as in BenchmarkClaimRecord) and
// WAL-B/row (server-wide: run it on a quiet server). Run it with
//
//	go test -run '^$' -bench 'Purge$' -benchtime 100000x -count 2 ./internal/idempotency/
func BenchmarkPurge(b *testing.B) {
	// The reaper of every worker purges; two whose passes overlap skip
	// each other's locked rows and touch the same pages.
	for _, purgers := range []int{1, 2} {
		b.Run(fmt.Sprintf("purgers=%d", purgers), func(b *testing.B) { benchPurge(b, purgers) })
	}
}

func benchPurge(b *testing.B, purgers int) {
	const purgeBatch = 1000 // the reaper's default statement size
	url, admin := testenv.NewSchema(b)
	if err := schema.Migrate(b.Context(), admin); err != nil {
		b.Fatalf("Migrate: %v", err)
	}
	var (
		stores   []*idempotency.Store
		backends []int
		pool     *pgxpool.Pool
	)
	for range purgers {
		p, backend, s := benchStoreAt(b, url)
		stores, backends, pool = append(stores, s), append(backends, backend), cmp.Or(pool, p)
	}
	ctx := b.Context()
	run := testenv.UniqueName("p")
	for done := 0; done < b.N; done += benchBatch {
		ids := make([]string, min(benchBatch, b.N-done))
		for i := range ids {
			ids[i] = fmt.Sprintf("<%x-%s@bench>", hash(strconv.Itoa(done + i))[:8], run)
		}
		benchRecord(b, ctx, stores[0], ids, benchClaim(b, ctx, stores[0], ids, 1, false), idempotency.StatusSent, 0)
	}
	if _, err := pool.Exec(ctx, `UPDATE postline_messages SET confirmation = 'confirmed',
		created_at = created_at - interval '2 hours', updated_at = updated_at - interval '2 hours'`); err != nil {
		b.Fatalf("age the rows: %v", err)
	}
	// The aging's dead versions are the setup's, not the purge's to step over.
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE postline_messages, postline_recipients`); err != nil {
		b.Fatalf("vacuum: %v", err)
	}
	cpu := func() (time.Duration, bool) {
		var sum time.Duration
		for _, pid := range backends {
			c, ok := processCPU(pid)
			if !ok {
				return 0, false
			}
			sum += c
		}
		return sum, true
	}
	startLSN, _ := walLSN(b, pool)
	startCPU, cpuOK := cpu()
	b.ResetTimer()
	start := time.Now()
	var purged atomic.Int64
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() {
			for {
				n, err := s.Purge(ctx, time.Hour, purgeBatch)
				if err != nil {
					b.Errorf("Purge: %v", err)
					return
				}
				if n == 0 {
					return
				}
				purged.Add(int64(n))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if got := purged.Load(); got != int64(b.N) {
		b.Fatalf("purged %d rows, want %d", got, b.N)
	}
	if endCPU, ok := cpu(); ok && cpuOK {
		b.ReportMetric(float64((endCPU-startCPU).Microseconds())/float64(b.N), "pg-CPU-µs/row")
	}
	endLSN, _ := walLSN(b, pool)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64(endLSN-startLSN)/float64(b.N), "WAL-B/row")
	b.ReportMetric(0, "ns/op")
}

// benchStore migrates a fresh schema and returns a store on a pool of one
// connection, with that connection's backend PID: a benchmark's steps run
// one after the other anyway, and that backend's CPU time is then theirs.
func benchStore(b *testing.B) (*pgxpool.Pool, int, *idempotency.Store) {
	b.Helper()
	url, admin := testenv.NewSchema(b)
	if err := schema.Migrate(b.Context(), admin); err != nil {
		b.Fatalf("Migrate: %v", err)
	}
	return benchStoreAt(b, url)
}

// benchStoreAt is a store on a pool of one connection to url's schema,
// with that connection's backend PID.
func benchStoreAt(b *testing.B, url string) (*pgxpool.Pool, int, *idempotency.Store) {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	var backend int
	if err := pool.QueryRow(b.Context(), "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		b.Fatal(err)
	}
	s, err := idempotency.New(idempotency.Config{Owner: "bench", Lease: 30 * time.Second}, pool, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	return pool, backend, s
}

// benchClaim claims ids as the worker does (with the record's copy the
// worker hands the store, or with the record's copy too) and returns their versions; every claim must win.
func benchClaim(b *testing.B, ctx context.Context, s *idempotency.Store, ids []string, attempt int, withCopy bool) []int64 {
	reqs := make([]idempotency.ClaimRequest, len(ids))
	now := time.Now()
	for i, id := range ids {
		reqs[i] = workerClaim(id, attempt, now, withCopy)
	}
	cs, err := s.Claim(ctx, reqs)
	if err != nil {
		b.Fatalf("Claim: %v", err)
	}
	versions := make([]int64, len(cs))
	for i, c := range cs {
		if c.Result != idempotency.Claimed {
			b.Fatalf("claim %s: %v, want claimed", c.MessageID, c.Result)
		}
		versions[i] = c.Version
	}
	return versions
}

// workerClaim is the claim request the worker makes for a record: without
// the record's copy, which Kafka keeps (see ClaimRequest.Payload). withCopy
// adds it, as the worker did before migration 0011, for comparison.
func workerClaim(id string, attempt int, now time.Time, withCopy bool) idempotency.ClaimRequest {
	r := idempotency.ClaimRequest{
		MessageID: id, PayloadHash: hash(id), Attempt: attempt,
		Priority: "normal", Tenant: "acme", EnqueuedAt: now, FirstSeen: now,
	}
	if withCopy {
		r.Payload, r.Key = benchPayload, []byte(id)
		r.TraceHeaders = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	}
	return r
}

// benchRecord records one fate per row as the worker's recorder does
// (see testFate).
func benchRecord(b *testing.B, ctx context.Context, s *idempotency.Store, ids []string, versions []int64,
	st idempotency.Status, attempt int,
) {
	outs := make([]idempotency.Fate, len(ids))
	for i, id := range ids {
		outs[i] = testFate(id, versions[i], st, attempt)
	}
	lost, err := s.Record(ctx, outs)
	if err != nil || len(lost) > 0 {
		b.Fatalf("Record %s: %v (%d lost)", st, err, len(lost))
	}
}

// walLSN is the server's current WAL insert position, in bytes and as
// text.
func walLSN(tb testing.TB, pool *pgxpool.Pool) (int64, string) {
	tb.Helper()
	var (
		lsn int64
		pos string
	)
	if err := pool.QueryRow(context.Background(),
		`SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn, pg_current_wal_insert_lsn()::text`).Scan(&lsn, &pos); err != nil {
		tb.Fatalf("WAL position: %v", err)
	}
	return lsn, pos
}

// schemaWAL sums the WAL records that pg_waldump finds between the
// positions start and end and that touch one of rels (see relations), from
// the directory POSTLINE_BENCH_PG_WAL; POSTLINE_BENCH_PG_WALDUMP names the
// program (by default pg_waldump on PATH, else PostgreSQL 15's). It reports
// false when the directory is not set or pg_waldump fails (it must read the
// WAL before a checkpoint recycles it).
func schemaWAL(tb testing.TB, start, end, rels string) (int64, bool) {
	tb.Helper()
	dir := os.Getenv("POSTLINE_BENCH_PG_WAL")
	if dir == "" {
		return 0, false
	}
	prog := os.Getenv("POSTLINE_BENCH_PG_WALDUMP")
	if prog == "" {
		prog = "pg_waldump"
		if _, err := exec.LookPath(prog); err != nil {
			prog = "/usr/lib/postgresql/15/bin/pg_waldump"
		}
	}
	own := make(map[string]bool)
	for _, rel := range strings.Fields(rels) {
		_, node, _ := strings.Cut(rel, ":")
		own[node] = true
	}
	out, err := exec.Command(prog, "-p", dir, "-s", start, "-e", end).Output()
	if err != nil {
		tb.Logf("pg_waldump: %v", err)
		return 0, false
	}
	// rmgr: Heap len (rec/tot): 59/ 59, tx: ..., desc: ..., blkref #0: rel 1663/16385/16400 blk 0
	var total int64
	for line := range strings.Lines(string(out)) {
		_, refs, ok := strings.Cut(line, "blkref #")
		if !ok {
			continue
		}
		mine := false
		for _, f := range strings.Fields(refs) {
			if own[f] {
				mine = true
				break
			}
		}
		_, lens, _ := strings.Cut(line, "len (rec/tot):")
		_, tot, _ := strings.Cut(lens, "/")
		tot, _, _ = strings.Cut(strings.TrimSpace(tot), ",")
		n, err := strconv.ParseInt(tot, 10, 64)
		if mine && err == nil {
			total += n
		}
	}
	return total, true
}

// relations lists the schema's tables and indexes, with their TOAST
// tables and indexes, each as name:tablespace/database/relfilenode (what
// pg_waldump's --relation takes after the colon), separated by spaces.
func relations(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	var list string
	if err := pool.QueryRow(context.Background(), `
		WITH own AS (
			SELECT oid, reltoastrelid FROM pg_class WHERE relnamespace = current_schema()::regnamespace
		), rels AS (
			SELECT oid FROM own
			UNION SELECT reltoastrelid FROM own WHERE reltoastrelid <> 0
			UNION SELECT indexrelid FROM pg_index WHERE indrelid IN (SELECT reltoastrelid FROM own)
		)
		SELECT string_agg(format('%s:%s/%s/%s', c.relname,
			COALESCE(NULLIF(c.reltablespace, 0), d.dattablespace), d.oid, c.relfilenode), ' ')
		FROM rels JOIN pg_class c ON c.oid = rels.oid
		JOIN pg_database d ON d.datname = current_database()
		WHERE c.relfilenode <> 0`).Scan(&list); err != nil {
		tb.Fatalf("relations: %v", err)
	}
	return list
}

// updateCounts returns n_tup_upd and n_tup_hot_upd of the schema's
// postline_messages, waiting (up to 10 s) until at least want updates are
// counted: backends report their table statistics a little after commit.
func updateCounts(tb testing.TB, pool *pgxpool.Pool, want int64) (upd, hot int64) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := pool.QueryRow(context.Background(), `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE schemaname = current_schema() AND relname = 'postline_messages'`).Scan(&upd, &hot); err != nil {
			tb.Fatalf("table statistics: %v", err)
		}
		if upd >= want || time.Now().After(deadline) {
			return upd, hot
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processCPU is the user and system CPU time of process pid, from
// /proc/<pid>/stat; false when it cannot be read (Postgres runs elsewhere).
func processCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces: count from after it.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond, true
}
