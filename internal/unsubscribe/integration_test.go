package unsubscribe

import (
	"os"
	"testing"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/testenv"
)

// TestApplyOnPostgres runs the Applier on the real suppression table: the
// replay check reads exactly the token's key, a repeated unsubscribe
// changes nothing, and the entry suppresses the token's stream only.
func TestApplyOnPostgres(t *testing.T) {
	_, pool := testenv.NewSchema(t)
	ddl, err := os.ReadFile("../schema/migrations/0008_suppressions.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), string(ddl)); err != nil {
		t.Fatal(err)
	}
	store, err := suppression.New(suppression.Config{NowFunc: func() time.Time { return t0 }}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, s, ev, _, _ := newTestApplier(t, store)
	tok := sampleToken()
	// Neighbours the replay check must not take for this key: a longer
	// address with the same start, the same address on another stream and
	// tenant.
	if _, err := store.Add(t.Context(), []suppression.Entry{
		{Tenant: "acme", Stream: suppression.StreamBulk, Address: "ada.lovelace@example.net.other", Reason: suppression.ReasonUnsubscribe, Source: "test"},
		{Tenant: "acme", Stream: suppression.StreamTransactional, Address: "zed@example.net", Reason: suppression.ReasonManual, Source: "test"},
		{Tenant: "", Stream: suppression.StreamBulk, Address: "ada.lovelace@example.net", Reason: suppression.ReasonUnsubscribe, Source: "test"},
	}); err != nil {
		t.Fatal(err)
	}
	token := signed(tok)(s)
	for i, want := range []Result{ResultOK, ResultReplayed} {
		if got, err := a.Apply(t.Context(), ChannelPost, token); got != want || err != nil {
			t.Fatalf("Apply #%d = %s, %v; want %s", i+1, got, err, want)
		}
	}
	if n := len(ev.published()); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
	hits, err := store.Check(t.Context(), []suppression.Key{
		{Tenant: "acme", Stream: suppression.StreamBulk, Address: "Ada.Lovelace@Example.net"},
		{Tenant: "acme", Stream: suppression.StreamTransactional, Address: "ada.lovelace@example.net"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := hits[suppression.Key{Tenant: "acme", Stream: suppression.StreamBulk, Address: "Ada.Lovelace@Example.net"}]; !ok ||
		e.Reason != suppression.ReasonUnsubscribe || e.Source != SourceOneClick || e.MessageID != tok.MessageID {
		t.Errorf("bulk entry = %+v, %v; want an unsubscribe from the mail", e, ok)
	}
	if len(hits) != 1 {
		t.Errorf("hits %v: the transactional stream must stay open", hits)
	}
	if tok.Stream != event.StreamBulk {
		t.Fatal("the sample token is meant to be bulk")
	}
}
