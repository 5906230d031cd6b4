package fleet

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/redrive"
)

// MaxBuckets bounds a histogram's buckets (a week by 5 minutes is 2016).
const MaxBuckets = 5000

// deadLetterLister lists the dead letters a filter selects, in scan order:
// a *redrive.Redriver.
type deadLetterLister interface {
	List(ctx context.Context, f redrive.Filter, fn func(redrive.DeadLetter) error) error
}

var _ deadLetterLister = (*redrive.Redriver)(nil)

// deadLetterSource lists the dead-letter topic for a window starting at
// since: the scan may skip what was written well before it.
type deadLetterSource interface {
	lister(since time.Time) (deadLetterLister, error)
}

// scanSlack is how far before a window's start a histogram's scan starts,
// by the broker's time index. A dead letter's record is written after its
// dead-letter time by the process that stamped it, so only a clock step,
// or a broker stamping records (LogAppendTime) on a clock behind the
// writer's, puts a record before its own time; the filter on the
// dead-letter time decides what counts.
const scanSlack = 5 * time.Minute

// topicDeadLetters is a dead-letter topic in Kafka.
type topicDeadLetters struct {
	cluster *kafkaclient.Cluster
	topic   string
}

func (t topicDeadLetters) lister(since time.Time) (deadLetterLister, error) {
	return redrive.New(redrive.Config{Source: redrive.TopicSource{Kafka: t.cluster, Topic: t.topic, From: since.Add(-scanSlack)}})
}

// HistogramQuery is the window and bucket size of a dead-letter histogram.
type HistogramQuery struct {
	// Since and Until bound the dead-letter time: Since <= t < Until.
	// Since is required; a zero Until is now.
	Since, Until time.Time
	// Bucket is the bucket size. Buckets are aligned to multiples of it
	// since the zero time (whole UTC hours for 1h, UTC days for 24h), so
	// the first and last may be cut short by the window.
	Bucket time.Duration
}

// Histogram is the dead letters of a time window by reason, in buckets.
type Histogram struct {
	Since         time.Time     `json:"since"`
	Until         time.Time     `json:"until"`
	Bucket        time.Duration `json:"-"`
	BucketSeconds float64       `json:"bucket_seconds"`
	Total         int           `json:"total"`
	// Reasons is each reason's total, most first, then by name. A dead
	// letter without a reason header counts under "".
	Reasons []ReasonCount `json:"reasons"`
	// Buckets cover the window in time order, empty ones included.
	Buckets []Bucket `json:"buckets"`
}

// ReasonCount is how many dead letters had one reason.
type ReasonCount struct {
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

// Bucket is the dead letters of Start <= t < End, by reason (reasons
// without any are left out).
type Bucket struct {
	Start    time.Time      `json:"start"`
	End      time.Time      `json:"end"`
	Total    int            `json:"total"`
	ByReason map[string]int `json:"by_reason"`
}

// DeadLetterHistogram counts the dead letters of the query's window by
// reason and bucket, in one scan of the dead-letter topic filtered on the
// window.
func (r *Reader) DeadLetterHistogram(ctx context.Context, q HistogramQuery) (Histogram, error) {
	if r.deadLetters == nil {
		return Histogram{}, ErrNotConfigured
	}
	h, err := newHistogram(q, r.now())
	if err != nil {
		return Histogram{}, err
	}
	l, err := r.deadLetters.lister(h.Since)
	if err != nil {
		return Histogram{}, err
	}
	err = l.List(ctx, redrive.Filter{Since: h.Since, Until: h.Until}, func(l redrive.DeadLetter) error {
		h.add(l)
		return nil
	})
	if err != nil {
		return Histogram{}, fmt.Errorf("list dead letters: %w", err)
	}
	h.sumReasons()
	return h, nil
}

// QueryError is a HistogramQuery the histogram refuses: no start, a start
// not before the end, a bucket that is not positive, too many buckets.
type QueryError struct {
	msg string
}

func (e *QueryError) Error() string { return "histogram " + e.msg }

func queryErrorf(format string, args ...any) error {
	return &QueryError{msg: fmt.Sprintf(format, args...)}
}

// newHistogram checks q and returns its empty buckets; a zero Until is now.
func newHistogram(q HistogramQuery, now time.Time) (Histogram, error) {
	until := q.Until
	if until.IsZero() {
		until = now
	}
	switch {
	case q.Bucket <= 0:
		return Histogram{}, queryErrorf("bucket %s: must be positive", q.Bucket)
	case q.Since.IsZero():
		return Histogram{}, queryErrorf("needs a start (Since)")
	case !q.Since.Before(until):
		return Histogram{}, queryErrorf("start %s is not before its end %s",
			q.Since.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
	}
	first := q.Since.UTC().Truncate(q.Bucket)
	span := until.Sub(first) // saturates for windows of centuries: then far too many buckets
	n := span / q.Bucket
	if span%q.Bucket != 0 {
		n++
	}
	if n > MaxBuckets {
		return Histogram{}, queryErrorf("of %d buckets of %s: at most %d (take a larger bucket or a shorter window)",
			n, q.Bucket, MaxBuckets)
	}
	h := Histogram{Since: q.Since.UTC(), Until: until.UTC(), Bucket: q.Bucket, BucketSeconds: seconds(q.Bucket),
		Reasons: []ReasonCount{}, Buckets: make([]Bucket, n)}
	for i := range h.Buckets {
		start := first.Add(time.Duration(i) * q.Bucket)
		h.Buckets[i] = Bucket{Start: maxTime(start, h.Since), End: minTime(start.Add(q.Bucket), h.Until), ByReason: map[string]int{}}
	}
	return h, nil
}

// add counts l in its bucket; a time outside the window (a lister that
// did not filter) is not counted.
func (h *Histogram) add(l redrive.DeadLetter) {
	if l.Time.Before(h.Since) || !l.Time.Before(h.Until) {
		return
	}
	i := int(l.Time.Sub(h.Since.Truncate(h.Bucket)) / h.Bucket)
	b := &h.Buckets[i]
	b.Total++
	b.ByReason[l.Reason]++
	h.Total++
}

// sumReasons sets Reasons from the buckets.
func (h *Histogram) sumReasons() {
	totals := map[string]int{}
	for _, b := range h.Buckets {
		for reason, n := range b.ByReason {
			totals[reason] += n
		}
	}
	h.Reasons = h.Reasons[:0]
	for reason, n := range totals {
		h.Reasons = append(h.Reasons, ReasonCount{Reason: reason, Count: n})
	}
	slices.SortFunc(h.Reasons, func(a, b ReasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Reason, b.Reason))
	})
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
