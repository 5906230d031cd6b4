// Package benchmetrics reads the workers' own counters from their /metrics
// for the benchmark harnesses: how many mails were sent, failed, purged or
// taken over. A scrape costs the same whatever the size of the message
// table, unlike counting its rows, and puts no load on PostgreSQL, whose CPU
// the benchmarks measure.
package benchmetrics

import (
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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
	// AllocBytes and Mallocs are the Go runtime's go_memstats_alloc_bytes_total
	// and go_memstats_mallocs_total; HasAllocs says the exposition had both.
	AllocBytes, Mallocs float64
	HasAllocs           bool
}

// Add returns c and o summed.
func (c Counters) Add(o Counters) Counters {
	return Counters{Sent: c.Sent + o.Sent, Failed: c.Failed + o.Failed, Purged: c.Purged + o.Purged,
		Takeovers: c.Takeovers + o.Takeovers, Duplicates: c.Duplicates + o.Duplicates,
		PurgeStatements: c.PurgeStatements + o.PurgeStatements, PurgeSeconds: c.PurgeSeconds + o.PurgeSeconds,
		AllocBytes: c.AllocBytes + o.AllocBytes, Mallocs: c.Mallocs + o.Mallocs, HasAllocs: c.HasAllocs && o.HasAllocs}
}

// failedOutcomes are the outcomes of postline_delivery_records_total that
// mean a job was not delivered: with smtp-sink accepting everything, any
// of them is a fault the benchmark reports.
var failedOutcomes = map[string]bool{"failed": true, "dead": true, "rejected": true}

// Parse reads Counters from a Prometheus text exposition (with
// prometheus/common's parser). A counter the exposition lacks stays zero,
// except the Go runtime's two, whose absence HasAllocs reports.
func Parse(r io.Reader) (Counters, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return Counters{}, fmt.Errorf("metrics: %w", err)
	}
	var c Counters
	each := func(name string, fn func(m *dto.Metric)) bool {
		f, ok := families[name]
		if ok {
			for _, m := range f.GetMetric() {
				fn(m)
			}
		}
		return ok
	}
	each("postline_delivery_records_total", func(m *dto.Metric) {
		v := int64(value(m))
		switch outcome := label(m, "outcome"); {
		case outcome == "sent":
			c.Sent += v
		case outcome == "duplicate":
			c.Duplicates += v
		case failedOutcomes[outcome]:
			c.Failed += v
		}
	})
	each("postline_reaper_purged_total", func(m *dto.Metric) { c.Purged += int64(value(m)) })
	each("postline_reaper_takeovers_total", func(m *dto.Metric) { c.Takeovers += int64(value(m)) })
	each("postline_idempotency_round_trip_seconds", func(m *dto.Metric) {
		if label(m, "op") == "purge" {
			c.PurgeStatements += int64(m.GetHistogram().GetSampleCount())
			c.PurgeSeconds += m.GetHistogram().GetSampleSum()
		}
	})
	hasBytes := each("go_memstats_alloc_bytes_total", func(m *dto.Metric) { c.AllocBytes += value(m) })
	hasObjects := each("go_memstats_mallocs_total", func(m *dto.Metric) { c.Mallocs += value(m) })
	c.HasAllocs = hasBytes && hasObjects
	return c, nil
}

// value is a counter's or an untyped sample's value.
func value(m *dto.Metric) float64 {
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetUntyped().GetValue()
}

// label returns the value of m's label name, or "" when it has none.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Scrape sums the Counters of every worker's /metrics.
func Scrape(ctx context.Context, httpc *http.Client, metricsURLs []string) (Counters, error) {
	var total Counters
	for i, u := range metricsURLs {
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
		if i == 0 {
			total = c
		} else {
			total = total.Add(c)
		}
	}
	return total, nil
}
