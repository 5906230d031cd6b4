package reaper_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/reaper"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/job"
)

// TestKeptLeaseIsNeverTakenOver is the regression test of queued jobs
// outliving their lease: a job claimed with a 2s lease and held for 6s (as
// if waiting for a throttled relay) keeps its row, because the lease
// keeper extends it, while an eager reaper passes every 100ms. Once the
// keeper stops (the owner died), the same reaper takes the row over.
func TestKeptLeaseIsNeverTakenOver(t *testing.T) {
	t.Parallel()
	testenv.Integration(t, "Kafka and PostgreSQL")
	_, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	const lease = 2 * time.Second
	storeReg := prometheus.NewRegistry()
	owner, err := idempotency.New(idempotency.Config{Owner: "worker", Lease: lease}, pool, nil, storeReg)
	if err != nil {
		t.Fatal(err)
	}
	other, err := idempotency.New(idempotency.Config{Owner: "reaper"}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.NewTopic(t, 1)
	pub, err := testenv.Kafka().TopicWriter(kafkaclient.WriterConfig{Topic: name, Limits: map[string]int{name: topic.MaxMessageBytes}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })

	j := job.Job{Version: 1, MessageID: "kept.1@example.com", From: "a@example.com", To: []string{"b@example.test"}, Subject: "s", Text: "t"}
	cs, err := owner.Claim(t.Context(), []idempotency.ClaimRequest{{MessageID: j.MessageID, PayloadHash: j.Hash(), Attempt: 1, Payload: []byte(`{"kept":1}`)}})
	if err != nil || cs[0].Result != idempotency.Claimed {
		t.Fatalf("claim = %+v, %v", cs, err)
	}
	claimed := cs[0]
	before, err := owner.Get(t.Context(), j.MessageID)
	if err != nil {
		t.Fatal(err)
	}

	keeper, err := idempotency.NewLeaseKeeper(idempotency.KeeperConfig{Lease: lease}, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	keeper.Hold(j.MessageID, claimed.Version)
	reaperReg := prometheus.NewRegistry()
	r, err := reaper.New(reaper.Config{Interval: 100 * time.Millisecond, Grace: time.Nanosecond}, other, pub, nil, reaperReg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	keeperCtx, stopKeeper := context.WithCancel(ctx)
	keeperDone := make(chan error, 1)
	go func() { keeperDone <- keeper.Run(keeperCtx) }()
	reaperDone := make(chan error, 1)
	go func() { reaperDone <- r.Run(ctx) }()

	// Three leases' worth of time: the row stays ours, its expiry moves
	// forward, and the version Record needs does not change.
	lastExpiry := before.LeaseExpiresAt
	moves := 0
	for end := time.Now().Add(3 * lease); time.Now().Before(end); {
		time.Sleep(500 * time.Millisecond)
		row, err := owner.Get(t.Context(), j.MessageID)
		if err != nil {
			t.Fatal(err)
		}
		if row.Status != idempotency.StatusSending || row.LeaseOwner != "worker" || row.Version != claimed.Version {
			t.Fatalf("row taken over while its lease was kept: %+v", row)
		}
		if row.LeaseExpiresAt.After(lastExpiry) {
			moves++
		}
		lastExpiry = row.LeaseExpiresAt
	}
	if moves < 3 || !lastExpiry.After(before.LeaseExpiresAt.Add(lease)) {
		t.Errorf("lease expiry moved %d times, from %v to %v; want it kept a lease ahead", moves, before.LeaseExpiresAt, lastExpiry)
	}
	if got := counterValue(t, reaperReg, "postline_reaper_takeovers_total"); got != 0 {
		t.Errorf("takeovers_total = %v while the lease was kept, want 0", got)
	}
	if got := counterValue(t, storeReg, "postline_idempotency_lease_extensions_total"); got < 6 {
		t.Errorf("lease_extensions_total = %v, want one per lease/3 (at least 6 in 6s)", got)
	}
	if !keeper.Held(j.MessageID, claimed.Version) {
		t.Error("the keeper reports the lease lost")
	}

	// The test can see a takeover: once the keeper stops (the owner is
	// gone), the reaper takes the row over within a lease.
	stopKeeper()
	if err := <-keeperDone; err != nil {
		t.Fatalf("keeper Run = %v", err)
	}
	deadline := time.Now().Add(3 * lease)
	for counterValue(t, reaperReg, "postline_reaper_takeovers_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the reaper never took over the row after its keeper stopped")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The takeover is counted when the copy is published, just before the
	// row is handed back: wait for the hand-back itself.
	for {
		row, err := owner.Get(t.Context(), j.MessageID)
		if err != nil {
			t.Fatal(err)
		}
		if row.Version != claimed.Version {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reaper counted a takeover but never handed back the row")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-reaperDone; err != nil {
		t.Fatalf("reaper Run = %v", err)
	}
	// The late owner's Record now loses its compare-and-set.
	lost, err := owner.Record(t.Context(), []idempotency.Fate{{MessageID: j.MessageID, Version: claimed.Version, Status: idempotency.StatusSent}})
	if err != nil || len(lost) != 1 {
		t.Errorf("Record after the takeover = %v, %v; want it lost", lost, err)
	}
}

// TestKeptLeaseStillRecords checks that extensions leave the claim's
// version valid: the owner's Record after several extensions wins.
func TestKeptLeaseStillRecords(t *testing.T) {
	t.Parallel()
	testenv.Integration(t, "PostgreSQL")
	_, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	owner, err := idempotency.New(idempotency.Config{Owner: "worker", Lease: time.Second}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := owner.Claim(t.Context(), []idempotency.ClaimRequest{{MessageID: "rec@x", PayloadHash: []byte("h"), Attempt: 1}})
	if err != nil || cs[0].Result != idempotency.Claimed {
		t.Fatalf("claim = %+v, %v", cs, err)
	}
	keeper, err := idempotency.NewLeaseKeeper(idempotency.KeeperConfig{Lease: time.Second}, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	keeper.Hold("rec@x", cs[0].Version)
	for range 3 {
		if n, lost, err := keeper.Extend(t.Context()); n != 1 || lost != 0 || err != nil {
			t.Fatalf("Extend = %d, %d, %v; want 1 extended", n, lost, err)
		}
	}
	lost, err := owner.Record(t.Context(), []idempotency.Fate{{MessageID: "rec@x", Version: cs[0].Version, Status: idempotency.StatusSent}})
	if err != nil || len(lost) != 0 {
		t.Fatalf("Record after extensions = %v, %v; want it written", lost, err)
	}
	keeper.Drop("rec@x", cs[0].Version)
	if keeper.Len() != 0 {
		t.Errorf("keeper holds %d leases after the drop", keeper.Len())
	}
}
