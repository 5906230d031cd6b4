// Package benchjobs owns the synthetic jobs of the benchmark harnesses:
// making them, publishing them as fast as job.Publisher goes, and reading
// from postline_messages what became of them.
package benchjobs

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/bench/internal/benchkafka"
	"github.com/postline/postline/job"
)

// Body is n bytes of text: line over and over, the last copy cut short.
func Body(n int, line string) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(line[:min(len(line), n-b.Len())])
	}
	return b.String()
}

// Plain is n jobs that carry body as their text, one recipient each at
// the sink's domain: rcpt<i>@sink.postline.test, subject "bench mail <i>".
func Plain(n int, body string) []job.Job {
	jobs := make([]job.Job, n)
	for i := range jobs {
		jobs[i] = job.Job{
			Version: job.SchemaVersion,
			From:    "Postline Bench <bench@postline.test>",
			To:      []string{fmt.Sprintf("rcpt%d@sink.postline.test", i)},
			Subject: fmt.Sprintf("bench mail %d", i),
			Text:    body,
		}
	}
	return jobs
}

// publishers is how many goroutines Publish calls job.Publisher from.
const publishers = 4

// Publish writes jobs to topic with job.Publisher, chunk jobs per Publish
// call from 4 goroutines, and returns how long that took and the first
// error. The chunk bounds what the harness holds encoded at once.
func Publish(ctx context.Context, brokers []string, topic string, jobs []job.Job, chunk int) (time.Duration, error) {
	pub, err := job.NewPublisher(benchkafka.Cluster(brokers...).Config(), job.PublisherConfig{Topic: topic})
	if err != nil {
		return 0, err
	}
	defer pub.Close()
	start := time.Now()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan []job.Job)
	for range publishers {
		wg.Go(func() {
			for batch := range next {
				if _, err := pub.Publish(ctx, batch...); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("publish: %w", err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := 0; i < len(jobs); i += chunk {
		next <- jobs[i:min(i+chunk, len(jobs))]
	}
	close(next)
	wg.Wait()
	return time.Since(start), first
}

// CountRows counts the sent and the failed or dead rows of
// postline_messages.
func CountRows(ctx context.Context, pool *pgxpool.Pool) (sent, failed int, err error) {
	err = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'sent'),
		count(*) FILTER (WHERE status IN ('failed', 'dead')) FROM postline_messages`).Scan(&sent, &failed)
	return sent, failed, err
}

// Latency is the throughput and latency of the sent rows.
type Latency struct {
	Mails int
	// Span runs from the first enqueued_at to the last sent_at: mails per
	// second are Mails over it.
	Span time.Duration
	// P50 and P99 are percentiles of sent_at - enqueued_at, Max its
	// largest value.
	P50, P99, Max time.Duration
}

// ReadLatency computes Latency in SQL over the sent rows of
// postline_messages.
func ReadLatency(ctx context.Context, pool *pgxpool.Pool) (Latency, error) {
	var (
		l            Latency
		first, last  time.Time
		p50, p99, mx float64
	)
	err := pool.QueryRow(ctx, `SELECT count(*), min(enqueued_at), max(sent_at),
		percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - enqueued_at)::float8),
		percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - enqueued_at)::float8),
		max(extract(epoch FROM sent_at - enqueued_at)::float8)
		FROM postline_messages WHERE status = 'sent'`).Scan(&l.Mails, &first, &last, &p50, &p99, &mx)
	if err != nil {
		return Latency{}, fmt.Errorf("latency query: %w", err)
	}
	l.Span = last.Sub(first)
	l.P50 = time.Duration(p50 * float64(time.Second))
	l.P99 = time.Duration(p99 * float64(time.Second))
	l.Max = time.Duration(mx * float64(time.Second))
	return l, nil
}
