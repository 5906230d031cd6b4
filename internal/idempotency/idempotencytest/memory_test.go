package idempotencytest_test

import (
	"testing"
	"time"

	"github.com/postline/postline/internal/idempotency/idempotencytest"
)

// TestMemoryFollowsTheStoreRules runs the claim store's suite against the
// in-memory stand-in; package idempotency runs it against PostgreSQL.
func TestMemoryFollowsTheStoreRules(t *testing.T) {
	idempotencytest.Run(t, func(*testing.T) idempotencytest.Opener {
		m := idempotencytest.NewMemory()
		return func(owner string, lease time.Duration) idempotencytest.Store { return m.Open(owner, lease) }
	})
}
