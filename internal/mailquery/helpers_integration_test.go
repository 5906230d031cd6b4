package mailquery_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/mailquery"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
)

// migrated returns a pool on a fresh, migrated schema of the test
// database; it skips the test under -short.
func migrated(t *testing.T) *pgxpool.Pool {
	t.Helper()
	_, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return pool
}

func newReader(t *testing.T, pool *pgxpool.Pool) *mailquery.Reader {
	t.Helper()
	r, err := mailquery.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// seeded is a mail to write through the worker's store.
type seeded struct {
	id, tenant string
	status     idempotency.Status
	class      string
	rcpts      []idempotency.RecipientFate
	createdAt  time.Time
}

// seed writes mails as the worker does (a claim, then the fate of the
// attempt with its recipients), then dates each row's creation.
func seed(t *testing.T, pool *pgxpool.Pool, mails ...seeded) {
	t.Helper()
	ctx := t.Context()
	store, err := idempotency.New(idempotency.Config{Owner: "test-worker", Lease: time.Hour}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]idempotency.ClaimRequest, len(mails))
	for i, m := range mails {
		h := sha256.Sum256([]byte(m.id))
		reqs[i] = idempotency.ClaimRequest{MessageID: m.id, PayloadHash: h[:], Attempt: 1, Tenant: m.tenant, Priority: "normal"}
	}
	claims, err := store.Claim(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	fates := make([]idempotency.Fate, len(mails))
	for i, m := range mails {
		if claims[i].Result != idempotency.Claimed {
			t.Fatalf("claim %s: result %v", m.id, claims[i].Result)
		}
		for j := range m.rcpts {
			m.rcpts[j].Attempt, m.rcpts[j].Provider = 1, "relay-a"
		}
		fates[i] = idempotency.Fate{MessageID: m.id, Version: claims[i].Version, Status: m.status, Provider: "relay-a",
			ErrorClass: m.class, Recipients: m.rcpts, Stream: "transactional"}
		if m.status == idempotency.StatusRetrying {
			fates[i].Attempt = 2
		}
	}
	lost, err := store.Record(ctx, fates)
	if err != nil || len(lost) > 0 {
		t.Fatalf("Record: lost %v, %v", lost, err)
	}
	for _, m := range mails {
		if _, err := pool.Exec(ctx, `UPDATE postline_messages SET created_at = $2 WHERE message_id = $1`,
			m.id, m.createdAt); err != nil {
			t.Fatal(err)
		}
	}
}

func rcpt(idx int, addr string, state idempotency.RecipientState) idempotency.RecipientFate {
	return idempotency.RecipientFate{Index: idx, Address: addr, State: state}
}

// ids are the Message-IDs of a page, in order.
func ids(p mailquery.Page) []string {
	out := make([]string, len(p.Mails))
	for i, m := range p.Mails {
		out[i] = m.MessageID
	}
	return out
}
