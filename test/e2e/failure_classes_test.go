package e2e

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/job"
)

// TestFailureClassesRoute sends three jobs through one scripted relay, each
// failing with a different class, and follows each through the real worker,
// delay topics and retry-scheduler:
//   - permanent (550 5.1.1 on RCPT): row failed, a smtp_permanent dead
//     letter, no retry copy, one RCPT only;
//   - throttled (452 4.4.5 "try again in 2 seconds", once): a copy in the 2s
//     tier with attempt 2, not-before at least the hint after the failure
//     and last-class throttled, delivered after not-before;
//   - transient (421 without an enhanced code, four times): the
//     resends (1 + POSTLINE_FAST_RETRIES RCPTs within about 2 s), then a
//     copy in a tier, then delivered.
func TestFailureClassesRoute(t *testing.T) {
	t.Parallel()
	s := newFailureStack(t, fastTiers)
	const resends = 3

	perm := taggedJobs(1, "perm", job.PriorityNormal)
	throttled := taggedJobs(1, "throttle", job.PriorityNormal)
	transient := taggedJobs(1, "transient", job.PriorityNormal)
	var (
		log        commandLog
		throttleAt atomic.Int64 // when the throttling reply was decided, Unix ns
	)
	srv := smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		log.record(c)
		if c.Verb != smtptest.VerbRcpt {
			return nil
		}
		switch c.Arg {
		case perm[0].To[0]:
			return &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "no such user here"}
		case throttled[0].To[0]:
			if c.Attempt == 1 {
				throttleAt.Store(time.Now().UnixNano())
				return &smtptest.Reply{Code: 452, Enhanced: "4.4.5", Text: "too busy, try again in 2 seconds"}
			}
		case transient[0].To[0]:
			if c.Attempt <= 1+resends {
				return &smtptest.Reply{Code: 421, Text: "service not available, closing channel"}
			}
		}
		return nil
	}))
	s.startScheduler("scheduler")
	s.startFailWorker("worker", relayURL("a", srv.Addr(), 1), map[string]string{
		"POSTLINE_FAST_RETRIES": "3",
		// Four 421s in a row must not open the only relay's circuit here.
		"POSTLINE_CIRCUIT_THRESHOLD": "1000",
	})

	ids := s.publish(perm[0], throttled[0], transient[0])
	permID, throttleID, transientID := ids[0], ids[1], ids[2]

	rows := s.waitRows(ids, 30*time.Second, "permanent failed, the others sent", func(r msgRow) bool {
		return r.Status == "failed" || r.Status == "sent"
	})

	// Permanent: failed, dead-lettered, never retried.
	if r := rows[permID]; r.Status != "failed" || r.Attempt != 1 || r.ErrorClass != "permanent" {
		t.Errorf("permanent job's row = %+v, want failed, attempt 1, class permanent", r)
	}
	dl := s.readDLQ(1, 20*time.Second)
	if string(dl[0].Key) != permID || dl[0].Reason != deadletter.ReasonSMTPPermanent {
		t.Errorf("dead letter key %q reason %q, want %q %q", dl[0].Key, dl[0].Reason, permID, deadletter.ReasonSMTPPermanent)
	}
	if n := len(log.times(smtptest.VerbRcpt, perm[0].To[0])); n != 1 {
		t.Errorf("permanent job: relay saw %d RCPTs, want 1 (no retry)", n)
	}

	// Throttled: one copy in the tier that honours the 2s hint.
	if r := rows[throttleID]; r.Status != "sent" || r.Attempt != 2 {
		t.Errorf("throttled job's row = %+v, want sent at attempt 2", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	copies := s.retryCopies(ctx)
	if _, ok := copies[permID]; ok {
		t.Errorf("permanent job has a retry copy in %v", copies[permID])
	}
	tc := copies[throttleID]
	if len(tc) != 1 {
		t.Fatalf("throttled job: %d retry copies, want 1", len(tc))
	}
	if want := s.tierTopic(2 * time.Second); tc[0].Topic != want {
		t.Errorf("throttled job's copy went to %s, want %s (the tier of the 2 s hint)", tc[0].Topic, want)
	}
	notBefore, ok := jobheader.NotBefore(tc[0].Headers)
	failedAt := time.Unix(0, throttleAt.Load())
	switch {
	case !ok:
		t.Errorf("throttled copy has no valid %s header: %v", jobheader.KeyNotBefore, tc[0].Headers)
	case notBefore.Before(failedAt.Add(2 * time.Second)):
		t.Errorf("throttled copy not-before %s is earlier than the failure (%s) plus the 2 s hint",
			notBefore.Format(time.RFC3339Nano), failedAt.Format(time.RFC3339Nano))
	}
	if a := headerInt(tc[0], jobheader.KeyAttempt); a != 2 {
		t.Errorf("throttled copy attempt header = %d, want 2", a)
	}
	if c := testkit.Header(tc[0].Headers, jobheader.KeyLastClass); c != "throttled" {
		t.Errorf("throttled copy last-class header = %q, want throttled", c)
	}
	if data := log.times(smtptest.VerbData, throttleID); len(data) != 1 || data[0].Before(notBefore) {
		t.Errorf("throttled job: DATA at %v, want once, not before %s", data, notBefore.Format(time.RFC3339Nano))
	}

	// Transient: the resends, then a tier.
	if r := rows[transientID]; r.Status != "sent" || r.Attempt != 2 {
		t.Errorf("transient job's row = %+v, want sent at attempt 2", r)
	}
	rcpts := log.times(smtptest.VerbRcpt, transient[0].To[0])
	if len(rcpts) != 2+resends {
		t.Fatalf("transient job: relay saw %d RCPTs, want %d (1 + %d resends failing, 1 accepted)", len(rcpts), 2+resends, resends)
	}
	if burst := rcpts[resends].Sub(rcpts[0]); burst > 2500*time.Millisecond {
		t.Errorf("transient job: the %d sends took %s, want about 2 s at most", 1+resends, burst)
	}
	tr := copies[transientID]
	if len(tr) != 1 {
		t.Fatalf("transient job: %d retry copies, want 1 after the resends", len(tr))
	}
	if a, c := headerInt(tr[0], jobheader.KeyAttempt), testkit.Header(tr[0].Headers, jobheader.KeyLastClass); a != 2 || c != "transient" {
		t.Errorf("transient copy: attempt %d, last-class %q; want 2, transient", a, c)
	}
	t.Logf("transient: %d RCPTs in %s, copy in %s, delivered %s after the first try",
		len(rcpts), rcpts[resends].Sub(rcpts[0]).Round(time.Millisecond), tr[0].Topic,
		rcpts[len(rcpts)-1].Sub(rcpts[0]).Round(time.Millisecond))
	checkOnce(t, []string{throttleID, transientID}, srv)
}

// retryCopies reads every delay topic and groups the records by key.
func (s *failureStack) retryCopies(ctx context.Context) map[string][]kafka.Message {
	s.t.Helper()
	out := make(map[string][]kafka.Message)
	for _, tier := range s.tiers {
		msgs, err := s.tierRecords(ctx, tier)
		if err != nil {
			s.t.Fatalf("read delay topic %s: %v", s.tierTopic(tier), err)
		}
		for _, m := range msgs {
			out[string(m.Key)] = append(out[string(m.Key)], m)
		}
	}
	return out
}

// TestFailureAuthFailsOver gives the worker two relays: relay 1 refuses its
// credentials (535 5.7.8 to AUTH), relay 2 (Mailpit) takes everything. Every
// job is delivered once through relay 2 at attempt 1 (an auth failure
// charges no attempt), and relay 1's circuit is open in postline_circuits.
func TestFailureAuthFailsOver(t *testing.T) {
	t.Parallel()
	s := newFailureStack(t, fastTiers)
	r1 := smtptest.NewServer(t, smtptest.WithAuth("postline", "right"))
	relays := strings.Join([]string{
		"smtp://postline:wrong@" + r1.Addr() + "?name=r1&priority=1&tls=none",
		relayURL("r2", s.mail.SMTPAddr(), 2),
	}, ",")
	s.startScheduler("scheduler")
	s.startFailWorker("worker", relays, nil)

	const n = 5
	ids := s.publish(taggedJobs(n, "auth", job.PriorityNormal)...)
	rows := s.waitRows(ids, 30*time.Second, "all sent", statusIs("sent"))
	for id, r := range rows {
		if r.Provider != "r2" || r.Attempt != 1 {
			t.Errorf("%s: row %+v, want sent through r2 at attempt 1", id, r)
		}
	}
	if got := s.mailbox(ids); got.Distinct != n || got.Duplicates != 0 || len(got.Missing) != 0 {
		t.Errorf("relay 2 (mailpit): %s; want each of %d once", got, n)
	}
	if c := r1.Count(); c != 0 {
		t.Errorf("relay 1 accepted %d messages with wrong credentials", c)
	}
	testkit.Eventually(t, 10*time.Second, "r1's circuit open in postline_circuits", func(ctx context.Context) (bool, string) {
		var state, class string
		err := s.db.QueryRow(ctx, `SELECT state, coalesce(last_class, '') FROM postline_circuits WHERE provider = 'r1'`).Scan(&state, &class)
		if err != nil {
			return false, err.Error()
		}
		return state == "open" && class == "auth", "state " + state + ", last_class " + class
	})
	var r2State string
	if err := s.db.QueryRow(context.Background(), `SELECT state FROM postline_circuits WHERE provider = 'r2'`).Scan(&r2State); err != nil || r2State != "closed" {
		t.Errorf("r2's circuit: %q (%v), want closed", r2State, err)
	}
}
