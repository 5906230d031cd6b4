package reaper_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/reaper"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/testenv"
)

// TestReaperPurgesExpiredSuppressions runs the purge passes of two workers'
// reapers against PostgreSQL: while one worker's purge of the suppression
// lists runs, the other's deletes nothing; then the expired entries go,
// in batches, and the ones that expire later or never stay.
func TestReaperPurgesExpiredSuppressions(t *testing.T) {
	t.Parallel()
	testenv.Integration(t, "PostgreSQL")
	_, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	now := time.Now()
	newLists := func(batch int) *suppression.Store {
		lists, err := suppression.New(suppression.Config{PurgeBatch: batch, NowFunc: func() time.Time { return now }}, pool, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return lists
	}
	lists := newLists(2)
	var entries []suppression.Entry
	for i := range 5 {
		entries = append(entries, suppression.Entry{Stream: suppression.StreamAll, Address: fmt.Sprintf("expired%d@example.com", i),
			Reason: suppression.ReasonSoftBounce, Source: "dsn", CreatedAt: now.Add(-time.Hour), ExpiresAt: now.Add(-time.Duration(i+1) * time.Minute)})
	}
	entries = append(entries,
		suppression.Entry{Stream: suppression.StreamAll, Address: "later@example.com", Reason: suppression.ReasonSoftBounce, Source: "dsn",
			CreatedAt: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour)},
		suppression.Entry{Stream: suppression.StreamAll, Address: "never@example.com", Reason: suppression.ReasonHardBounce, Source: "dsn"})
	if _, err := lists.Add(ctx, entries); err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.New(idempotency.Config{Owner: "worker"}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	newReaper := func(reg *prometheus.Registry) *reaper.Reaper {
		r, err := reaper.New(reaper.Config{PurgePause: time.Millisecond}, store, nopPublisher{}, nil, reg, reaper.WithSuppressions(lists))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a, b := newReaper(regA), newReaper(regB)

	// Worker a's purge statement holds the turn until its transaction
	// ends: here a transaction around one batch, rolled back.
	undo := errors.New("roll back")
	err = newLists(2).InTx(ctx, func(tx *suppression.Store) error {
		if n, err := tx.PurgeExpired(ctx); err != nil || n != 2 {
			t.Errorf("worker a's batch = %d, %v; want 2", n, err)
		}
		waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if n, err := b.PurgeSuppressions(waitCtx); err != nil || n != 0 {
			t.Errorf("worker b's pass during a's = %d, %v; want 0", n, err)
		}
		return undo
	})
	if !errors.Is(err, undo) {
		t.Fatal(err)
	}
	if _, err := a.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counterValue(t, regA, "postline_reaper_suppressions_purged_total"); got != 5 {
		t.Errorf("worker a's suppressions_purged_total = %v, want 5", got)
	}
	if got := counterValue(t, regB, "postline_reaper_suppressions_purged_total"); got != 0 {
		t.Errorf("worker b's suppressions_purged_total = %v, want 0", got)
	}
	left, err := lists.List(ctx, suppression.Filter{IncludeExpired: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left[0].Address != "later@example.com" || left[1].Address != "never@example.com" {
		t.Errorf("left %+v, want the entries that expire later or never", left)
	}
}
