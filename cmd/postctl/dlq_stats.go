package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/postline/postline/internal/fleet"
	"github.com/postline/postline/internal/redrive"
)

func newDLQStatsCmd(g *globals) *cobra.Command {
	var (
		since, until string
		bucket       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count dead letters by reason in time buckets: a table, or JSON with --output json",
		Long: `Count the dead letters of --dlq-topic whose dead-letter time is in
[--since, --until) by reason: per bucket of --bucket and in total. Buckets are
aligned to whole multiples of --bucket in UTC (whole hours for 1h), so the first
and the last may be cut short by the window; empty buckets are shown too.

The scan starts, per partition, at the records written a few minutes before
--since (by the broker's time index), so a short window reads little of a long
retention.

--output json prints one object:
  {"since", "until", "bucket_seconds", "total",
   "reasons": [{"reason", "count"}],                      most first, then by name
   "buckets": [{"start", "end", "total", "by_reason": {reason: count}}]}
Times are RFC 3339 in UTC; a dead letter without a reason header counts under "".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			now := time.Now()
			window, err := redrive.FilterSpec{Since: since, Until: until}.Parse(now, flagName)
			if err != nil {
				return usageError{err}
			}
			if window.Since.IsZero() {
				return usagef("--since is empty: the histogram needs a start")
			}
			if bucket <= 0 {
				return usagef("--bucket %s: must be positive", bucket)
			}
			q := fleet.HistogramQuery{Since: window.Since, Until: window.Until, Bucket: bucket}
			return dlqStats(cmd.Context(), g, q, now)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&since, "since", "24h", "count dead letters from this time on (RFC 3339, or a duration ago: 2h, 7d)")
	fl.StringVar(&until, "until", "", "count dead letters before this time (RFC 3339, or a duration ago; default now)")
	fl.DurationVar(&bucket, "bucket", time.Hour, "bucket size (a Go duration: 10m, 1h, 24h)")
	return cmd
}

func dlqStats(ctx context.Context, g *globals, q fleet.HistogramQuery, now time.Time) error {
	r, err := fleet.New(fleet.Config{Kafka: g.kafka, DeadLetterTopic: g.dlqTopic, Now: func() time.Time { return now }})
	if err != nil {
		return err
	}
	h, err := r.DeadLetterHistogram(ctx, q)
	if err != nil {
		return usageOrFailure(err)
	}
	return printReport(g, h, func() error { return writeHistogram(g, h) })
}

// usageOrFailure makes a query the histogram refuses (too many buckets) a
// usage error; reading failures stay failures.
func usageOrFailure(err error) error {
	var qe *fleet.QueryError
	if errors.As(err, &qe) {
		return usageError{err}
	}
	return err
}

// writeHistogram writes a summary line and a table: a row per bucket, a
// column per reason, and a row of totals.
func writeHistogram(g *globals, h fleet.Histogram) error {
	fmt.Fprintf(g.stdout, "%d %s in %s from %s to %s, by %s\n", h.Total, plural(h.Total, "dead letter", "dead letters"),
		g.dlqTopic, formatTime(h.Since), formatTime(h.Until), shortDuration(h.Bucket))
	header := []string{"START", "TOTAL"}
	for _, rc := range h.Reasons {
		header = append(header, oneLine(rc.Reason, 40))
	}
	var rows [][]string
	for _, b := range h.Buckets {
		row := []string{formatTime(b.Start), strconv.Itoa(b.Total)}
		for _, rc := range h.Reasons {
			row = append(row, strconv.Itoa(b.ByReason[rc.Reason]))
		}
		rows = append(rows, row)
	}
	total := []string{"TOTAL", strconv.Itoa(h.Total)}
	for _, rc := range h.Reasons {
		total = append(total, strconv.Itoa(rc.Count))
	}
	return writeTable(g.stdout, header, append(rows, total))
}

// shortDuration drops a duration's zero trailing units: 1h, 10m, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
