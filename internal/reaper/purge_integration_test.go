package reaper_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/reaper"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
)

// nopPublisher publishes nothing: the purge never publishes.
type nopPublisher struct{}

func (nopPublisher) PublishRaw(context.Context, []kafka.Message) error { return nil }

// TestReaperPurgesPastRetention runs a pass against PostgreSQL: the terminal
// rows older than the retention go, in statements of PurgeBatch rows; recent
// and in-flight rows stay.
func TestReaperPurgesPastRetention(t *testing.T) {
	t.Parallel()
	testenv.Integration(t, "PostgreSQL")
	_, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.New(idempotency.Config{Owner: "worker", Lease: time.Hour}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ids := []string{"old1@x", "old2@x", "old3@x", "old4@x", "old5@x", "recent@x", "retrying@x"}
	for _, id := range ids {
		cs, err := store.Claim(ctx, []idempotency.ClaimRequest{{MessageID: id, PayloadHash: []byte(id), Attempt: 1, Payload: []byte("v")}})
		if err != nil || cs[0].Result != idempotency.Claimed {
			t.Fatalf("claim %s = %+v, %v", id, cs, err)
		}
		status := idempotency.StatusSent
		if id == "retrying@x" {
			status = idempotency.StatusRetrying
		}
		if lost, err := store.Record(ctx, []idempotency.Fate{{MessageID: id, Version: cs[0].Version, Status: status, Attempt: 1}}); err != nil || len(lost) != 0 {
			t.Fatalf("record %s = %v, %v", id, lost, err)
		}
	}
	// Aged as a real row ages: it was created before its outcome.
	if _, err := pool.Exec(ctx, `UPDATE postline_messages SET updated_at = now() - interval '3 hours',
		created_at = now() - interval '4 hours' WHERE message_id LIKE 'old%' OR message_id = 'retrying@x'`); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := reaper.New(reaper.Config{Retention: 2 * time.Hour, PurgeBatch: 2, PurgePause: time.Millisecond}, store, nopPublisher{}, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counterValue(t, reg, "postline_reaper_purged_total"); got != 5 {
		t.Errorf("purged_total = %v, want 5", got)
	}
	for _, id := range ids {
		_, err := store.Get(ctx, id)
		if gone := err != nil; gone != (id[:3] == "old") {
			t.Errorf("%s: Get error %v; want it purged only if an old terminal row", id, err)
		}
	}
}
