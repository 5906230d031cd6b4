// Package benchmetrics reads the workers' own counters from their /metrics
// for the benchmark harnesses: how many mails were sent, failed, purged or
// taken over. A scrape costs the same whatever the size of the message
// table, unlike counting its rows, and puts no load on PostgreSQL, whose CPU
// the benchmarks measure.
package benchmetrics

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Counters are the workers' own counts, summed over the workers: what a
// harness polls for progress. One scrape of each worker's /metrics costs the
// same whatever the size of the table, unlike a count of its rows.
type Counters struct {
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

// Add returns c and o summed.
func (c Counters) Add(o Counters) Counters {
	return Counters{Sent: c.Sent + o.Sent, Failed: c.Failed + o.Failed, Purged: c.Purged + o.Purged,
		Takeovers: c.Takeovers + o.Takeovers, Duplicates: c.Duplicates + o.Duplicates,
		PurgeStatements: c.PurgeStatements + o.PurgeStatements, PurgeSeconds: c.PurgeSeconds + o.PurgeSeconds}
}

// failedOutcomes are the outcomes of postline_delivery_records_total that
// mean a job was not delivered: with smtp-sink accepting everything, any
// of them is a fault the benchmark reports.
var failedOutcomes = map[string]bool{"failed": true, "dead": true, "rejected": true}

// Parse reads Counters from a Prometheus text exposition. It
// understands only what it needs: the sample lines of three Counters and of
// the store's purge round trips, whose label values hold no quotes or commas.
func Parse(r io.Reader) (Counters, error) {
	var c Counters
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
				return Counters{}, fmt.Errorf("metrics: malformed line %q", line)
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
			return Counters{}, fmt.Errorf("metrics: %q: %w", line, err)
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

// Scrape sums the Counters of every worker's /metrics.
func Scrape(ctx context.Context, httpc *http.Client, metricsURLs []string) (Counters, error) {
	var total Counters
	for _, u := range metricsURLs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return Counters{}, err
		}
		// Uncompressed: a worker gzips its exposition when asked, and the
		// compressor's allocations would be counted as the worker's.
		req.Header.Set("Accept-Encoding", "identity")
		resp, err := httpc.Do(req)
		if err != nil {
			return Counters{}, err
		}
		c, err := Parse(resp.Body)
		resp.Body.Close()
		if err != nil {
			return Counters{}, fmt.Errorf("%s: %w", u, err)
		}
		if resp.StatusCode != http.StatusOK {
			return Counters{}, fmt.Errorf("%s: %s", u, resp.Status)
		}
		total = total.Add(c)
	}
	return total, nil
}
