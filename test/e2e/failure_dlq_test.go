package e2e

import (
	"bufio"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/job"
)

// replaySummary is what postctl dlq replay --output json prints.
type replaySummary struct {
	Matched              int `json:"matched"`
	Replayed             int `json:"replayed"`
	SkippedInvalid       int `json:"skipped_invalid"`
	SkippedNotReplayable int `json:"skipped_not_replayable"`
	Unsuppressed         int `json:"unsuppressed"`
}

// TestFailureDLQReplayDeliversOnce has a relay reject every recipient
// permanently (550 5.1.1), so each job is failed and dead-lettered; then the
// relay is "repaired" (it accepts) and the built postctl replays the dead
// letters twice in a row, and once more after delivery. Every job is
// delivered exactly once.
func TestFailureDLQReplayDeliversOnce(t *testing.T) {
	t.Parallel()
	s := newFailureStack(t, fastTiers)
	var repaired atomic.Bool
	srv := smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		if c.Verb == smtptest.VerbRcpt && !repaired.Load() {
			return &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "mailbox unavailable"}
		}
		return nil
	}))
	s.startScheduler("scheduler")
	s.startFailWorker("worker", relayURL("a", srv.Addr(), 1), nil)

	const n = 10
	ids := s.publish(taggedJobs(n, "replay", job.PriorityNormal)...)
	s.waitRows(ids, 30*time.Second, "all failed", statusIs("failed"))
	s.readDLQ(n, 20*time.Second)

	var listed int
	sc := bufio.NewScanner(strings.NewReader(s.postctl("dlq", "ls", "--output", "json")))
	for sc.Scan() {
		var l struct {
			MessageID string `json:"message_id"`
			Reason    string `json:"reason"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("dlq ls line %q: %v", sc.Text(), err)
		}
		if l.Reason != deadletter.ReasonSMTPPermanent {
			t.Errorf("dlq ls: %s has reason %q, want %s", l.MessageID, l.Reason, deadletter.ReasonSMTPPermanent)
		}
		listed++
	}
	if listed != n {
		t.Errorf("dlq ls listed %d dead letters, want %d", listed, n)
	}

	repaired.Store(true)
	replay := func() replaySummary {
		t.Helper()
		var sum replaySummary
		out := s.postctl("dlq", "replay", "--yes", "--reason", deadletter.ReasonSMTPPermanent, "--output", "json")
		if err := json.Unmarshal([]byte(out), &sum); err != nil {
			t.Fatalf("dlq replay output %q: %v", out, err)
		}
		return sum
	}
	first, second := replay(), replay()
	// The 550 5.1.1 put each address on the suppression lists; the replay
	// says that refusal was wrong and lifts what it added, or the replayed
	// jobs would be suppressed.
	if first.Matched != n || first.Replayed != n || first.Unsuppressed != n {
		t.Errorf("first replay: %+v, want %d matched, replayed and unsuppressed", first, n)
	}
	if second.Matched != n || second.Replayed != 0 || second.SkippedNotReplayable != n {
		t.Errorf("second replay: %+v, want %d matched, none replayed (rows already reset)", second, n)
	}

	rows := s.waitRows(ids, 30*time.Second, "all sent after the replay", statusIs("sent"))
	if third := replay(); third.Replayed != 0 {
		t.Errorf("replay after delivery: %+v, want none replayed (rows sent)", third)
	}
	for id, r := range rows {
		if r.Attempt != 1 {
			t.Errorf("%s: row %+v, want sent at attempt 1 (attempts reset by the replay)", id, r)
			break
		}
	}
	s.waitCommittedToEnd(30 * time.Second)
	checkOnce(t, ids, srv)
}
