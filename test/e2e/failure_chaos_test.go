package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/job"
)

// TestFailureMailpitChaos delivers through a Mailpit whose chaos triggers
// answer 451 to 30% of RCPT commands: a fault injector this project did not
// write. Every job ends sent (the failures retry through the delay tiers)
// and Mailpit holds each Message-ID once.
func TestFailureMailpitChaos(t *testing.T) {
	t.Parallel()
	s := newFailureStack(t, "500ms,1s,2s")
	chaos := testenv.StartMailpit(t, testenv.WithMailpitArgs("--enable-chaos", "--chaos-triggers", "Recipient:451:30"))
	s.startScheduler("scheduler")
	w := s.startFailWorker("worker", relayURL("chaos", chaos.SMTPAddr(), 1), map[string]string{
		// 30% failures: 20 attempts make a dead job (0.3^20) impossible
		// in practice.
		"POSTLINE_MAX_ATTEMPTS": "urgent=20,normal=20,bulk=20",
	})

	const n = 100
	ids := s.publish(taggedJobs(n, "chaos", job.PriorityNormal)...)
	start := time.Now()
	rows := s.waitRows(ids, 45*time.Second, "all sent", statusIs("sent"))
	maxAttempt := 0
	for _, r := range rows {
		maxAttempt = max(maxAttempt, r.Attempt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	volume, err := s.tierVolume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var retried int64
	for _, v := range volume {
		retried += v
	}
	t.Logf("all %d sent in %s; %d retries through the tiers %v; highest attempt %d; %v chaos failures counted by the worker",
		n, time.Since(start).Round(time.Millisecond), retried, volume, maxAttempt,
		w.mustMetric("postline_delivery_attempts_total", "provider", "chaos", "result", "transient"))
	if retried == 0 {
		t.Errorf("no job was retried: the chaos triggers did not fire")
	}

	if err := chaos.WaitCount(ctx, n); err != nil {
		t.Fatal(err)
	}
	got, err := chaos.MessageIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[string]int, len(got))
	for _, id := range got {
		seen[strings.Trim(id, "<>")]++
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("mailpit holds %s %d times, want once", id, seen[id])
		}
	}
	if len(got) != n {
		t.Errorf("mailpit holds %d messages, want %d", len(got), n)
	}
}
