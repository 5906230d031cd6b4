package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/idempotency"
)

// sendMail records a sent mail whose recipients were all accepted, with
// confirmBy as its window's end.
func sendMail(t *testing.T, s *idempotency.Store, id string, confirmBy time.Time, recipients int) {
	t.Helper()
	c := claimOne(t, s, req(id, "content "+id, 1))
	rs := make([]idempotency.RecipientFate, recipients)
	for i := range rs {
		rs[i] = rcpt(i, fmt.Sprintf("r%d@example.com", i), idempotency.RecipientAccepted)
	}
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusSent, Attempt: 1,
		ConfirmBy: confirmBy, Recipients: rs})
}

// sweep makes one pass and returns it with the recipients it published, as
// "message-id/index".
func sweep(t *testing.T, s *idempotency.Store, sw idempotency.UnconfirmedSweep) (idempotency.UnconfirmedPass, []string) {
	t.Helper()
	var got []string
	pass, err := s.SweepUnconfirmed(t.Context(), sw, func(_ context.Context, due []idempotency.Recipient) error {
		for _, r := range due {
			if r.State != idempotency.RecipientAccepted || r.Confirmation != "" || r.ConfirmBy.IsZero() {
				t.Errorf("published %+v, want an accepted recipient of mail awaiting its mark", r)
			}
			got = append(got, fmt.Sprintf("%s/%d", r.MessageID, r.Index))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("SweepUnconfirmed: %v", err)
	}
	if pass.Recipients != len(got) {
		t.Errorf("pass = %+v, but %d recipients published", pass, len(got))
	}
	return pass, got
}

func confirmation(t *testing.T, pool *pgxpool.Pool, id string) string {
	t.Helper()
	var c *string
	if err := pool.QueryRow(t.Context(), `SELECT confirmation FROM postline_messages WHERE message_id = $1`, id).Scan(&c); err != nil {
		t.Fatalf("confirmation of %s: %v", id, err)
	}
	if c == nil {
		return ""
	}
	return *c
}

// setConfirmBy moves a mail's window end, on its row and its recipients',
// to the database's now plus offset.
func setConfirmBy(t *testing.T, pool *pgxpool.Pool, id string, offset time.Duration) {
	t.Helper()
	for _, table := range []string{"postline_messages", "postline_recipients"} {
		if _, err := pool.Exec(t.Context(), `UPDATE `+table+` SET confirm_by = now() + make_interval(secs => $2)
			WHERE message_id = $1 AND confirm_by IS NOT NULL`, id, offset.Seconds()); err != nil {
			t.Fatalf("move the window of %s: %v", id, err)
		}
	}
}

// lateIndexPages is the size of postline_recipients_late_idx in pages.
func lateIndexPages(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var pages int64
	if err := pool.QueryRow(t.Context(), `SELECT pg_relation_size('postline_recipients_late_idx') / current_setting('block_size')::int8`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	return pages
}

// TestSweepReadsOnlyWhatCameDue checks that a pass reads the mail that
// came due since the one before and nothing behind it: mail it marked
// leaves the walk for good, even mail that would look due again.
func TestSweepReadsOnlyWhatCameDue(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	now := time.Now()
	sendMail(t, s, "<a@x>", now.Add(-3*time.Minute), 2)
	sendMail(t, s, "<b@x>", now.Add(-2*time.Minute), 1)
	sendMail(t, s, "<c@x>", now.Add(time.Hour), 1)

	pass, got := sweep(t, s, idempotency.UnconfirmedSweep{Limit: 10})
	if want := []string{"<a@x>/0", "<a@x>/1", "<b@x>/0"}; !pass.Swept || pass.Marked != 2 || pass.More || !slices.Equal(got, want) {
		t.Fatalf("first pass = %+v publishing %v; want %v, 2 mails marked", pass, got, want)
	}
	for id, want := range map[string]string{"<a@x>": "unconfirmed", "<b@x>": "unconfirmed", "<c@x>": ""} {
		if c := confirmation(t, pool, id); c != want {
			t.Errorf("%s confirmation = %q, want %q", id, c, want)
		}
	}

	// <a@x> is behind the walk's place: unmarked by hand, it would be due
	// to a sweep that read from the oldest mail, but the walk does not go
	// back to it. <c@x>'s window ends now, after the place.
	if _, err := pool.Exec(t.Context(), `UPDATE postline_messages SET confirmation = NULL WHERE message_id = '<a@x>'`); err != nil {
		t.Fatal(err)
	}
	setConfirmBy(t, pool, "<c@x>", 0)
	pass, got = sweep(t, s, idempotency.UnconfirmedSweep{Limit: 10})
	if !pass.Swept || pass.Marked != 1 || !slices.Equal(got, []string{"<c@x>/0"}) {
		t.Fatalf("second pass = %+v publishing %v; want <c@x> only", pass, got)
	}
	if pass, got = sweep(t, s, idempotency.UnconfirmedSweep{Limit: 10}); pass.Recipients != 0 || pass.Marked != 0 {
		t.Errorf("third pass = %+v publishing %v; want nothing", pass, got)
	}
}

// TestSweepLimitReadsWholeMail checks that a walk stopped by the limit
// inside a mail still hands over and marks the whole mail, and that the
// next pass starts after it.
func TestSweepLimitReadsWholeMail(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	now := time.Now()
	sendMail(t, s, "<a@x>", now.Add(-3*time.Minute), 3)
	sendMail(t, s, "<b@x>", now.Add(-2*time.Minute), 2)
	sendMail(t, s, "<c@x>", now.Add(-time.Minute), 1)
	for _, want := range []struct {
		got  []string
		more bool
	}{
		{[]string{"<a@x>/0", "<a@x>/1", "<a@x>/2"}, true},
		{[]string{"<b@x>/0", "<b@x>/1"}, true},
		{[]string{"<c@x>/0"}, false},
		{nil, false},
	} {
		pass, got := sweep(t, s, idempotency.UnconfirmedSweep{Limit: 2})
		if !slices.Equal(got, want.got) || pass.More != want.more || pass.Marked != min(len(got), 1) {
			t.Fatalf("pass = %+v publishing %v; want %v, More %v", pass, got, want.got, want.more)
		}
	}
}

// TestSweepLateRecipient follows a recipient a relay took after its mail's
// window had passed: the first walk is past its window, so the second
// finds it, once LateGrace has passed since.
func TestSweepLateRecipient(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	ctx := t.Context()
	const id = "<late@x>"
	// Attempt 1: the relay takes recipient 0 and defers recipient 1; a
	// report then delivers recipient 0.
	c := claimOne(t, s, req(id, "a", 1))
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusRetrying, Attempt: 2,
		ConfirmBy: time.Now().Add(time.Hour), Recipients: []idempotency.RecipientFate{
			rcpt(0, "a@example.com", idempotency.RecipientAccepted),
			rcpt(1, "b@example.com", idempotency.RecipientPending),
		}})
	if applied, _, err := s.Resolve(ctx, []idempotency.Resolution{
		{MessageID: id, Index: 0, From: idempotency.RecipientAccepted, To: idempotency.RecipientDelivered, Source: "dsn"},
	}); err != nil || !applied[0] {
		t.Fatalf("Resolve = %v, %v", applied, err)
	}
	// The window passes with nothing accepted and open: no pass finds the
	// mail, and the walk moves past its window.
	setConfirmBy(t, pool, id, -10*time.Minute)
	if pass, got := sweep(t, s, idempotency.UnconfirmedSweep{Limit: 10}); pass.Recipients != 0 {
		t.Fatalf("pass = %+v publishing %v; want nothing while no recipient is accepted", pass, got)
	}
	// Recipients written in their window add no entry to the late walk's
	// index: it is still the metapage alone.
	sendMail(t, s, "<in-window@x>", time.Now().Add(time.Hour), 3)
	if pages := lateIndexPages(t, pool); pages != 1 {
		t.Errorf("postline_recipients_late_idx has %d pages after recipients accepted in their window, want 1 (empty)", pages)
	}
	// Attempt 2, past the window: the relay takes recipient 1, which
	// carries the mail's window, behind the walk's place.
	c = claimOne(t, s, req(id, "a", 2))
	record(t, s, idempotency.Fate{MessageID: id, Version: c.Version, Status: idempotency.StatusSent, Attempt: 2,
		Recipients: []idempotency.RecipientFate{rcpt(1, "b@example.com", idempotency.RecipientAccepted)}})
	if pages := lateIndexPages(t, pool); pages != 2 {
		t.Errorf("postline_recipients_late_idx has %d pages after a late acceptance, want 2 (one leaf)", pages)
	}

	if pass, got := sweep(t, s, idempotency.UnconfirmedSweep{Limit: 10}); pass.Recipients != 0 || confirmation(t, pool, id) != "" {
		t.Fatalf("pass within the late grace = %+v publishing %v; want nothing yet", pass, got)
	}
	pass, got := sweep(t, s, idempotency.UnconfirmedSweep{Limit: 10, LateGrace: time.Nanosecond})
	if pass.Marked != 1 || !slices.Equal(got, []string{id + "/1"}) || confirmation(t, pool, id) != "unconfirmed" {
		t.Fatalf("pass after the late grace = %+v publishing %v; want recipient 1 and the mail marked", pass, got)
	}
	if pass, got := sweep(t, s, idempotency.UnconfirmedSweep{Limit: 10, LateGrace: time.Nanosecond}); pass.Recipients != 0 {
		t.Errorf("next pass = %+v publishing %v; want nothing", pass, got)
	}
}

// TestSweepOnePassAtATime runs two workers' sweeps on one database: while
// one pass is publishing, the other's pass skips without reading, and
// afterwards finds nothing left to do. Every recipient gets its events
// from one pass only.
func TestSweepOnePassAtATime(t *testing.T) {
	t.Parallel()
	url, pool := migrated(t)
	a, _ := newStore(t, pool, "worker-a", 0)
	b, _ := newStore(t, openPool(t, url, 2, nil), "worker-b", 0)
	sendMail(t, a, "<m@x>", time.Now().Add(-time.Minute), 2)

	inside, unblock := make(chan struct{}), make(chan struct{})
	type result struct {
		pass idempotency.UnconfirmedPass
		err  error
	}
	done := make(chan result, 1)
	var published []string
	go func() {
		pass, err := a.SweepUnconfirmed(t.Context(), idempotency.UnconfirmedSweep{Limit: 10},
			func(ctx context.Context, due []idempotency.Recipient) error {
				for _, r := range due {
					published = append(published, fmt.Sprintf("%s/%d", r.MessageID, r.Index))
				}
				close(inside)
				select {
				case <-unblock:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		done <- result{pass, err}
	}()
	select {
	case <-inside:
	case r := <-done:
		t.Fatalf("worker a's pass ended before publishing: %+v, %v", r.pass, r.err)
	}

	// A skipped pass returns at once: one that waited for a's would wait
	// for ever here.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	pass, err := b.SweepUnconfirmed(ctx, idempotency.UnconfirmedSweep{Limit: 10}, func(context.Context, []idempotency.Recipient) error {
		t.Error("worker b published during a's pass")
		return nil
	})
	if err != nil || pass.Swept || pass.Recipients != 0 {
		t.Fatalf("worker b's pass during a's = %+v, %v; want it skipped", pass, err)
	}
	close(unblock)
	r := <-done
	if r.err != nil || !r.pass.Swept || r.pass.Marked != 1 || !slices.Equal(published, []string{"<m@x>/0", "<m@x>/1"}) {
		t.Fatalf("worker a's pass = %+v, %v publishing %v; want both recipients and the mail marked", r.pass, r.err, published)
	}
	pass, got := sweep(t, b, idempotency.UnconfirmedSweep{Limit: 10})
	if !pass.Swept || pass.Recipients != 0 || len(got) != 0 {
		t.Errorf("worker b's next pass = %+v publishing %v; want a pass that finds nothing", pass, got)
	}
}

// TestSweepPublishFails checks that a pass whose publish fails marks
// nothing and leaves its place, so the next pass publishes the same mail.
func TestSweepPublishFails(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, _ := newStore(t, pool, "worker-1", 0)
	sendMail(t, s, "<m@x>", time.Now().Add(-time.Minute), 1)
	boom := errors.New("broker down")
	_, err := s.SweepUnconfirmed(t.Context(), idempotency.UnconfirmedSweep{Limit: 10},
		func(context.Context, []idempotency.Recipient) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("SweepUnconfirmed = %v, want it to wrap %v", err, boom)
	}
	if c := confirmation(t, pool, "<m@x>"); c != "" {
		t.Fatalf("confirmation = %q after a failed publish, want none", c)
	}
	if pass, got := sweep(t, s, idempotency.UnconfirmedSweep{Limit: 10}); pass.Marked != 1 || !slices.Equal(got, []string{"<m@x>/0"}) {
		t.Errorf("next pass = %+v publishing %v; want the mail again", pass, got)
	}
	if _, err := s.SweepUnconfirmed(t.Context(), idempotency.UnconfirmedSweep{}, nil); err == nil {
		t.Error("a pass without a limit was accepted")
	}
}
