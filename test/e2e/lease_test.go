package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/postline/postline/bench/relay"
)

// TestLeaseKeptWhileJobsWaitForAThrottledRelay is the regression test of
// leases lapsing under throttling. A worker claims a batch of jobs (up to
// POSTLINE_BATCH_SIZE, 256) at once and then feeds them to its senders,
// which wait for a relay slot: pacing, adaptive concurrency, resends
// of throttled sends. Against a relay of 20 mails/s, 1,000 jobs take at
// least 50 s, so a claimed job waits many seconds before its transaction;
// with a 2 s lease and a reaper that takes over rows 1 s past their lease,
// every such job would be re-published while its first worker still sends
// it, and delivered twice. The lease keeper extends the leases of the jobs
// a worker holds, so the test demands:
//   - every Message-ID accepted exactly once by the relay (the relay's own
//     record of accepted Message-IDs, over real SMTP on loopback);
//   - no reaper takeover on either worker (postline_reaper_takeovers_total);
//   - leases were in fact extended (postline_idempotency_lease_extensions_total),
//     so the run did exercise the keeper rather than finish within a lease.
func TestLeaseKeptWhileJobsWaitForAThrottledRelay(t *testing.T) {
	const (
		jobs      = 1000
		relayRate = 20 // mails/s the relay accepts; beyond it 450 4.7.1
		workers   = 2
	)
	s := newFailureStack(t, fastTiers)
	r, err := relay.Start(relay.Config{Rate: relayRate, Burst: relayRate}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	// Throttled jobs that exhaust their resends come back through the
	// delay tiers.
	s.startScheduler("scheduler")

	relays := fmt.Sprintf("smtp://%s?name=relay&tls=none", r.Addr())
	procs := make([]*workerProc, workers)
	for i := range procs {
		env := s.failEnv(fmt.Sprintf("worker-%d", i), relays, map[string]string{
			"POSTLINE_LEASE":           "2s",
			"POSTLINE_REAPER_INTERVAL": "1s",
			"POSTLINE_REAPER_GRACE":    "1s",
			// This test is about leases, not the breaker: throttling must
			// not open the circuit and hand back the jobs instead.
			"POSTLINE_CIRCUIT_THRESHOLD": "1000",
		})
		delete(env, "POSTLINE_SENDERS") // the default pool, as in production
		procs[i] = startWorker(t, env)
	}
	for _, w := range procs {
		w.WaitReady(readyTimeout)
	}

	start := time.Now()
	ids := s.publish(newJobs(jobs, "lease")...)
	// Not waitSent: when leases lapse, the takeovers and duplicates below
	// say why far better than a timeout does, so they are checked anyway.
	allSent := waitAllSent(s.stack, jobs, 3*time.Minute)
	elapsed := time.Since(start)
	if allSent {
		// Every record, re-published copies included, is finished: a late
		// duplicate send would have happened by now.
		s.waitCommittedToEnd(time.Minute)
	}

	st := r.Stats()
	accepted := make(map[string]int, len(st.AcceptedIDs))
	for _, id := range st.AcceptedIDs {
		accepted[id]++
	}
	var missing, dup []string
	for _, id := range ids {
		switch n := accepted[id]; {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			dup = append(dup, fmt.Sprintf("%s x%d", id, n))
		}
		delete(accepted, id)
	}
	if len(missing) > 0 || len(dup) > 0 || len(accepted) > 0 {
		t.Errorf("relay accepted %d mails; want each of %d Message-IDs once: %d missing (first %v), %d duplicated (first %v), %d unexpected",
			st.Accepted, jobs, len(missing), missing[:min(3, len(missing))], len(dup), dup[:min(3, len(dup))], len(accepted))
	}

	var takeovers, extensions float64
	for _, w := range procs {
		takeovers += w.mustMetric("postline_reaper_takeovers_total")
		extensions += w.mustMetric("postline_idempotency_lease_extensions_total")
	}
	t.Logf("%d jobs sent in %s (%.1f/s) through a %d/s relay: %d attempts, %d throttled; %v lease extensions (%.1f per job), %v takeovers",
		jobs, elapsed.Round(time.Millisecond), float64(jobs)/elapsed.Seconds(), relayRate,
		st.Attempts(), st.Throttled, extensions, extensions/jobs, takeovers)
	if takeovers != 0 {
		t.Errorf("the reapers took over %v rows of live jobs, want 0", takeovers)
	}
	if extensions <= 0 {
		t.Errorf("no lease was extended (postline_idempotency_lease_extensions_total %v): the run never held a job past a lease", extensions)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	counts, err := s.statusCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts["sent"] != jobs || len(counts) != 1 {
		t.Errorf("rows by status %v, want all %d sent", counts, jobs)
	}
}

// waitAllSent polls until n rows are sent and reports whether they were
// within timeout; unlike waitSent it does not end the test, and it logs the
// rows by status when time ran out.
func waitAllSent(s *stack, n int, timeout time.Duration) bool {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	var last map[string]int
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		counts, err := s.statusCounts(ctx)
		cancel()
		if err == nil {
			if counts["sent"] >= n {
				return true
			}
			last = counts
		}
		if time.Now().After(deadline) {
			s.t.Errorf("after %s only %d of %d rows are sent; rows by status %v", timeout, last["sent"], n, last)
			return false
		}
		time.Sleep(250 * time.Millisecond)
	}
}
