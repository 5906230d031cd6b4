package delivery

import (
	"context"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/jobheader"
)

// firstAttemptStore is fakeStore with the real store's rule for new rows:
// a copy without a row is claimed as attempt 1 whatever its header says,
// and the claim reports the row's attempt.
type firstAttemptStore struct{ *fakeStore }

func (s firstAttemptStore) Claim(ctx context.Context, reqs []idempotency.ClaimRequest) ([]idempotency.Claim, error) {
	reqs = append([]idempotency.ClaimRequest(nil), reqs...)
	s.mu.Lock()
	for i := range reqs {
		if s.rows[reqs[i].MessageID] == nil {
			reqs[i].Attempt = 1
		}
	}
	s.mu.Unlock()
	claims, err := s.fakeStore.Claim(ctx, reqs)
	for i := range claims {
		if claims[i].Result == idempotency.Claimed {
			claims[i].Attempt = reqs[i].Attempt
		}
	}
	return claims, err
}

// TestPipelineUsesTheClaimedAttempt is the pipeline half of the producer
// attempt header regression: a record saying attempt 3 (the last allowed
// in the harness) without a row is attempt 1, so a throttled send is
// retried as attempt 2 instead of dying for max attempts.
func TestPipelineUsesTheClaimedAttempt(t *testing.T) {
	h := newHarnessWith(t, always(smtpErr(452, "4.4.5", "per second limit")), nil, nil)
	h.pipeline.store = firstAttemptStore{h.store}
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
