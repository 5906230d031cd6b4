package main

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
)

// TestSteadyAging installs the steady aging's defaults on the workers'
// real schema and drives rows through the store's own statements, as the
// workers do: the rows written after the defaults moved become purgeable
// the lag after they are sent, and not before; rows written before, and
// rows in flight, stay; and the outcome's update stays HOT.
func TestSteadyAging(t *testing.T) {
	testenv.Integration(t, "PostgreSQL")
	ctx := t.Context()
	_, pool := testenv.NewSchema(t)
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	store, err := idempotency.New(idempotency.Config{Owner: "soak-test", Lease: time.Minute}, pool, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	claim := func(ids ...string) []int64 {
		t.Helper()
		reqs := make([]idempotency.ClaimRequest, len(ids))
		for i, id := range ids {
			h := sha256.Sum256([]byte(id))
			reqs[i] = idempotency.ClaimRequest{MessageID: id, PayloadHash: h[:], Attempt: 1, EnqueuedAt: time.Now()}
		}
		cs, err := store.Claim(ctx, reqs)
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		versions := make([]int64, len(cs))
		for i, c := range cs {
			if c.Result != idempotency.Claimed {
				t.Fatalf("Claim %s: %v, want claimed", ids[i], c.Result)
			}
			versions[i] = c.Version
		}
		return versions
	}
	send := func(id string, version int64) {
		t.Helper()
		lost, err := store.Record(ctx, []idempotency.Fate{{MessageID: id, Version: version, Status: idempotency.StatusSent, Attempt: 1}})
		if err != nil || len(lost) > 0 {
			t.Fatalf("Record %s: %v (lost %v)", id, err, lost)
		}
	}
	const retention, lag = time.Hour, 2 * time.Second

	v := claim("before")
	send("before", v[0])
	a, err := steady(ctx, pool, retention-lag, lag, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.Mode != agingSteady || a.Lag != lag || a.Shift != retention-lag || a.Took <= 0 {
		t.Errorf("aging %+v", a)
	}
	v = claim("sent", "in flight")
	send("sent", v[0])
	sentAt := time.Now()

	if n, err := store.Purge(ctx, retention, 100); err != nil || n != 0 {
		t.Fatalf("Purge within the lag of the send = %d, %v; want nothing purged", n, err)
	}
	time.Sleep(time.Until(sentAt.Add(lag + 500*time.Millisecond)))
	if n, err := store.Purge(ctx, retention, 100); err != nil || n != 1 {
		t.Fatalf("Purge past the lag = %d, %v; want the one sent row purged", n, err)
	}
	for id, want := range map[string]bool{"before": true, "sent": false, "in flight": true} {
		var there bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM postline_messages WHERE message_id = $1)`, id).Scan(&there); err != nil {
			t.Fatal(err)
		}
		if there != want {
			t.Errorf("row %q there: %v, want %v", id, there, want)
		}
	}
	if upd, hot := updates(t, pool, 2); upd != 2 || hot != upd {
		t.Errorf("%d of %d updates of postline_messages HOT, want both outcomes", hot, upd)
	}
}

// updates polls the table's update counters until they count want updates
// (the statistics are flushed after the transaction) or 10 s have passed.
func updates(t *testing.T, pool *pgxpool.Pool, want int64) (upd, hot int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err := pool.QueryRow(context.Background(), `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE schemaname = current_schema() AND relname = 'postline_messages'`).Scan(&upd, &hot); err != nil {
			t.Fatalf("table statistics: %v", err)
		}
		if upd >= want || time.Now().After(deadline) {
			return upd, hot
		}
	}
}
