package e2e

import (
	"context"
	"testing"
	"time"
)

// TestSIGTERMUnderLoad sends SIGTERM to a busy worker: it exits 0 within its
// shutdown timeout, having committed only recorded fates, and a fresh
// worker in the same group finishes the rest with nothing lost or sent twice.
func TestSIGTERMUnderLoad(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	const (
		n               = 2000
		shutdownTimeout = 10 * time.Second
		// exitSlack covers process exit and the HTTP server's shutdown.
		exitSlack = 3 * time.Second
	)
	// Few senders keep the worker busy when the signal comes; a short lease
	// bounds the wait should a claimed record be handed back.
	overrides := map[string]string{
		"POSTLINE_SENDERS":          "4",
		"POSTLINE_LEASE":            "5s",
		"POSTLINE_SHUTDOWN_TIMEOUT": shutdownTimeout.String(),
	}
	first := startWorker(t, s.workerEnv("terminated", overrides))
	first.WaitReady(readyTimeout)

	ids := s.publish(newJobs(n, "sigterm")...)
	s.waitSent(n/4, 60*time.Second)

	inFlight, _ := first.Metric(context.Background(), "postline_delivery_in_flight")
	code, elapsed := first.Terminate()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	counts, err := s.statusCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGTERM with %v records in the pipeline: exit code %d after %s; rows by status then: %v",
		inFlight, code, elapsed.Round(time.Millisecond), counts)
	if code != 0 {
		t.Errorf("worker exited with code %d after SIGTERM, want 0", code)
	}
	if elapsed > shutdownTimeout+exitSlack {
		t.Errorf("worker took %s to exit after SIGTERM, want at most %s (+%s slack)", elapsed, shutdownTimeout, exitSlack)
	}
	committed, err := s.checkCommittedRecorded(ctx, s.indexJobs())
	if err != nil {
		t.Fatalf("after SIGTERM: %v", err)
	}
	t.Logf("committed offsets after SIGTERM: %v", committed)

	second := startWorker(t, s.workerEnv("successor", overrides))
	second.WaitReady(readyTimeout)
	s.waitSent(n, 60*time.Second)
	s.waitCommittedToEnd(30 * time.Second)

	got := s.mailbox(ids)
	t.Logf("SMTP duplicates across SIGTERM: %d; mailpit: %s", got.Duplicates, got)
	if got.Total != n || got.Distinct != n || len(got.Missing) != 0 || len(got.Unexpected) != 0 {
		t.Fatalf("want exactly %d messages, each once; got %s", n, got)
	}
}
