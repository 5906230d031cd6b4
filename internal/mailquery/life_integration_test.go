package mailquery_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/webhook"
)

func newIndexer(t *testing.T, pool *pgxpool.Pool, topic, group string) *mailquery.Indexer {
	t.Helper()
	ix, err := mailquery.NewIndexer(pool, mailquery.IndexerConfig{Kafka: testenv.Kafka().Config(), Topic: topic,
		GroupID: group, BatchWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// ev is an event of the mail id, as the worker or receiver writes it.
func ev(id string, idx int, addr string, typ event.Type, attempt int, at time.Time) event.Event {
	return event.Event{Schema: event.Schema, ID: event.NewID(id, idx, typ, attempt), Type: typ, At: at, MessageID: id,
		Tenant: "acme", Stream: event.StreamTransactional, Recipient: addr, RecipientIndex: idx, Attempt: attempt,
		Provider: "relay-a", Metadata: map[string]string{"customer": "private"}}
}

func TestLife(t *testing.T) {
	pool := migrated(t)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	at := func(minutesAgo int) time.Time { return now.Add(-time.Duration(minutesAgo) * time.Minute) }
	bounce := rcpt(1, "bob@example.org", idempotency.RecipientBounced)
	bounce.BounceType, bounce.Code, bounce.Status = "hard", 550, "5.1.1"
	seed(t, pool, seeded{id: "life@shop", tenant: "acme", status: idempotency.StatusSent, createdAt: at(10),
		rcpts: []idempotency.RecipientFate{rcpt(0, "ada@example.com", idempotency.RecipientAccepted), bounce}})

	deferred := ev("life@shop", 0, "ada@example.com", event.Deferred, 1, at(9))
	next := at(8)
	deferred.Class, deferred.NextAttemptAt = "transient", &next
	deferred.Reply = &event.Reply{Code: 451, Status: "4.7.1", Text: "try later"}
	accepted := ev("life@shop", 0, "ada@example.com", event.Accepted, 2, at(8))
	accepted.DKIMDomain = "shop.example"
	accepted.Template = &event.TemplateUse{Name: "welcome", Version: 3, Why: "active"}
	bounced := ev("life@shop", 1, "bob@example.org", event.Bounced, 2, at(8))
	bounced.Bounce = &event.Bounce{Type: event.BounceHard, Status: "5.1.1", Code: 550,
		Diagnostic: "550 5.1.1 no such user", Rule: "user_unknown", Source: "smtp"}
	delivered := ev("life@shop", 0, "ada@example.com", event.Delivered, 0, at(5))
	other := ev("other@shop", 0, "eve@example.com", event.Accepted, 1, at(7))

	ix := newIndexer(t, pool, "unused", "unused")
	// Out of order, and one twice: the table keeps one copy, the life
	// orders them by time.
	if err := ix.WriteEvents(ctx, []event.Event{delivered, bounced, deferred, other}); err != nil {
		t.Fatal(err)
	}
	if err := ix.WriteEvents(ctx, []event.Event{accepted, delivered}); err != nil {
		t.Fatal(err)
	}
	if s := ix.Stats(); s.Indexed != 5 || s.Duplicates != 1 || s.Skipped != 0 {
		t.Errorf("Stats = %+v, want 5 indexed, 1 duplicate", s)
	}
	var withMetadata int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM postline_mail_events WHERE doc ? 'metadata'`).Scan(&withMetadata); err != nil || withMetadata != 0 {
		t.Errorf("%d indexed events keep the job's metadata (%v), want none", withMetadata, err)
	}

	// Webhook deliveries: crm still retries the delivered event, dash gave
	// up on the bounce and is disabled; another mail's row is not shown.
	q := webhook.NewQueue(pool)
	pending := webhook.Pending{Endpoint: "crm", EventID: delivered.ID, Type: event.Delivered, Tenant: "acme",
		EventAt: delivered.At, Payload: []byte(`{}`), Offset: -1, Attempts: 2, FirstAt: at(5), NextAt: now.Add(time.Minute),
		LastStatus: 503, LastError: "HTTP 503"}
	if err := q.Enqueue(ctx, pending); err != nil {
		t.Fatal(err)
	}
	dead := pending
	dead.Endpoint, dead.EventID, dead.Type, dead.LastStatus, dead.LastError = "dash", bounced.ID, event.Bounced, 0, "timeout"
	if err := q.Bury(ctx, dead, "horizon", at(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.SetDisabled(ctx, "dash", true, "failing", "test", at(1)); err != nil {
		t.Fatal(err)
	}
	unrelated := pending
	unrelated.EventID = other.ID
	if err := q.Enqueue(ctx, unrelated); err != nil {
		t.Fatal(err)
	}

	r := newReader(t, pool)
	life, err := r.Life(ctx, "life@shop")
	if err != nil {
		t.Fatal(err)
	}
	if life.Mail.MessageID != "life@shop" || life.Mail.Status != "sent" || life.Mail.Purged || len(life.Mail.Recipients) != 2 {
		t.Errorf("Mail = %+v", life.Mail)
	}
	wantTypes := []string{"claimed", "deferred", "accepted", "bounced", "delivered"}
	if len(life.Entries) != len(wantTypes) {
		t.Fatalf("entries = %+v, want %v", life.Entries, wantTypes)
	}
	for i, e := range life.Entries {
		if e.Type != wantTypes[i] {
			t.Errorf("entry %d is %s, want %s (entries %+v)", i, e.Type, wantTypes[i], life.Entries)
		}
		if i > 0 && e.At.Before(life.Entries[i-1].At) {
			t.Errorf("entry %d (%s) is older than the one before", i, e.Type)
		}
	}
	claim, def, acc, bnc := life.Entries[0], life.Entries[1], life.Entries[2], life.Entries[3]
	if !claim.At.Equal(at(10)) || claim.RecipientIndex != -1 || claim.EventID != "" {
		t.Errorf("claim = %+v", claim)
	}
	if def.EventID != deferred.ID || def.Provider != "relay-a" || def.Class != "transient" || !def.NextAttemptAt.Equal(next) ||
		def.Attempt != 1 || def.Recipient != "ada@example.com" || def.Code != 451 || def.Status != "4.7.1" ||
		def.Diagnostic != "try later" {
		t.Errorf("deferral = %+v", def)
	}
	if acc.DKIMDomain != "shop.example" || acc.Attempt != 2 {
		t.Errorf("acceptance = %+v", acc)
	}
	if bnc.RecipientIndex != 1 || bnc.Code != 550 || bnc.Status != "5.1.1" || bnc.Diagnostic != "550 5.1.1 no such user" ||
		bnc.BounceType != "hard" || bnc.Rule != "user_unknown" || bnc.Source != "smtp" {
		t.Errorf("bounce = %+v", bnc)
	}
	if life.Template == nil || *life.Template != (mailquery.TemplateUse{Name: "welcome", Version: 3, Why: "active"}) {
		t.Errorf("Template = %+v", life.Template)
	}
	if life.DKIMDomain != "shop.example" {
		t.Errorf("DKIMDomain = %q", life.DKIMDomain)
	}
	if len(life.Webhooks) != 2 {
		t.Fatalf("Webhooks = %+v, want crm's and dash's", life.Webhooks)
	}
	crm, dash := life.Webhooks[0], life.Webhooks[1]
	if crm.Endpoint != "crm" || crm.State != "pending" || crm.EventID != delivered.ID || crm.EventType != "delivered" ||
		crm.Attempts != 2 || crm.LastStatus != 503 || crm.LastError != "HTTP 503" || crm.NextAt.IsZero() ||
		!crm.EndpointDisabledAt.IsZero() {
		t.Errorf("crm = %+v", crm)
	}
	if dash.Endpoint != "dash" || dash.State != "dead" || dash.DeadReason != "horizon" || dash.DeadAt.IsZero() ||
		!dash.NextAt.IsZero() || dash.EndpointDisabledAt.IsZero() || dash.LastError != "timeout" {
		t.Errorf("dash = %+v", dash)
	}

	t.Run("re-opens", func(t *testing.T) {
		seed(t, pool,
			seeded{id: "replayed@shop", tenant: "acme", status: idempotency.StatusSent, createdAt: at(30),
				rcpts: []idempotency.RecipientFate{rcpt(0, "ada@example.com", idempotency.RecipientAccepted)}},
			seeded{id: "redriven@shop", tenant: "acme", status: idempotency.StatusSent, createdAt: at(30),
				rcpts: []idempotency.RecipientFate{rcpt(0, "ada@example.com", idempotency.RecipientAccepted)}})
		for id, reopened := range map[string]time.Time{"replayed@shop": at(20), "redriven@shop": at(20)} {
			if _, err := pool.Exec(ctx, `UPDATE postline_messages SET replayed_at = $2 WHERE message_id = $1`, id, reopened); err != nil {
				t.Fatal(err)
			}
		}
		redriven := ev("redriven@shop", 0, "ada@example.com", event.Redriven, 0, at(20).Add(2*time.Second))
		redriven.Note, redriven.Actor, redriven.Reason = "relay fixed", "postctl:ops", "max_attempts"
		if err := ix.WriteEvents(ctx, []event.Event{redriven}); err != nil {
			t.Fatal(err)
		}

		// A replay publishes no event: the row's re-open is the entry.
		life, err := r.Life(ctx, "replayed@shop")
		if err != nil {
			t.Fatal(err)
		}
		if len(life.Entries) != 2 || life.Entries[1].Type != mailquery.EntryRedriven || life.Entries[1].RecipientIndex != -1 ||
			!life.Entries[1].At.Equal(at(20)) || life.Entries[1].Note == "" {
			t.Errorf("replayed mail's entries = %+v, want the claim and the row's re-open", life.Entries)
		}
		// A re-drive's events tell more, and the row's re-open is not
		// shown again beside them.
		life, err = r.Life(ctx, "redriven@shop")
		if err != nil {
			t.Fatal(err)
		}
		if len(life.Entries) != 2 {
			t.Fatalf("re-driven mail's entries = %+v, want the claim and the redriven event", life.Entries)
		}
		if e := life.Entries[1]; e.Type != "redriven" || e.RecipientIndex != 0 || e.Note != "relay fixed" ||
			e.Actor != "postctl:ops" || e.Reason != "max_attempts" || e.EventID != redriven.ID {
			t.Errorf("redriven entry = %+v", e)
		}
	})

	t.Run("unknown mail", func(t *testing.T) {
		if _, err := r.Life(ctx, "nobody@shop"); !errors.Is(err, mailquery.ErrNotFound) {
			t.Errorf("Life = %v, want ErrNotFound", err)
		}
	})

	t.Run("a purged row leaves its events", func(t *testing.T) {
		life, err := r.Life(ctx, "other@shop")
		if err != nil {
			t.Fatal(err)
		}
		if !life.Mail.Purged || life.Mail.Tenant != "acme" || len(life.Entries) != 1 || life.Entries[0].Type != "accepted" {
			t.Errorf("Life = %+v", life)
		}
	})

	t.Run("purge", func(t *testing.T) {
		old := ev("old@shop", 0, "x@example.com", event.Accepted, 1, now.Add(-40*24*time.Hour))
		if err := ix.WriteEvents(ctx, []event.Event{old}); err != nil {
			t.Fatal(err)
		}
		n, err := ix.Purge(ctx, 30*24*time.Hour)
		if err != nil || n != 1 {
			t.Errorf("Purge = %d, %v; want 1", n, err)
		}
		if _, err := r.Life(ctx, "old@shop"); !errors.Is(err, mailquery.ErrNotFound) {
			t.Errorf("Life after purge = %v, want ErrNotFound", err)
		}
		if _, err := r.Life(ctx, "life@shop"); err != nil {
			t.Errorf("Life of a recent mail after purge: %v", err)
		}
		if _, err := ix.Purge(ctx, 0); err == nil {
			t.Error("Purge(0) succeeded, want an error")
		}
	})
}
