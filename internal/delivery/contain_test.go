package delivery

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/job"
)

// Regression: a panic while sending one record (building its MIME message,
// say) crash-looped the worker on that record. It is dead-lettered as
// internal_error, the session it broke is not reused, and the records
// after it are sent.
func TestPanicWhileSendingDeadLettersTheRecord(t *testing.T) {
	h := newHarness(t, func(j *job.Job, _ int) error {
		if j.MessageID == "boom@x" {
			panic("the MIME builder met something it did not expect in " + j.Subject)
		}
		return nil
	})
	h.run(t, [][]byte{mustJSON(t, testJob("a@x", "1")), mustJSON(t, testJob("boom@x", "2")), mustJSON(t, testJob("b@x", "3"))})

	if got := h.dlq.reasons(); !slices.Equal(got, []string{deadletter.ReasonInternalError}) {
		t.Fatalf("dead-letter reasons = %v, want one internal_error", got)
	}
	l := h.dlq.All()[0]
	if l.Class != classInternal || !strings.Contains(l.Error, "panic while sending: a value of type string") || strings.Contains(l.Error, "MIME builder") {
		t.Errorf("letter class %q error %q: want class internal and the panic's type, not its text", l.Class, l.Error)
	}
	if st := h.store.status("boom@x"); st != idempotency.StatusDead {
		t.Errorf("row of the panicking job is %s, want dead", st)
	}
	if got := h.smtp.accepted(); !slices.Contains(got, "a@x") || !slices.Contains(got, "b@x") {
		t.Errorf("accepted %v, want a@x and b@x", got)
	}
	if got := testutil.ToFloat64(h.pipeline.metrics.panics.WithLabelValues("sending")); got != 1 {
		t.Errorf("panics_total{stage=sending} = %v, want 1", got)
	}
	if n := h.src.doneCount(); n != 3 {
		t.Errorf("%d records done, want 3: a panic must not leave its offset behind", n)
	}
}

func TestContainTurnsAPanicIntoAnError(t *testing.T) {
	h := newHarness(t, nil)
	m := consumer.Message{Topic: "t", Partition: 1, Offset: 7}
	tests := []struct {
		name string
		fn   func()
		want string
	}{
		{"no panic", func() {}, ""},
		{"runtime error", func() { var s []int; _ = s[3] }, "panic while decoding: runtime error: index out of range"},
		{"error value", func() { panic(errors.New("secret body text")) }, "panic while decoding: an error of type *errors.errorString"},
		{"other value", func() { panic(42) }, "panic while decoding: a value of type int"},
	}
	for _, tt := range tests {
		perr := h.pipeline.contain("decoding", m, tt.fn)
		switch {
		case tt.want == "" && perr != nil:
			t.Errorf("%s: contain = %v, want nil", tt.name, perr)
		case tt.want != "" && (perr == nil || !strings.Contains(perr.Error(), tt.want)):
			t.Errorf("%s: contain = %v, want %q", tt.name, perr, tt.want)
		case perr != nil && strings.Contains(perr.Error(), "secret"):
			t.Errorf("%s: the error repeats the panic's value: %v", tt.name, perr)
		}
	}
}

// Regression: every dependency error was retried forever. A dead-letter
// write refused for good (the ACL forbids the topic) ends Run with the
// error, so the worker can leave its group and exit, instead of holding
// its partitions while it retries.
func TestPermanentDependencyErrorStopsThePipeline(t *testing.T) {
	h := newHarness(t, nil)
	dlq := newFakeDLQ()
	dlq.Fail(-1, kafka.TopicAuthorizationFailed) // as Kafka refuses a user without rights
	h.pipeline.dlq = dlq
	h.src = newFakeSource([][]byte{[]byte("{not json")}, false)
	h.src.store = h.store
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := h.pipeline.Run(ctx, h.src)
	if err == nil || !errors.Is(err, kafka.TopicAuthorizationFailed) || !strings.Contains(err.Error(), opDeadLetter) {
		t.Fatalf("Run = %v, want the dead-letter refusal", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run only returned at the test's deadline: the refusal was retried")
	}
	if dlq.Calls() != 1 {
		t.Errorf("the refused write was made %d times, want 1", dlq.Calls())
	}
}
