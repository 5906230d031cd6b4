package delivery

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/job"
)

// maxAgeLetter runs one record and returns the error text of its max_age
// dead letter.
func maxAgeLetter(t *testing.T, h *harness, m consumer.Message) string {
	t.Helper()
	h.runMessages(t, []consumer.Message{m})
	letters := h.dlq.All()
	if len(letters) != 1 || letters[0].Reason != deadletter.ReasonMaxAge {
		t.Fatalf("dead letters = %+v, want one max_age letter", letters)
	}
	return letters[0].Error
}

// TestMaxAgeErrorNamesThePriority is the regression test of the max-age
// dead letter's text: it names the limit and the priority it comes from,
// also for a job without a priority (normal) and for a job whose age ran out
// while it was being sent (where the text used to be the SMTP error alone).
func TestMaxAgeErrorNamesThePriority(t *testing.T) {
	old := time.Now().Add(-2 * time.Hour) // the harness allows 1h
	t.Run("at intake, no priority", func(t *testing.T) {
		h := newHarness(t, nil)
		m := message(t, "noprio@x", []kafka.Header{{Key: jobheader.KeyAttempt, Value: []byte("2")},
			{Key: jobheader.KeyFirstSeen, Value: []byte(jobheader.FormatTime(old))}})
		h.store.seed("noprio@x", m.Value, 2)
		got := maxAgeLetter(t, h, m)
		if want := "older than the 1h0m0s max age of normal priority mail"; got != want {
			t.Errorf("error = %q, want %q", got, want)
		}
	})
	t.Run("after a failed send, bulk", func(t *testing.T) {
		var sent atomic.Bool
		h := newHarness(t, func(*job.Job, int) error {
			sent.Store(true)
			return smtpErr(421, "4.7.0", "try again later")
		})
		// The job was 59 minutes old when its send started; the clock jumps
		// past its age during the send.
		start := time.Now()
		h.pipeline.cfg.NowFunc = func() time.Time {
			if sent.Load() {
				return time.Now().Add(2 * time.Hour)
			}
			return time.Now()
		}
		j := testJob("bulk@x", "hi")
		j.Priority = job.PriorityBulk
		m := consumer.Message{Topic: "mail.jobs", Key: []byte(j.MessageID), Value: mustJSON(t, j), Time: start,
			Headers: []kafka.Header{{Key: jobheader.KeyAttempt, Value: []byte("1")},
				{Key: jobheader.KeyFirstSeen, Value: []byte(jobheader.FormatTime(start.Add(-59 * time.Minute)))}}}
		got := maxAgeLetter(t, h, m)
		if !strings.HasPrefix(got, "older than the 1h0m0s max age of bulk priority mail") || !strings.Contains(got, "421 4.7.0 try again later") {
			t.Errorf("error = %q, want the bulk max age and the last failure", got)
		}
	})
}
