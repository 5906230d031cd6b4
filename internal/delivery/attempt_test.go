package delivery

import (
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/jobheader"
)

// TestPipelineUsesTheClaimedAttempt is the pipeline half of the producer
// attempt header regression: a record saying attempt 3 (the last allowed
// in the harness) without a row is attempt 1, so a throttled send is
// retried as attempt 2 instead of dying for max attempts.
func TestPipelineUsesTheClaimedAttempt(t *testing.T) {
	h := newHarnessWith(t, always(smtpErr(452, "4.4.5", "per second limit")), nil, nil)
	h.runMessages(t, []consumer.Message{message(t, "forged@x",
		[]kafka.Header{{Key: jobheader.KeyAttempt, Value: []byte("3")}})})

	row := h.store.row("forged@x")
	if row.status != idempotency.StatusRetrying || row.attempt != 2 {
		t.Errorf("row = %s attempt %d, want retrying attempt 2", row.status, row.attempt)
	}
	copies := h.retries.all()
	if len(copies) != 1 || copies[0].Attempt != 2 {
		t.Fatalf("retry copies = %+v, want one of attempt 2", copies)
	}
}
