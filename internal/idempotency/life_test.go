package idempotency_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/idempotency"
)

// lifeOf reads the row's life column as stored (0 for NULL).
func lifeOf(t *testing.T, pool *pgxpool.Pool, id string) int64 {
	t.Helper()
	var life int64
	if err := pool.QueryRow(t.Context(), `SELECT COALESCE(life, 0) FROM postline_messages WHERE message_id = $1`, id).Scan(&life); err != nil {
		t.Fatalf("life of %s: %v", id, err)
	}
	return life
}

func recipientLives(t *testing.T, s *idempotency.Store, id string) []int64 {
	t.Helper()
	got, err := s.Recipients(t.Context(), []string{id})
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, r := range got[id] {
		out = append(out, r.Life)
	}
	return out
}

// TestLives walks a Message-ID through the ways its life starts on the real
// database: the first claim draws one, a retry keeps it, a replay of the
// dead letter draws another, and so does the same ID sent again after the
// purge; the recipients carry their mail's life.
func TestLives(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	ctx := t.Context()
	const id = "<lives@x>"

	c := claimOne(t, s, req(id, "a", 1))
	first := c.Life
	if first == 0 || first != lifeOf(t, pool, id) {
		t.Fatalf("first claim's life = %d, row's %d; want the row's, not 0", first, lifeOf(t, pool, id))
	}
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusRetrying, Attempt: 2,
		Recipients: []idempotency.RecipientFate{rcpt(0, "a@example.com", idempotency.RecipientPending)}})
	c = claimOne(t, s, req(id, "a", 2))
	if c.Life != first {
		t.Fatalf("the retry's claim has life %d, want the first attempt's %d", c.Life, first)
	}
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusDead, Attempt: 2,
		Recipients: []idempotency.RecipientFate{rcpt(0, "a@example.com", idempotency.RecipientDead)}})
	if lives := recipientLives(t, s, id); len(lives) != 1 || lives[0] != first {
		t.Fatalf("recipient lives = %v, want [%d]", lives, first)
	}
	// A duplicate of the dead job changes nothing.
	wantResult(t, claimOne(t, s, req(id, "a", 1)), idempotency.Duplicate)
	if got := lifeOf(t, pool, id); got != first {
		t.Fatalf("a duplicate changed the life from %d to %d", first, got)
	}

	// postctl dlq replay: a new life.
	if reset, err := s.ResetForReplay(ctx, []idempotency.Reset{{MessageID: id, PayloadHash: hash("a")}}); err != nil || len(reset) != 1 {
		t.Fatalf("ResetForReplay = %v, %v", reset, err)
	}
	c = claimOne(t, s, req(id, "a", 1))
	second := c.Life
	if second == 0 || second == first {
		t.Fatalf("the replay's claim has life %d, want a new one (the first was %d)", second, first)
	}
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusSent, Attempt: 1,
		Recipients: []idempotency.RecipientFate{rcpt(0, "a@example.com", idempotency.RecipientAccepted)}})
	if lives := recipientLives(t, s, id); len(lives) != 1 || lives[0] != second {
		t.Fatalf("recipient lives after the replay = %v, want [%d]", lives, second)
	}

	// Purged after its retention, then sent again: a new row, a new life.
	if _, err := pool.Exec(ctx, `UPDATE postline_messages SET created_at = now() - interval '2 hours',
		updated_at = now() - interval '2 hours' WHERE message_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Purge(ctx, time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want the one row", n, err)
	}
	c = claimOne(t, s, req(id, "a", 1))
	if c.Life == 0 || c.Life == first || c.Life == second {
		t.Fatalf("the re-sent mail's claim has life %d, want a new one (were %d and %d)", c.Life, first, second)
	}
}

// TestLifeOfRowsFromBefore: a row written before lives were recorded has
// none (NULL): its claims and recipients say 0, so its events keep the IDs
// they had, until a replay gives it a life.
func TestLifeOfRowsFromBefore(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	ctx := t.Context()
	const id = "<old@x>"
	c := claimOne(t, s, req(id, "a", 1))
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusRetrying, Attempt: 2,
		Recipients: []idempotency.RecipientFate{rcpt(0, "a@example.com", idempotency.RecipientPending)}})
	if _, err := pool.Exec(ctx, `UPDATE postline_messages SET life = NULL WHERE message_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	c = claimOne(t, s, req(id, "a", 2))
	if c.Life != 0 {
		t.Fatalf("claim of a row without a life = %d, want 0", c.Life)
	}
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusFailed, Attempt: 2,
		Recipients: []idempotency.RecipientFate{rcpt(0, "a@example.com", idempotency.RecipientFailed)}})
	if lives := recipientLives(t, s, id); len(lives) != 1 || lives[0] != 0 {
		t.Fatalf("recipient lives = %v, want [0]", lives)
	}
	if _, err := s.ResetForReplay(ctx, []idempotency.Reset{{MessageID: id, PayloadHash: hash("a")}}); err != nil {
		t.Fatal(err)
	}
	if c = claimOne(t, s, req(id, "a", 1)); c.Life == 0 {
		t.Fatal("the replay of a row without a life claimed it with none")
	}
}

// TestLifeOfRejectedRowTakenOver: a valid job that takes over the dead row
// a rejected record left starts a life of its own.
func TestLifeOfRejectedRowTakenOver(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	const id = "<rejected@x>"
	if err := s.RecordRejected(t.Context(), []idempotency.Rejection{{MessageID: id, Reason: "invalid_address"}}); err != nil {
		t.Fatal(err)
	}
	rejected := lifeOf(t, pool, id)
	c := claimOne(t, s, req(id, "a", 1))
	wantResult(t, c, idempotency.Claimed)
	if c.Life == 0 || c.Life == rejected || c.Life != lifeOf(t, pool, id) {
		t.Errorf("taken over with life %d (row %d), the rejected row had %d; want a new one", c.Life, lifeOf(t, pool, id), rejected)
	}
}

// TestResolveLifeAndOutbox checks that a resolution moves a recipient only
// in the life it was decided in, and writes its outbox entry only when its
// compare-and-set wins, in the same transaction; Outbox lists the entries
// by age and OutboxDone deletes them.
func TestResolveLifeAndOutbox(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	ctx := t.Context()
	const id = "<outbox@x>"
	c := claimOne(t, s, req(id, "a", 1))
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusSent, Attempt: 1,
		ConfirmBy: time.Now().Add(time.Hour), Recipients: []idempotency.RecipientFate{
			rcpt(0, "a@example.com", idempotency.RecipientAccepted), rcpt(1, "b@example.com", idempotency.RecipientAccepted)}})
	res := func(idx int, life int64, to idempotency.RecipientState, eventID string) idempotency.Resolution {
		return idempotency.Resolution{MessageID: id, Index: idx, Life: life, From: idempotency.RecipientAccepted, To: to,
			Source: "dsn", EventID: eventID, Effect: []byte("effect of " + eventID)}
	}

	// Decided in another life (say, before a replay): nothing moves,
	// nothing is owed.
	applied, _, err := s.Resolve(ctx, []idempotency.Resolution{res(0, c.Life+1, idempotency.RecipientDelivered, "evt_other_life")})
	if err != nil || applied[0] {
		t.Fatalf("Resolve in another life = %v, %v; want not applied", applied, err)
	}
	// The winner's entry is written; the loser's (a second decision on the
	// same state) and the one without an event ID are not.
	applied, _, err = s.Resolve(ctx, []idempotency.Resolution{
		res(0, c.Life, idempotency.RecipientBounced, "evt_bounced_0"),
		res(0, c.Life, idempotency.RecipientDelivered, "evt_delivered_0"),
		res(1, c.Life, idempotency.RecipientDelivered, ""),
	})
	if err != nil || !applied[0] || applied[1] || !applied[2] {
		t.Fatalf("Resolve = %v, %v; want the first and third applied", applied, err)
	}
	// A loser in a later statement writes nothing either.
	if applied, _, err = s.Resolve(ctx, []idempotency.Resolution{res(0, c.Life, idempotency.RecipientComplained, "evt_late")}); err != nil || applied[0] {
		t.Fatalf("Resolve from a state gone = %v, %v; want not applied", applied, err)
	}

	if got, err := s.Outbox(ctx, time.Hour, 10); err != nil || len(got) != 0 {
		t.Fatalf("Outbox(1h) = %+v, %v; want nothing that old", got, err)
	}
	got, err := s.Outbox(ctx, 0, 10)
	if err != nil || len(got) != 1 {
		t.Fatalf("Outbox = %+v, %v; want the bounce's entry only", got, err)
	}
	if e := got[0]; e.EventID != "evt_bounced_0" || e.MessageID != id || !bytes.Equal(e.Body, []byte("effect of evt_bounced_0")) || e.CreatedAt.IsZero() {
		t.Errorf("entry = %+v", e)
	}
	if err := s.OutboxDone(ctx, []string{"evt_bounced_0", "evt_never_written"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Outbox(ctx, 0, 10); err != nil || len(got) != 0 {
		t.Fatalf("Outbox after OutboxDone = %+v, %v; want empty", got, err)
	}
	if _, err := s.Outbox(ctx, 0, 0); err == nil {
		t.Error("Outbox with limit 0 succeeded")
	}
}
