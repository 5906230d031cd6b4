package console

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/postline/postline/internal/fleet"
)

// The histogram form's defaults (postctl dlq stats's) and bounds.
const (
	defaultHistogramSince  = "24h"
	defaultHistogramBucket = "1h"
	minHistogramBucket     = time.Minute
	// maxPageBuckets bounds the rows of the queues page's table; the API
	// takes up to fleet.MaxBuckets.
	maxPageBuckets = 500
)

// histogramForm is the dead-letter histogram's form as typed.
type histogramForm struct {
	Since, Until, Bucket string
}

// readHistogramForm reads the form from a query, with the defaults for
// fields not given.
func readHistogramForm(q url.Values) histogramForm {
	get := func(name, fallback string) string {
		if v := strings.TrimSpace(q.Get(name)); v != "" {
			return v
		}
		return fallback
	}
	return histogramForm{Since: get("since", defaultHistogramSince), Until: get("until", ""), Bucket: get("bucket", defaultHistogramBucket)}
}

// auditedWindow is a histogram's window as the audit log keeps it.
type auditedWindow struct {
	Since  string `json:"since"`
	Until  string `json:"until,omitempty"`
	Bucket string `json:"bucket"`
}

// parseHistogramQuery checks the form: since and until as the other
// forms take them (an open until is now), a bucket of at least a minute,
// and at most maxBuckets buckets. An inputError names the field.
func parseHistogramQuery(f histogramForm, now time.Time, maxBuckets int) (fleet.HistogramQuery, error) {
	if err := checkFields(field{"Since", f.Since, maxReasonBytes}, field{"Until", f.Until, maxReasonBytes},
		field{"Bucket", f.Bucket, maxReasonBytes}); err != nil {
		return fleet.HistogramQuery{}, err
	}
	since, err := parseWhen("Since", f.Since, now)
	if err != nil {
		return fleet.HistogramQuery{}, err
	}
	until, err := parseWhen("Until", f.Until, now)
	if err != nil {
		return fleet.HistogramQuery{}, err
	}
	if until.IsZero() {
		until = now.UTC()
	}
	if !since.Before(until) {
		return fleet.HistogramQuery{}, inputError{"Since must be before Until."}
	}
	bucket, err := parseBucket(f.Bucket)
	if err != nil {
		return fleet.HistogramQuery{}, err
	}
	// As fleet counts them: buckets aligned to multiples of the size.
	span := until.Sub(since.Truncate(bucket))
	if n := (span + bucket - 1) / bucket; n > time.Duration(maxBuckets) {
		return fleet.HistogramQuery{}, inputError{fmt.Sprintf("That window is %d buckets of %s: at most %d. Take a larger bucket or a shorter window.",
			n, f.Bucket, maxBuckets)}
	}
	return fleet.HistogramQuery{Since: since, Until: until, Bucket: bucket}, nil
}

// parseBucket reads a bucket size: a Go duration (10m, 1h) or whole days
// (1d), at least minHistogramBucket.
func parseBucket(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if days, ok := strings.CutSuffix(v, "d"); ok {
		var n int
		if n, err = strconv.Atoi(days); err == nil && n > 0 && n <= 366 {
			d = time.Duration(n) * 24 * time.Hour
		}
	}
	if err != nil || d < minHistogramBucket {
		return 0, inputError{fmt.Sprintf("Bucket %q is not a bucket size: give a duration of at least 1m, such as 10m, 1h or 1d.", v)}
	}
	return d, nil
}

// window is q as the audit log keeps it, and the times of the links to
// the dead letters: absolute, in UTC.
func window(q fleet.HistogramQuery, bucket string) auditedWindow {
	return auditedWindow{Since: absolute(q.Since), Until: absolute(q.Until), Bucket: bucket}
}
