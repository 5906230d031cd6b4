package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/job"
)

// TestFailureSchedulerKillNine throttles each of 200 jobs once (452 4.4.5
// with a 2 s hint), kills the retry-scheduler with SIGKILL once it has
// re-injected some of the copies, and starts a new one in the same group:
// no retry is lost (every job ends sent at attempt 2) and the copies the
// new scheduler re-injects again are absorbed by the rows (each Message-ID
// reaches the relay once).
func TestFailureSchedulerKillNine(t *testing.T) {
	t.Parallel()
	s := newFailureStack(t, fastTiers)
	const n = 200
	srv := smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		if c.Verb == smtptest.VerbRcpt && c.Attempt == 1 {
			// The delay spreads the failures, so the copies fall due over
			// a while and the kill lands in the middle of re-injection.
			return &smtptest.Reply{Code: 452, Enhanced: "4.4.5", Text: "busy, try again in 2 seconds", Delay: 10 * time.Millisecond}
		}
		return nil
	}))
	first := s.startScheduler("scheduler-1")
	s.startFailWorker("worker", relayURL("a", srv.Addr(), 1), map[string]string{
		"POSTLINE_SENDERS":           "2",
		"POSTLINE_CIRCUIT_THRESHOLD": "100000",
	})

	ids := s.publish(taggedJobs(n, "kill", job.PriorityNormal)...)
	var reinjected float64
	testkit.Eventually(t, 30*time.Second, "the first scheduler re-injecting", func(ctx context.Context) (bool, string) {
		v, err := first.Metric(ctx, "postline_scheduler_reinjected_total")
		if err != nil {
			return false, err.Error()
		}
		reinjected = v
		return v > 0, fmt.Sprintf("%v re-injected", v)
	})
	first.Kill()
	killedAt := time.Now()
	t.Logf("SIGKILL of the scheduler after %v of %d re-injections", reinjected, n)
	if reinjected >= n {
		t.Logf("the kill came after every re-injection; it still checks that a restart re-injects nothing twice to the relay")
	}
	second := s.startScheduler("scheduler-2")

	rows := s.waitRows(ids, 60*time.Second, "all sent", statusIs("sent"))
	t.Logf("all %d sent %s after the kill", n, time.Since(killedAt).Round(time.Millisecond))
	for id, r := range rows {
		if r.Attempt != 2 {
			t.Errorf("%s: row %+v, want sent at attempt 2", id, r)
			break
		}
	}
	s.waitCommittedToEnd(30 * time.Second)
	checkOnce(t, ids, srv)

	// How many copies were re-injected twice: the jobs topic holds the n
	// first publications and every re-injection.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ranges, err := partitionRanges(ctx, s.jobs)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, r := range ranges {
		total += r.End - r.Start
	}
	if total < 2*n {
		t.Fatalf("jobs topic holds %d records, want at least %d (each job and its retry)", total, 2*n)
	}
	t.Logf("re-injections: %d for %d retries (%d duplicates after the kill, deduplicated by the rows)", total-n, n, total-2*n)
	fams, err := second.families(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p99, count, err := histogramQuantile(fams, "postline_scheduler_lateness_seconds", 0.99); err != nil {
		t.Error(err)
	} else {
		t.Logf("second scheduler: lateness p99 %.3f s over %d re-injections (a burst, after a takeover)", p99, count)
	}
}
