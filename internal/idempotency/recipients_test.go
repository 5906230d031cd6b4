package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/returnpath"
)

func rcpt(idx int, addr string, state idempotency.RecipientState) idempotency.RecipientFate {
	return idempotency.RecipientFate{Index: idx, Address: addr, State: state, Attempt: 1, Provider: "primary", Source: "smtp"}
}

// TestRecipientsLifecycle walks a two-recipient mail through the confirm
// phase on the real database: one recipient deferred then accepted, one
// accepted at once; reports resolve both and the mail is confirmed.
func TestRecipientsLifecycle(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	ctx := t.Context()
	const id = "<life@x>"

	c := claimOne(t, s, req(id, "a", 1))
	confirmBy := time.Now().Add(time.Hour)
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusRetrying, Attempt: 2,
		Stream: "transactional", Metadata: map[string]string{"order": "42"}, ConfirmBy: confirmBy,
		Recipients: []idempotency.RecipientFate{
			rcpt(0, "a@example.com", idempotency.RecipientAccepted),
			rcpt(1, "b@example.com", idempotency.RecipientPending),
		}})
	c = claimOne(t, s, req(id, "a", 2))
	// The second attempt sends to b only; a stale attempt's view of a
	// (pending) must not undo its acceptance.
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusSent, Attempt: 2,
		ConfirmBy: confirmBy.Add(time.Hour), Recipients: []idempotency.RecipientFate{
			rcpt(0, "a@example.com", idempotency.RecipientPending),
			rcpt(1, "b@example.com", idempotency.RecipientAccepted),
		}})
	got, err := s.Recipients(ctx, []string{id})
	if err != nil {
		t.Fatal(err)
	}
	rs := got[id]
	if len(rs) != 2 || rs[0].State != idempotency.RecipientAccepted || rs[1].State != idempotency.RecipientAccepted {
		t.Fatalf("recipients = %+v, want both accepted", rs)
	}
	if rs[0].Metadata["order"] != "42" || rs[0].Stream != "transactional" || !rs[0].ConfirmBy.Round(time.Second).Equal(confirmBy.Round(time.Second)) {
		t.Errorf("message columns = %+v, want the first attempt's metadata, stream and window", rs[0])
	}

	// A token's ref finds the row: Postgres computes it as returnpath does.
	ref := returnpath.RefOf(id)
	byRef, err := s.RecipientsByRef(ctx, ref[:], 1)
	if err != nil || len(byRef) != 1 || byRef[0].Address != "b@example.com" {
		t.Fatalf("RecipientsByRef = %+v, %v; want b", byRef, err)
	}

	applied, settled, err := s.Resolve(ctx, []idempotency.Resolution{
		{MessageID: id, Index: 0, From: idempotency.RecipientAccepted, To: idempotency.RecipientBounced,
			BounceType: "hard", Status: "5.1.1", Code: 550, Diagnostic: "no such user", Source: "dsn"},
		// A second report about a, decided on the state before the first:
		// its compare-and-set loses.
		{MessageID: id, Index: 0, From: idempotency.RecipientAccepted, To: idempotency.RecipientDelivered, Source: "dsn"},
	})
	if err != nil || !applied[0] || applied[1] || len(settled) != 0 {
		t.Fatalf("Resolve = %v, %v, %v; want the first applied, the second not, nothing settled", applied, settled, err)
	}
	applied, settled, err = s.Resolve(ctx, []idempotency.Resolution{
		{MessageID: id, Index: 1, From: idempotency.RecipientAccepted, To: idempotency.RecipientDelivered, Source: "dsn"},
	})
	if err != nil || !applied[0] || settled[id] != "confirmed" {
		t.Fatalf("Resolve = %v, %v, %v; want applied and the mail confirmed", applied, settled, err)
	}
	got, _ = s.Recipients(ctx, []string{id})
	if a := got[id][0]; a.State != idempotency.RecipientBounced || a.BounceType != "hard" || a.Status != "5.1.1" || a.Code != 550 || a.ResolvedAt.IsZero() {
		t.Errorf("recipient a = %+v, want bounced hard 550 5.1.1", a)
	}
}

// TestAllBouncedMailIsCancelled checks the other settlement: every
// recipient resolved, none delivered.
func TestAllBouncedMailIsCancelled(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	const id = "<cancel@x>"
	c := claimOne(t, s, req(id, "a", 1))
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusSent, Attempt: 1,
		ConfirmBy: time.Now().Add(time.Hour), Recipients: []idempotency.RecipientFate{
			rcpt(0, "a@example.com", idempotency.RecipientAccepted),
			rcpt(1, "b@example.com", idempotency.RecipientBounced),
		}})
	_, settled, err := s.Resolve(t.Context(), []idempotency.Resolution{
		{MessageID: id, Index: 0, From: idempotency.RecipientAccepted, To: idempotency.RecipientBounced, BounceType: "soft", Source: "dsn"},
	})
	if err != nil || settled[id] != "cancelled" {
		t.Fatalf("settled = %v, %v; want cancelled", settled, err)
	}
}

// TestUnconfirmedAfterTheWindow checks the sweep's queries: mail past its
// window with an accepted recipient is due, marking it is idempotent, it
// is listed, and a later report still settles it.
func TestUnconfirmedAfterTheWindow(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	ctx := t.Context()
	for _, id := range []string{"<late@x>", "<early@x>"} {
		c := claimOne(t, s, req(id, "a", 1))
		by := time.Now().Add(-time.Minute)
		if id == "<early@x>" {
			by = time.Now().Add(time.Hour)
		}
		record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusSent, Attempt: 1,
			ConfirmBy: by, Recipients: []idempotency.RecipientFate{rcpt(0, "a@example.com", idempotency.RecipientAccepted)}})
	}
	var due []idempotency.Recipient
	pass, err := s.SweepUnconfirmed(ctx, idempotency.UnconfirmedSweep{Limit: 10}, func(_ context.Context, rs []idempotency.Recipient) error {
		due = rs
		return nil
	})
	if err != nil || !pass.Swept || pass.Marked != 1 || len(due) != 1 || due[0].MessageID != "<late@x>" {
		t.Fatalf("SweepUnconfirmed = %+v, %v with %+v; want <late@x> only, marked", pass, err, due)
	}
	if n, err := s.MarkUnconfirmed(ctx, []string{"<late@x>", "<early@x>"}); err != nil || n != 0 {
		t.Fatalf("MarkUnconfirmed of marked mail = %d, %v; want 0", n, err)
	}
	if pass, err := s.SweepUnconfirmed(ctx, idempotency.UnconfirmedSweep{Limit: 10}, func(context.Context, []idempotency.Recipient) error {
		t.Error("a second pass published")
		return nil
	}); err != nil || pass.Recipients != 0 {
		t.Errorf("still due after marking: %+v, %v", pass, err)
	}
	list, err := s.Unconfirmed(ctx, 10)
	if err != nil || len(list) != 1 || list[0].Confirmation != "unconfirmed" {
		t.Fatalf("Unconfirmed = %+v, %v; want <late@x> marked", list, err)
	}
	_, settled, err := s.Resolve(ctx, []idempotency.Resolution{
		{MessageID: "<late@x>", Index: 0, From: idempotency.RecipientAccepted, To: idempotency.RecipientDelivered, Source: "dsn"},
	})
	if err != nil || settled["<late@x>"] != "confirmed" {
		t.Fatalf("a late report settled %v, %v; want confirmed", settled, err)
	}
}

func TestRecipientStateTransitions(t *testing.T) {
	tests := []struct {
		from, to idempotency.RecipientState
		ok       bool
	}{
		{idempotency.RecipientAccepted, idempotency.RecipientDelivered, true},
		{idempotency.RecipientAccepted, idempotency.RecipientBounced, true},
		{idempotency.RecipientAccepted, idempotency.RecipientComplained, true},
		{idempotency.RecipientDelivered, idempotency.RecipientBounced, true},
		{idempotency.RecipientDelivered, idempotency.RecipientComplained, true},
		{idempotency.RecipientBounced, idempotency.RecipientComplained, true},
		{idempotency.RecipientBounced, idempotency.RecipientDelivered, false},
		{idempotency.RecipientComplained, idempotency.RecipientBounced, false},
		{idempotency.RecipientPending, idempotency.RecipientDelivered, false},
		{idempotency.RecipientSuppressed, idempotency.RecipientDelivered, false},
		{idempotency.RecipientAccepted, idempotency.RecipientAccepted, false},
	}
	for _, tt := range tests {
		if got := tt.from.CanBecome(tt.to); got != tt.ok {
			t.Errorf("%s.CanBecome(%s) = %v, want %v", tt.from, tt.to, got, tt.ok)
		}
	}
	for _, s := range idempotency.RecipientStates {
		if s.Resolved() == (s == idempotency.RecipientPending || s == idempotency.RecipientAccepted) {
			t.Errorf("%s.Resolved() = %v", s, s.Resolved())
		}
	}
}

// TestConcurrentResolutionsSettleTheMail resolves the two recipients of
// each mail at the same moment from two connections: whichever commits
// last must see the other's recipient resolved and settle the mail (each
// transaction alone would see the other recipient still open).
func TestConcurrentResolutionsSettleTheMail(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	ctx := t.Context()
	const mails = 40
	ids := make([]string, mails)
	for i := range ids {
		ids[i] = "<race-" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + "@x>"
		c := claimOne(t, s, req(ids[i], "a", 1))
		record(t, s, idempotency.Fate{MessageID: ids[i], Version: c.Version, Status: idempotency.StatusSent, Attempt: 1,
			ConfirmBy: time.Now().Add(time.Hour), Recipients: []idempotency.RecipientFate{
				rcpt(0, "a@example.com", idempotency.RecipientAccepted),
				rcpt(1, "b@example.com", idempotency.RecipientAccepted),
			}})
	}
	for _, id := range ids {
		start := make(chan struct{})
		errs := make(chan error, 2)
		for idx := range 2 {
			go func() {
				<-start
				_, _, err := s.Resolve(ctx, []idempotency.Resolution{{MessageID: id, Index: idx,
					From: idempotency.RecipientAccepted, To: idempotency.RecipientDelivered, Source: "dsn"}})
				errs <- err
			}()
		}
		close(start)
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	var unsettled int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM postline_messages WHERE message_id = ANY($1) AND confirmation IS DISTINCT FROM 'confirmed'`,
		ids).Scan(&unsettled); err != nil {
		t.Fatal(err)
	}
	if unsettled != 0 {
		t.Errorf("%d of %d mails with both recipients delivered are not confirmed", unsettled, mails)
	}
}

// TestReplayForgetsTheRecipients: a replayed mail starts its life again,
// so the recipient rows of the attempt that failed are gone and its next
// fate records them afresh.
func TestReplayForgetsTheRecipients(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	ctx := t.Context()
	const id = "<replayed@x>"
	c := claimOne(t, s, req(id, "a", 1))
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusFailed, Attempt: 1,
		Recipients: []idempotency.RecipientFate{rcpt(0, "a@example.com", idempotency.RecipientBounced)}})
	if _, err := s.ResetForReplay(ctx, []idempotency.Reset{{MessageID: id, PayloadHash: hash("a")}}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Recipients(ctx, []string{id}); err != nil || len(got[id]) != 0 {
		t.Fatalf("recipients after the replay = %+v, %v; want none", got, err)
	}
	c = claimOne(t, s, req(id, "a", 1))
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusSent, Attempt: 1,
		Recipients: []idempotency.RecipientFate{rcpt(0, "a@example.com", idempotency.RecipientAccepted)}})
	if got, _ := s.Recipients(ctx, []string{id}); len(got[id]) != 1 || got[id][0].State != idempotency.RecipientAccepted {
		t.Errorf("recipients after the replayed send = %+v, want accepted", got[id])
	}
}

// TestRecordSettlesWhenItResolvesTheLastRecipient: a retry whose fate
// ends the last open recipient (refused for good at the relay) settles the
// mail in the same round trip, confirmed because the other recipient was
// delivered; the fate before it, which only accepted, settled nothing.
func TestRecordSettlesWhenItResolvesTheLastRecipient(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	ctx := t.Context()
	const id = "<settle-by-record@x>"
	confirmation := func() string {
		t.Helper()
		got, err := s.Recipients(ctx, []string{id})
		if err != nil || len(got[id]) != 2 {
			t.Fatalf("recipients = %+v, %v", got, err)
		}
		return got[id][0].Confirmation
	}

	c := claimOne(t, s, req(id, "a", 1))
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusRetrying, Attempt: 2,
		ConfirmBy: time.Now().Add(time.Hour), Recipients: []idempotency.RecipientFate{
			rcpt(0, "a@example.com", idempotency.RecipientAccepted),
			rcpt(1, "b@example.com", idempotency.RecipientPending),
		}})
	if _, _, err := s.Resolve(ctx, []idempotency.Resolution{{MessageID: id, Index: 0,
		From: idempotency.RecipientAccepted, To: idempotency.RecipientDelivered, Source: "dsn"}}); err != nil {
		t.Fatal(err)
	}
	if got := confirmation(); got != "" {
		t.Fatalf("confirmation with b pending = %q, want none", got)
	}
	c = claimOne(t, s, req(id, "a", 2))
	bounced := rcpt(1, "b@example.com", idempotency.RecipientBounced)
	bounced.BounceType, bounced.Status, bounced.Code = "hard", "5.1.1", 550
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusSent, Attempt: 2,
		Recipients: []idempotency.RecipientFate{bounced}})
	if got := confirmation(); got != "confirmed" {
		t.Fatalf("confirmation after the last recipient bounced = %q, want confirmed", got)
	}
}
