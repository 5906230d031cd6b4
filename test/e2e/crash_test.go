package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/postline/postline/internal/testkit"
)

// TestKillNineOneOfTwoWorkers runs two workers in one group, kills one with
// SIGKILL under load, and checks that every job still ends sent and that the
// SMTP server saw at most the killed worker's in-flight sends twice.
func TestKillNineOneOfTwoWorkers(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	const (
		n         = 3000
		senders   = 8
		batchSize = 32
	)
	// A short lease lets the survivor take over the killed worker's claimed
	// rows soon after the session timeout (6s) hands it their partitions.
	overrides := map[string]string{
		"POSTLINE_SENDERS":    strconv.Itoa(senders),
		"POSTLINE_BATCH_SIZE": strconv.Itoa(batchSize),
		"POSTLINE_LEASE":      "3s",
	}
	victim := startWorker(t, s.workerEnv("victim", overrides))
	survivor := startWorker(t, s.workerEnv("survivor", overrides))

	// Both must own partitions before the load starts, so the kill takes
	// work away from a member that is really consuming.
	testkit.Eventually(t, readyTimeout, "both workers ready with partitions", func(ctx context.Context) (bool, string) {
		var status string
		for _, w := range []*workerProc{victim, survivor} {
			if !w.running() {
				t.Fatalf("worker %s exited (%v)", w.name, w.state)
			}
			ready, reason := w.Ready(ctx)
			parts, err := w.Metric(ctx, "postline_consumer_assigned_partitions")
			if err != nil {
				return false, err.Error()
			}
			status += fmt.Sprintf("%s: ready=%v (%s), partitions=%v; ", w.name, ready, reason, parts)
			if !ready || parts == 0 {
				return false, status
			}
		}
		return true, status
	})

	ids := s.publish(newJobs(n, "kill -9")...)
	start := time.Now()
	s.waitSent(n/3, 60*time.Second)
	inFlight, _ := victim.Metric(context.Background(), "postline_delivery_in_flight")
	victimSent, _ := victim.Metric(context.Background(), "postline_delivery_records_total", "outcome", "sent")
	victim.Kill()
	killedAt := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	sentAtKill := s.sentCount(ctx)
	cancel()
	t.Logf("SIGKILL %s after %s: %d rows sent, %v sent by it, %v records in its pipeline",
		victim.name, killedAt.Sub(start).Round(time.Millisecond), sentAtKill, victimSent, inFlight)
	// What the killed worker committed must be recorded: SIGKILL gives it
	// no chance to tidy up.
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	committed, err := s.checkCommittedRecorded(ctx, s.indexJobs())
	cancel()
	if err != nil {
		t.Fatalf("after kill -9: %v", err)
	}
	t.Logf("committed offsets just after the kill: %v", committed)

	s.waitSent(n, 60*time.Second)
	t.Logf("all %d rows sent %s after the kill", n, time.Since(killedAt).Round(time.Millisecond))
	s.waitCommittedToEnd(30 * time.Second)

	got := s.mailbox(ids)
	// The killed worker can have handed a mail to the relay without having
	// recorded it as sent: one per sending goroutine (POSTLINE_SENDERS),
	// plus the records waiting for the recorder (a queue of
	// POSTLINE_BATCH_SIZE) and the batch the recorder was writing
	// (POSTLINE_BATCH_SIZE). Those rows stay 'sending' under its lease; once
	// the lease ends the survivor claims and sends them again. Every other
	// record is either recorded (a redelivery is a duplicate claim, not a
	// send) or was never sent.
	bound := senders + 2*batchSize
	t.Logf("SMTP duplicates after kill -9: %d (bound %d); mailpit: %s", got.Duplicates, bound, got)
	if got.Distinct != n || len(got.Missing) != 0 || len(got.Unexpected) != 0 {
		t.Fatalf("want all %d Message-IDs delivered; got %s", n, got)
	}
	if got.Duplicates > bound {
		t.Fatalf("%d duplicate sends, more than the %d the killed worker can have had in flight", got.Duplicates, bound)
	}
}
