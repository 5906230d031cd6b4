package idempotency_test

import (
	"testing"
	"time"

	"github.com/postline/postline/internal/idempotency/idempotencytest"
)

// TestStoreFollowsTheStoreRules runs the claim store's behaviour suite
// against PostgreSQL: the rules the in-memory stand-in of
// idempotencytest.Memory is checked against too.
func TestStoreFollowsTheStoreRules(t *testing.T) {
	idempotencytest.Run(t, func(t *testing.T) idempotencytest.Opener {
		_, pool := migrated(t)
		return func(owner string, lease time.Duration) idempotencytest.Store {
			s, _ := newStore(t, pool, owner, lease)
			return s
		}
	})
}
