package e2e

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/job"
)

// TestFailureTransientThriceThenDelivered fails one job transiently on its
// first three attempts (no resends, so each failure is one attempt
// through a delay tier and the scheduler) and accepts the fourth: the job is
// delivered exactly once and its row records 4 attempts. It logs the p99 of
// the scheduler's lateness histogram on this quiet run.
func TestFailureTransientThriceThenDelivered(t *testing.T) {
	t.Parallel()
	s := newFailureStack(t, "500ms,1s,2s")
	jobs := taggedJobs(1, "thrice", job.PriorityNormal)
	var log commandLog
	srv := smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		log.record(c)
		if c.Verb == smtptest.VerbRcpt && c.Attempt <= 3 {
			return &smtptest.Reply{Code: 451, Enhanced: "4.3.0", Text: "temporary local problem"}
		}
		return nil
	}))
	sched := s.startScheduler("scheduler")
	s.startFailWorker("worker", relayURL("a", srv.Addr(), 1), map[string]string{
		"POSTLINE_FAST_RETRIES":      "-1",
		"POSTLINE_CIRCUIT_THRESHOLD": "1000",
	})

	ids := s.publish(jobs...)
	start := time.Now()
	rows := s.waitRows(ids, 30*time.Second, "the job sent", statusIs("sent"))
	if r := rows[ids[0]]; r.Attempt != 4 {
		t.Errorf("row %+v, want attempt 4", r)
	}
	if n := len(log.times(smtptest.VerbRcpt, jobs[0].To[0])); n != 4 {
		t.Errorf("relay saw %d RCPTs, want 4", n)
	}
	checkOnce(t, ids, srv)

	if got := sched.mustMetric("postline_scheduler_reinjected_total"); got != 3 {
		t.Errorf("scheduler re-injected %v records, want 3", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fams, err := sched.families(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p99, n, err := histogramQuantile(fams, "postline_scheduler_lateness_seconds", 0.99)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 || math.IsNaN(p99) {
		t.Errorf("lateness histogram holds %d observations (p99 %v), want 3", n, p99)
	}
	t.Logf("delivered at attempt 4 after %s; scheduler lateness p99 = %.4f s over %d re-injections (quiet run)",
		time.Since(start).Round(time.Millisecond), p99, n)
}

// TestFailureLimitsMakeJobsDead checks both retry limits end to end:
//   - max attempts: a normal job throttled with a 1 s hint on every attempt
//     (POSTLINE_MAX_ATTEMPTS normal=3) is dead after its third attempt,
//     with a max_attempts dead letter;
//   - max age: a bulk job (POSTLINE_MAX_AGE bulk=2s) is throttled once
//     with a 3 s hint and waits in the 4 s tier; when it comes back it is
//     past its age and dead (max_age) without another send.
func TestFailureLimitsMakeJobsDead(t *testing.T) {
	t.Parallel()
	s := newFailureStack(t, fastTiers)
	attemptsJob := taggedJobs(1, "attempts", job.PriorityNormal)[0]
	ageJob := taggedJobs(1, "age", job.PriorityBulk)[0]
	var log commandLog
	srv := smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		log.record(c)
		if c.Verb != smtptest.VerbRcpt {
			return nil
		}
		switch c.Arg {
		case attemptsJob.To[0]:
			return &smtptest.Reply{Code: 452, Enhanced: "4.4.5", Text: "slow down, try again in 1 seconds"}
		case ageJob.To[0]:
			return &smtptest.Reply{Code: 452, Enhanced: "4.4.5", Text: "busy, try again in 3 seconds"}
		}
		return nil
	}))
	s.startScheduler("scheduler")
	s.startFailWorker("worker", relayURL("a", srv.Addr(), 1), map[string]string{
		"POSTLINE_FAST_RETRIES":      "-1",
		"POSTLINE_CIRCUIT_THRESHOLD": "1000",
		"POSTLINE_MAX_ATTEMPTS":      "urgent=10,normal=3,bulk=10",
		"POSTLINE_MAX_AGE":           "urgent=6h,normal=24h,bulk=2s",
	})

	ids := s.publish(attemptsJob, ageJob)
	start := time.Now()
	attemptsID, ageID := ids[0], ids[1]
	rows := s.waitRows(ids, 30*time.Second, "both jobs dead", statusIs("dead"))
	t.Logf("both dead after %s: %+v", time.Since(start).Round(time.Millisecond), rows)
	if r := rows[attemptsID]; r.Attempt != 3 {
		t.Errorf("max-attempts job: row %+v, want attempt 3", r)
	}
	if n := len(log.times(smtptest.VerbRcpt, attemptsJob.To[0])); n != 3 {
		t.Errorf("max-attempts job: relay saw %d RCPTs, want 3", n)
	}
	if n := len(log.times(smtptest.VerbRcpt, ageJob.To[0])); n != 1 {
		t.Errorf("max-age job: relay saw %d RCPTs, want 1 (dead when it came back, not sent again)", n)
	}

	reasons := make(map[string]string)
	for _, d := range s.readDLQ(2, 20*time.Second) {
		reasons[string(d.Key)] = d.Reason
	}
	if reasons[attemptsID] != deadletter.ReasonMaxAttempts || reasons[ageID] != deadletter.ReasonMaxAge {
		t.Errorf("dead-letter reasons %v, want %s for %s and %s for %s",
			reasons, deadletter.ReasonMaxAttempts, attemptsID, deadletter.ReasonMaxAge, ageID)
	}

	// The max-age job did wait in a tier: its copy is in the 4 s topic, and
	// it died only once that copy was due.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	copies := s.retryCopies(ctx)
	if len(copies[ageID]) != 1 {
		t.Fatalf("max-age job: %d retry copies, want 1", len(copies[ageID]))
	}
	notBefore, ok := jobheader.NotBefore(copies[ageID][0].Headers)
	if !ok {
		t.Fatalf("max-age copy has no not-before header")
	}
	var deadAt time.Time
	if err := s.db.QueryRow(ctx, "SELECT updated_at FROM postline_messages WHERE message_id = $1", ageID).Scan(&deadAt); err != nil {
		t.Fatal(err)
	}
	if deadAt.Before(notBefore) {
		t.Errorf("max-age job dead at %s, before its copy was due (%s): want it dead when it comes back",
			deadAt.Format(time.RFC3339Nano), notBefore.Format(time.RFC3339Nano))
	}
	if n := len(copies[attemptsID]); n != 2 {
		t.Errorf("max-attempts job: %d retry copies, want 2 (attempts 2 and 3)", n)
	}
}
