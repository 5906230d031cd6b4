package retry

import (
	"context"
	"testing"

	"github.com/postline/postline/internal/consumer"
)

// rejectUnexpected is a RejectFunc for schedulers that must never meet a
// record too large to re-inject: it fails the test if called.
func rejectUnexpected(t testing.TB) func(context.Context, consumer.Message, string, string) error {
	return func(_ context.Context, m consumer.Message, reason, detail string) error {
		t.Errorf("scheduler rejected %s/%d@%d: %s: %s", m.Topic, m.Partition, m.Offset, reason, detail)
		return nil
	}
}
