package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/bench/internal/benchproc"
)

// counters are the workers' own counts, summed over the workers: what the
// harness polls for progress. One scrape of each worker's /metrics costs the
// same whatever the size of the table, unlike a count of its rows.
type counters struct {
	Sent   int64 // postline_delivery_records_total{outcome="sent"}
	Failed int64 // the same with outcome failed, dead or rejected
	Purged int64 // postline_reaper_purged_total
	// Takeovers is postline_reaper_takeovers_total: rows whose lease ran
	// out in flight, re-published by a reaper, so possibly sent twice.
	Takeovers int64
	// Duplicates is the same counter with outcome duplicate: copies the
	// claim recognised and did not send.
	Duplicates int64
	// PurgeStatements and PurgeSeconds are the count and the sum of
	// postline_idempotency_round_trip_seconds{op="purge"}: the purge's
	// delete statements and the time the workers waited for them.
	PurgeStatements int64
	PurgeSeconds    float64
}

func (c counters) add(o counters) counters {
	return counters{Sent: c.Sent + o.Sent, Failed: c.Failed + o.Failed, Purged: c.Purged + o.Purged,
		Takeovers: c.Takeovers + o.Takeovers, Duplicates: c.Duplicates + o.Duplicates,
		PurgeStatements: c.PurgeStatements + o.PurgeStatements, PurgeSeconds: c.PurgeSeconds + o.PurgeSeconds}
}

// failedOutcomes are the outcomes of postline_delivery_records_total that
// mean a job of the soak was not delivered: with smtp-sink accepting
// everything, any of them is a fault the soak reports.
var failedOutcomes = map[string]bool{"failed": true, "dead": true, "rejected": true}

// parseCounters reads counters from a Prometheus text exposition. It
// understands only what it needs: the sample lines of three counters and of
// the store's purge round trips, whose label values hold no quotes or commas.
func parseCounters(r io.Reader) (counters, error) {
	var c counters
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		var name, labels, value string
		switch metric, _, _ := strings.Cut(line, " "); {
		case strings.HasPrefix(metric, "postline_delivery_records_total{"):
			name = "records"
		case metric == "postline_reaper_purged_total" || strings.HasPrefix(metric, "postline_reaper_purged_total{"):
			name = "purged"
		case metric == "postline_reaper_takeovers_total" || strings.HasPrefix(metric, "postline_reaper_takeovers_total{"):
			name = "takeovers"
		case strings.HasPrefix(metric, "postline_idempotency_round_trip_seconds_count{"):
			name = "round trips"
		case strings.HasPrefix(metric, "postline_idempotency_round_trip_seconds_sum{"):
			name = "round trip seconds"
		default:
			continue
		}
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				return counters{}, fmt.Errorf("metrics: malformed line %q", line)
			}
			labels, value = line[i+1:j], strings.TrimSpace(line[j+1:])
		} else {
			_, value, _ = strings.Cut(line, " ")
		}
		if f := strings.Fields(value); len(f) > 0 {
			value = f[0] // a timestamp may follow the value
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return counters{}, fmt.Errorf("metrics: %q: %w", line, err)
		}
		switch name {
		case "purged":
			c.Purged += int64(v)
		case "takeovers":
			c.Takeovers += int64(v)
		case "round trips":
			if label(labels, "op") == "purge" {
				c.PurgeStatements += int64(v)
			}
		case "round trip seconds":
			if label(labels, "op") == "purge" {
				c.PurgeSeconds += v
			}
		case "records":
			outcome := label(labels, "outcome")
			switch {
			case outcome == "sent":
				c.Sent += int64(v)
			case outcome == "duplicate":
				c.Duplicates += int64(v)
			case failedOutcomes[outcome]:
				c.Failed += int64(v)
			}
		}
	}
	return c, sc.Err()
}

// label returns the value of label name in a Prometheus label list such as
// `a="x",outcome="sent"`, or "" when it is not there.
func label(labels, name string) string {
	for kv := range strings.SplitSeq(labels, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.TrimSpace(k) == name {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	return ""
}

// scrape sums the counters of every worker's /metrics.
func scrape(ctx context.Context, httpc *http.Client, metricsURLs []string) (counters, error) {
	var total counters
	for _, u := range metricsURLs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return counters{}, err
		}
		resp, err := httpc.Do(req)
		if err != nil {
			return counters{}, err
		}
		c, err := parseCounters(resp.Body)
		resp.Body.Close()
		if err != nil {
			return counters{}, fmt.Errorf("%s: %w", u, err)
		}
		if resp.StatusCode != http.StatusOK {
			return counters{}, fmt.Errorf("%s: %s", u, resp.Status)
		}
		total = total.add(c)
	}
	return total, nil
}

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

// sample is one row of the soak's CSV: taken every -sample interval.
type sample struct {
	T          time.Duration // since the first job was published
	Delivered  int64         // mails sent, from the workers' counters
	Failed     int64
	Purged     int64 // rows the workers' reapers deleted past the retention
	Takeovers  int64 // rows re-published after their lease ran out
	Duplicates int64 // copies deduped by the claim
	// PurgeStatements and PurgeSeconds are the workers' purge statements
	// so far and the time they took (see counters).
	PurgeStatements int64
	PurgeSeconds    float64
	Rate            float64 // mails/s since the previous sample
	RSS             []int64 // VmRSS of each worker, bytes
	Peak            []int64 // VmHWM of each worker, bytes
	Tables          tableStats
	Load1           float64 // the machine's 1-minute load average
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

// loadAverage is the first field of /proc/loadavg.
func loadAverage(loadavg string) float64 {
	f := strings.Fields(loadavg)
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
