package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/job"
)

// TestFailureCircuitSharedByTwoWorkers runs two workers in one group with
// relay a (scripted, priority 1) and relay b (Mailpit, priority 2). When a
// goes down (421 4.3.2 "service not available" to everything, the relay's
// own trouble, not a throttle), both workers report a's circuit open on
// /metrics within 5 s, though only the workers that send through a see the
// failures: the state travels through Postgres. The successes of the
// warm-up, before a's first fault, do not hold the circuit closed. Every
// job is still delivered exactly once, through b. (A relay that throttles
// never opens its circuit: see TestThrottlingRelayNeverOpensTheBreaker.)
func TestFailureCircuitSharedByTwoWorkers(t *testing.T) {
	t.Parallel()
	s := newFailureStack(t, fastTiers)
	sw := newSwitchScript(acceptAll)
	a := smtptest.NewServer(t, smtptest.WithScript(sw.Script))
	relays := relayURL("a", a.Addr(), 1) + "," + relayURL("b", s.mail.SMTPAddr(), 2)
	// A 3 s cool-down keeps the circuit open long enough to be seen
	// between two refreshes (500 ms) without racing the half-open probe.
	overrides := map[string]string{"POSTLINE_CIRCUIT_COOLDOWN": "3s", "POSTLINE_CIRCUIT_MAX_COOLDOWN": "6s"}
	s.startScheduler("scheduler")
	workers := []*workerProc{
		s.startFailWorker("worker-1", relays, overrides),
		s.startFailWorker("worker-2", relays, overrides),
	}
	waitOwnPartitions(t, workers...)

	warm := s.publish(taggedJobs(8, "warm", job.PriorityNormal)...)
	s.waitRows(warm, 30*time.Second, "warm-up jobs sent", statusIs("sent"))

	sw.Set(func(smtptest.Command) *smtptest.Reply {
		return &smtptest.Reply{Code: 421, Enhanced: "4.3.2", Text: "service not available, closing transmission channel"}
	})
	switchedAt := time.Now()
	ids := s.publish(taggedJobs(40, "down", job.PriorityNormal)...)

	seen := make([]time.Duration, len(workers))
	testkit.Eventually(t, 10*time.Second, "a's circuit open on both workers", func(ctx context.Context) (bool, string) {
		var status []string
		for i, w := range workers {
			if seen[i] == 0 {
				v, err := w.Metric(ctx, "postline_circuit_state", "provider", "a", "state", "open")
				if err != nil {
					return false, err.Error()
				}
				if v == 1 {
					seen[i] = time.Since(switchedAt)
				}
			}
			status = append(status, fmt.Sprintf("%s: open seen after %v", w.name, seen[i]))
		}
		return !slices.Contains(seen, 0), strings.Join(status, "; ")
	})
	for i, w := range workers {
		t.Logf("%s saw a's circuit open %s after a went down", w.name, seen[i].Round(time.Millisecond))
		if seen[i] > 5*time.Second {
			t.Errorf("%s saw a's circuit open only %s after a went down, want < 5s", w.name, seen[i].Round(time.Millisecond))
		}
	}

	// Which worker wrote the transition is down to which one met the
	// failures first; the other learnt it from Postgres (or wrote a later
	// one itself).
	for _, w := range workers {
		t.Logf("%s wrote %v transitions of a to open", w.name,
			w.mustMetric("postline_circuit_transitions_total", "provider", "a", "to", "open"))
	}

	all := append(slices.Clone(warm), ids...)
	s.waitRows(all, 45*time.Second, "all sent", statusIs("sent"))
	counts := receivedCounts(a)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := s.mail.MessageIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range got {
		counts[strings.Trim(id, "<>")]++
	}
	var bad []string
	for _, id := range all {
		if counts[id] != 1 {
			bad = append(bad, fmt.Sprintf("%s x%d", id, counts[id]))
		}
	}
	if len(bad) > 0 || len(counts) != len(all) {
		t.Fatalf("want each of %d Message-IDs once over a and b; %d wrong (first %v), %d distinct received",
			len(all), len(bad), bad[:min(3, len(bad))], len(counts))
	}
}

// TestFailureAllRelaysDownPauses starts a worker whose two relays answer
// 421 to every MAIL. Once both circuits open the worker pauses
// (postline_delivery_paused 1); the consumer lag of the jobs topic grows
// with every job published while the delay topics stay nearly empty (only
// the failures before the circuits opened). When the relays recover, every
// job is delivered exactly once.
func TestFailureAllRelaysDownPauses(t *testing.T) {
	t.Parallel()
	s := newFailureStack(t, fastTiers)
	down := func(smtptest.Command) *smtptest.Reply {
		return &smtptest.Reply{Code: 421, Enhanced: "4.3.2", Text: "system not accepting network messages"}
	}
	swA, swB := newSwitchScript(down), newSwitchScript(down)
	a := smtptest.NewServer(t, smtptest.WithScript(swA.Script))
	b := smtptest.NewServer(t, smtptest.WithScript(swB.Script))
	const senders = 4
	s.startScheduler("scheduler")
	w := s.startFailWorker("worker", relayURL("a", a.Addr(), 1)+","+relayURL("b", b.Addr(), 2), map[string]string{
		"POSTLINE_SENDERS": fmt.Sprint(senders),
	})

	const wave = 50
	ids := s.publish(taggedJobs(wave, "down1", job.PriorityNormal)...)
	testkit.Eventually(t, 20*time.Second, "the worker paused", func(ctx context.Context) (bool, string) {
		v, err := w.Metric(ctx, "postline_delivery_paused")
		if err != nil {
			return false, err.Error()
		}
		return v == 1, fmt.Sprintf("paused = %v", v)
	})
	lag1 := s.lag(t)
	ids = append(ids, s.publish(taggedJobs(wave, "down2", job.PriorityNormal)...)...)
	// The second wave is fetched but not sent: lag must grow by it and
	// stay there while the relays are down.
	var lag2 int64
	testkit.Eventually(t, 10*time.Second, "lag grown by the second wave", func(ctx context.Context) (bool, string) {
		lag2 = s.lag(t)
		return lag2 >= lag1+wave, fmt.Sprintf("lag %d after the first wave, %d now", lag1, lag2)
	})
	// The worker resumes for a moment whenever a circuit's cool-down ends
	// (the half-open probe) and pauses again when the probe fails, so it is
	// paused most of the time, not all of it. The lag must not fall: jobs
	// are handed back, not pushed through the delay topics.
	var polls, paused int
	throughout(t, 3*time.Second, "lag kept while every relay is down", func(ctx context.Context) error {
		v, err := w.Metric(ctx, "postline_delivery_paused")
		if err != nil {
			return err
		}
		polls++
		if v == 1 {
			paused++
		}
		if l := s.lag(t); l < lag2-2*senders {
			return fmt.Errorf("lag fell from %d to %d while every relay is down", lag2, l)
		}
		return nil
	})
	t.Logf("paused on %d of %d polls over 3 s", paused, polls)
	if paused*2 < polls {
		t.Errorf("paused on only %d of %d polls while every relay is down", paused, polls)
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
	// A handful: each sender's job in flight when the circuits opened.
	t.Logf("while down: lag %d -> %d of %d published; delay topics hold %d records %v; relays saw %d and %d connections",
		lag1, lag2, 2*wave, retried, volume, a.Connections(), b.Connections())
	if retried > 2*senders {
		t.Errorf("delay topics hold %d records while every relay is down, want at most %d (the failures before the circuits opened)", retried, 2*senders)
	}

	swA.Set(acceptAll)
	swB.Set(acceptAll)
	recovered := time.Now()
	s.waitRows(ids, 45*time.Second, "all sent after recovery", statusIs("sent"))
	t.Logf("all %d sent %s after the relays recovered (a took %d, b took %d)",
		len(ids), time.Since(recovered).Round(time.Millisecond), a.Count(), b.Count())
	checkOnce(t, ids, a, b)
	s.waitCommittedToEnd(30 * time.Second)
	if v := w.mustMetric("postline_delivery_paused"); v != 0 {
		t.Errorf("paused = %v after recovery, want 0", v)
	}
}

// lag is the consumer lag of the jobs topic: end offsets minus committed
// offsets (or the start offset when none is committed), summed.
func (s *stack) lag(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ranges, err := partitionRanges(ctx, s.jobs)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := s.committed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var lag int64
	for p, r := range ranges {
		c := committed[p]
		if c < 0 {
			c = r.Start
		}
		lag += r.End - c
	}
	return lag
}
