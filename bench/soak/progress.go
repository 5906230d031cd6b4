package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/bench/internal/benchproc"
)

// tableStats is the size of the soak's tables. Every figure is O(1) in the
// rows: relation sizes are file sizes, rows are the statistics collector's
// live tuple estimate (n_live_tup), not a count, and the schema's own
// tables are a handful of catalog rows.
type tableStats struct {
	MessagesBytes      int64 // pg_total_relation_size(postline_messages): heap, TOAST and indexes
	MessagesIndexBytes int64 // pg_indexes_size(postline_messages)
	MessagesRows       int64
	RecipientsRows     int64
	AllBytes           int64 // every table of the soak's schema, TOAST and indexes included
}

const tableStatsSQL = `SELECT pg_total_relation_size('postline_messages'::regclass),
	pg_indexes_size('postline_messages'::regclass),
	(SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = 'postline_messages'::regclass),
	(SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = 'postline_recipients'::regclass),
	(SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p'))`

func readTableStats(ctx context.Context, pool *pgxpool.Pool) (tableStats, error) {
	var s tableStats
	err := pool.QueryRow(ctx, tableStatsSQL).Scan(&s.MessagesBytes, &s.MessagesIndexBytes, &s.MessagesRows,
		&s.RecipientsRows, &s.AllBytes)
	if err != nil {
		return tableStats{}, fmt.Errorf("table sizes: %w", err)
	}
	return s, nil
}

// walStats are the PostgreSQL server's WAL and checkpoint counters. They are
// server-wide, not the schema's: the soak has the stack's server to itself,
// and a checkpoint is the server's, whoever's rows it flushes. After each
// checkpoint the first change to a page writes the whole page to the WAL
// (a full-page image), so the WAL written per mail shows what checkpoints
// cost the run as the tables grow.
type walStats struct {
	Bytes       int64 // pg_stat_wal.wal_bytes
	FullPages   int64 // pg_stat_wal.wal_fpi: full-page images
	Checkpoints int64 // pg_stat_bgwriter: checkpoints begun, on time or requested by WAL volume
}

const walStatsSQL = `SELECT w.wal_bytes::bigint, w.wal_fpi, b.checkpoints_timed + b.checkpoints_req
	FROM pg_stat_wal w, pg_stat_bgwriter b`

func readWALStats(ctx context.Context, pool *pgxpool.Pool) (walStats, error) {
	var s walStats
	if err := pool.QueryRow(ctx, walStatsSQL).Scan(&s.Bytes, &s.FullPages, &s.Checkpoints); err != nil {
		return walStats{}, fmt.Errorf("WAL statistics: %w", err)
	}
	return s, nil
}

// checkpoint runs a PostgreSQL checkpoint (the role needs pg_checkpoint,
// which the stack grants) and says how long it took.
func checkpoint(ctx context.Context, pool *pgxpool.Pool) (time.Duration, error) {
	start := time.Now()
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return 0, fmt.Errorf("CHECKPOINT (the role needs pg_checkpoint: scripts/stack.sh up grants it): %w", err)
	}
	return time.Since(start), nil
}

// sample is one row of the soak's CSV: taken every -sample interval.
type sample struct {
	T          time.Duration // since the first job was published
	Delivered  int64         // mails sent, from the workers' counters
	Failed     int64
	Purged     int64 // rows the workers' reapers deleted past the retention
	Takeovers  int64 // rows re-published after their lease ran out
	Duplicates int64 // copies deduped by the claim
	// PurgeStatements and PurgeSeconds are the workers' purge statements
	// so far and the time they took (see benchmetrics.Counters).
	PurgeStatements int64
	PurgeSeconds    float64
	Rate            float64 // mails/s since the previous sample
	RSS             []int64 // VmRSS of each worker, bytes
	Peak            []int64 // VmHWM of each worker, bytes
	Tables          tableStats
	WAL             walStats
	Load1           float64 // the machine's 1-minute load average
	CPU             cpuTimes
}

// readRSS reads every worker's memory.
func readRSS(procs []*benchproc.Proc) (rss, peak []int64, err error) {
	for _, p := range procs {
		m, err := benchproc.ReadMemory(p.Pid())
		if err != nil {
			return nil, nil, fmt.Errorf("worker pid %d: %w", p.Pid(), err)
		}
		rss, peak = append(rss, m.RSS), append(peak, m.Peak)
	}
	return rss, peak, nil
}

// cpuTimes are the CPU time the processes of the whole stack have used so
// far, from /proc: the workers together, PostgreSQL with its backends (the
// postmaster's tree, reaped backends included), Kafka, smtp-sink, and the
// harness itself (the publisher, and these readings). A shared service
// whose pid file the soak was not given reads 0. The report divides what
// each used over a window by the mails sent in it: what grows per mail
// from the first window to the last is what slows the last.
type cpuTimes struct {
	Workers, Postgres, Kafka, Sink, Harness time.Duration
}

// pidFiles name the shared services' pid files (-kafka-pid-file,
// -postgres-pid-file, -sink-pid-file); "" leaves one unmeasured.
type pidFiles struct {
	kafka, postgres, sink string
}

// readCPU reads the CPU time of the workers, the shared services and the
// harness now.
func readCPU(procs []*benchproc.Proc, files pidFiles) (cpuTimes, error) {
	var c cpuTimes
	for _, p := range procs {
		d, err := benchproc.CPU(p.Pid())
		if err != nil {
			return cpuTimes{}, fmt.Errorf("worker pid %d: %w", p.Pid(), err)
		}
		c.Workers += d
	}
	for _, s := range []struct {
		name, file string
		tree       bool
		dst        *time.Duration
	}{
		{"kafka", files.kafka, false, &c.Kafka},
		{"postgres", files.postgres, true, &c.Postgres},
		{"smtp-sink", files.sink, false, &c.Sink},
	} {
		if s.file == "" {
			continue
		}
		pid, err := benchproc.PIDFromFile(s.file)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("%s CPU: %w", s.name, err)
		}
		read := benchproc.CPU
		if s.tree {
			read = benchproc.TreeCPU
		}
		if *s.dst, err = read(pid); err != nil {
			return cpuTimes{}, fmt.Errorf("%s CPU (pid %d): %w", s.name, pid, err)
		}
	}
	var err error
	if c.Harness, err = benchproc.CPU(os.Getpid()); err != nil {
		return cpuTimes{}, fmt.Errorf("the harness's CPU: %w", err)
	}
	return c, nil
}

// loadAverage is the first field of /proc/loadavg.
func loadAverage(loadavg string) float64 {
	f := strings.Fields(loadavg)
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
