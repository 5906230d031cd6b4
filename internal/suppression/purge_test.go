package suppression

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestPurgeExpiredOncePerFleet checks that of two workers' purges at once
// one does the work: while one purge's transaction is open, the other's
// returns at once having deleted nothing; once it is gone (here rolled
// back), the other deletes the expired entries, and only those.
func TestPurgeExpiredOncePerFleet(t *testing.T) {
	t.Parallel()
	s, c, pool, _ := newTestStore(t)
	ctx := t.Context()
	mustAdd(t, s,
		Entry{Tenant: "a", Stream: StreamAll, Address: "gone1@example.com", Reason: ReasonSoftBounce, ExpiresAt: t0.Add(time.Minute)},
		Entry{Tenant: "a", Stream: StreamAll, Address: "gone2@example.com", Reason: ReasonSoftBounce, ExpiresAt: t0.Add(2 * time.Minute)},
		Entry{Tenant: "a", Stream: StreamAll, Address: "later@example.com", Reason: ReasonSoftBounce, ExpiresAt: t0.Add(time.Hour)},
		Entry{Tenant: "a", Stream: StreamAll, Address: "never@example.com", Reason: ReasonHardBounce},
	)
	c.Set(t0.Add(5 * time.Minute))
	other, err := New(Config{NowFunc: c.Now}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}

	undo := errors.New("roll back")
	err = s.InTx(ctx, func(tx *Store) error {
		if n, err := tx.PurgeExpired(ctx); err != nil || n != 2 {
			t.Errorf("the first purge = %d, %v; want the 2 expired entries", n, err)
		}
		// The first purge's turn lasts until its transaction ends. A purge
		// that waited for it would wait for ever here.
		waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if n, err := other.PurgeExpired(waitCtx); err != nil || n != 0 {
			t.Errorf("a second purge at once = %d, %v; want 0, nil", n, err)
		}
		return undo
	})
	if !errors.Is(err, undo) {
		t.Fatalf("InTx = %v", err)
	}
	if n, err := other.PurgeExpired(ctx); err != nil || n != 2 {
		t.Fatalf("the purge after the first one rolled back = %d, %v; want 2", n, err)
	}
	left, err := s.List(ctx, Filter{IncludeExpired: true})
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, e := range left {
		addrs = append(addrs, e.Address)
	}
	if want := []string{"later@example.com", "never@example.com"}; !slices.Equal(addrs, want) {
		t.Errorf("left %v, want %v", addrs, want)
	}
	if n, err := other.PurgeExpired(ctx); err != nil || n != 0 {
		t.Errorf("a purge with nothing expired = %d, %v; want 0", n, err)
	}
}
