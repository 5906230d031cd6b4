package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/postline/postline/bench/internal/benchstats"
	"github.com/postline/postline/internal/redrive"
)

// result is what one benchmark run measured.
type result struct {
	n    int
	rate float64
	// planTime and planned are the dry run's.
	planTime time.Duration
	planned  int
	// runTime and first are the re-drive's, secondTime and second the
	// identical one after it.
	runTime, secondTime time.Duration
	first, second       redrive.Summary
	// published and events are the records on the jobs and events topics
	// after both runs.
	published, events int64
}

// expected is how long re-driving n at rate should take.
func (r result) expected() time.Duration {
	return time.Duration(float64(r.n) / r.rate * float64(time.Second))
}

// deviation is the run's time against the expected, as a signed fraction.
func (r result) deviation() float64 {
	return r.runTime.Seconds()/r.expected().Seconds() - 1
}

// report prints the table and returns an error when the run missed the
// bound or the counts are off.
func report(w io.Writer, o options, r result) error {
	fmt.Fprintf(w, "### Guarded re-drive: %d dead letters with failed rows at %g a second\n\n", r.n, r.rate)
	fmt.Fprintln(w, "| step | re-driven | time | expected | deviation |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	fmt.Fprintf(w, "| dry run (rows read) | %d would be | %s | - | - |\n", r.planned, secs(r.planTime))
	fmt.Fprintf(w, "| re-drive | %d | %s | %s | %+.1f %% |\n", r.first.Redriven, secs(r.runTime), secs(r.expected()), 100*r.deviation())
	fmt.Fprintf(w, "| the same re-drive again | %d | %s | - | - |\n", r.second.Redriven, secs(r.secondTime))
	fmt.Fprintf(w, "\nOn the topics: %d records on the jobs topic, %d redriven events.\n", r.published, r.events)

	var problems []string
	if math.Abs(r.deviation()) > o.tolerance {
		problems = append(problems, fmt.Sprintf("the re-drive took %s, %+.1f %% from %s (tolerance ±%.0f %%)",
			secs(r.runTime), 100*r.deviation(), secs(r.expected()), 100*o.tolerance))
	}
	if r.planned != r.n || r.first.Redriven != r.n || r.published != int64(r.n) || r.events != int64(r.n) {
		problems = append(problems, fmt.Sprintf("want %d planned, re-driven, published and events: got %d, %d, %d, %d",
			r.n, r.planned, r.first.Redriven, r.published, r.events))
	}
	if r.second.Redriven != 0 || r.second.SkippedNotReplayable != r.n {
		problems = append(problems, fmt.Sprintf("the second re-drive re-drove %d and skipped %d, want 0 and %d",
			r.second.Redriven, r.second.SkippedNotReplayable, r.n))
	}
	verdict := benchstats.Verdict(len(problems) == 0)
	fmt.Fprintf(w, "\nWithin ±%.0f %% of n/rate, every dead letter re-driven once, the second run re-drove 0: %s\n", 100*o.tolerance, verdict)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
