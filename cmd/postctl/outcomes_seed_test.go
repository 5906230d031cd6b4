package main

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
)

// outcomeSeed writes mail rows through the workers' claim and record paths
// in a fresh, migrated schema.
type outcomeSeed struct {
	t     *testing.T
	url   string
	pool  *pgxpool.Pool
	store *idempotency.Store
}

func newOutcomeSeed(t *testing.T) *outcomeSeed {
	t.Helper()
	url, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return &outcomeSeed{t: t, url: url, pool: pool, store: newTestStore(t, pool, "worker-seed", time.Hour)}
}

// claim claims id for tenant and returns the claim's version.
func (s *outcomeSeed) claim(id, tenant string) int64 {
	s.t.Helper()
	sum := sha256.Sum256([]byte(id))
	cs, err := s.store.Claim(s.t.Context(), []idempotency.ClaimRequest{{MessageID: id, PayloadHash: sum[:], Attempt: 1,
		Tenant: tenant, Payload: []byte(`{}`)}})
	if err != nil || cs[0].Result != idempotency.Claimed {
		s.t.Fatalf("claim %s: %+v, %v", id, cs, err)
	}
	return cs[0].Version
}

// sent claims id and records it sent with the given recipients and
// confirmation window.
func (s *outcomeSeed) sent(id, tenant, stream string, confirmBy time.Time, rs ...idempotency.RecipientFate) {
	s.t.Helper()
	v := s.claim(id, tenant)
	lost, err := s.store.Record(s.t.Context(), []idempotency.Fate{{MessageID: id, Version: v,
		Status: idempotency.StatusSent, Attempt: 1, Provider: "relay-a", Stream: stream, ConfirmBy: confirmBy,
		Metadata: map[string]string{"campaign": "c-1"}, Recipients: rs}})
	if err != nil || len(lost) != 0 {
		s.t.Fatalf("record %s: lost %v, %v", id, lost, err)
	}
}

// resolve applies resolutions and fails the test unless each applied.
func (s *outcomeSeed) resolve(res ...idempotency.Resolution) map[string]string {
	s.t.Helper()
	applied, settled, err := s.store.Resolve(s.t.Context(), res)
	if err != nil {
		s.t.Fatal(err)
	}
	for i, a := range applied {
		if !a {
			s.t.Fatalf("resolution %+v not applied", res[i])
		}
	}
	return settled
}

func seedRcpt(idx int, addr string, state idempotency.RecipientState, provider string) idempotency.RecipientFate {
	return idempotency.RecipientFate{Index: idx, Address: addr, State: state, Attempt: 1, Provider: provider, Source: "smtp"}
}
