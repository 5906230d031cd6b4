package outcome

import (
	"crypto/sha256"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/bounce"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/report"
	"github.com/postline/postline/internal/returnpath"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/testenv"
)

// The tests below run the Applier and the Sweeper on the real Postgres
// stores: reports come from documents bounce.Parse reads, found by their
// return path's token as the inbound receiver finds them, or by
// Message-ID and address as a provider's event names them.

type pgEnv struct {
	db     *pgxpool.Pool
	ids    *idempotency.Store
	lists  *suppression.Store
	events *fakeEvents
	signer *returnpath.Signer
	reg    *prometheus.Registry
	a      *Applier
}

func newPG(t *testing.T) *pgEnv {
	t.Helper()
	_, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return newPGOn(t, pool)
}

func newPGOn(t *testing.T, pool *pgxpool.Pool) *pgEnv {
	t.Helper()
	e := &pgEnv{db: pool, events: newFakeEvents(), signer: newSigner(t, testKey), reg: prometheus.NewRegistry()}
	var err error
	if e.ids, err = idempotency.New(idempotency.Config{Owner: "outcome-test"}, pool, discard(), e.reg); err != nil {
		t.Fatalf("idempotency.New: %v", err)
	}
	if e.lists, err = suppression.New(suppression.Config{}, pool, discard(), e.reg); err != nil {
		t.Fatalf("suppression.New: %v", err)
	}
	if e.a, err = New(Config{}, discard(), e.reg, e.ids, e.events, e.lists, e.signer); err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

// send claims a mail and records its attempt with the given recipients,
// as the worker does once a relay took it.
func (e *pgEnv) send(t *testing.T, id, stream string, confirmBy time.Time, rcpts ...idempotency.RecipientFate) {
	t.Helper()
	h := sha256.Sum256([]byte(id))
	cs, err := e.ids.Claim(t.Context(), []idempotency.ClaimRequest{{MessageID: id, PayloadHash: h[:], Attempt: 1, Tenant: "acme"}})
	if err != nil || len(cs) != 1 {
		t.Fatalf("Claim(%s) = %+v, %v", id, cs, err)
	}
	if _, err := e.ids.Record(t.Context(), []idempotency.Fate{{MessageID: id, Version: cs[0].Version,
		Status: idempotency.StatusSent, Attempt: 1, Provider: "primary", Stream: stream,
		Metadata: map[string]string{"order": "42"}, ConfirmBy: confirmBy, Recipients: rcpts}}); err != nil {
		t.Fatalf("Record(%s): %v", id, err)
	}
}

func accepted(idx int, addr string) idempotency.RecipientFate {
	return idempotency.RecipientFate{Index: idx, Address: addr, State: idempotency.RecipientAccepted, Attempt: 1,
		Provider: "primary", Source: "smtp"}
}

func (e *pgEnv) rows(t *testing.T, id string) []idempotency.Recipient {
	t.Helper()
	got, err := e.ids.Recipients(t.Context(), []string{id})
	if err != nil {
		t.Fatalf("Recipients(%s): %v", id, err)
	}
	return got[id]
}

// life is the life of mail id, as its recipient rows carry it: what its
// event IDs hash in.
func (e *pgEnv) life(t *testing.T, id string) int64 {
	t.Helper()
	rs := e.rows(t, id)
	if len(rs) == 0 {
		t.Fatalf("%s has no recipient rows", id)
	}
	if rs[0].Life == 0 {
		t.Fatalf("%s has no life", id)
	}
	return rs[0].Life
}

func (e *pgEnv) states(t *testing.T, id string) []idempotency.RecipientState {
	t.Helper()
	var out []idempotency.RecipientState
	for _, r := range e.rows(t, id) {
		out = append(out, r.State)
	}
	return out
}

// dsn is what the inbound receiver hands over for a DSN that came to
// returnPath: the parsed reports with the return path's token.
func dsn(t *testing.T, s *returnpath.Signer, returnPath, messageID string, r report.Report) []report.Report {
	t.Helper()
	raw, err := bounce.BuildDSN(bounce.DSN{ReportingMTA: "mx.example.com", Date: time.Now(), ReturnPath: returnPath,
		MessageID: messageID, OriginalTo: r.Recipient, Subject: "Your order", Recipients: []report.Report{r}})
	if err != nil {
		t.Fatalf("BuildDSN: %v", err)
	}
	res, err := bounce.Parse(raw)
	if err != nil || res.Type != bounce.TypeDSN || len(res.Reports) != 1 {
		t.Fatalf("Parse = %+v, %v; want one DSN report", res, err)
	}
	token, ok := s.TokenOf(returnPath)
	if !ok {
		t.Fatalf("TokenOf(%s) refused the return path", returnPath)
	}
	res.Reports[0].Token = token
	return res.Reports
}

// arf is what the inbound receiver hands over for a complaint: the token
// of the returned original's return path.
func arf(t *testing.T, s *returnpath.Signer, returnPath, messageID, rcpt string) []report.Report {
	t.Helper()
	raw, err := bounce.BuildARF(bounce.ARF{To: "fbl@bounces.postline.test", Date: time.Now(), FeedbackType: "abuse",
		OriginalMailFrom: returnPath, Recipients: []string{rcpt}, ReturnPath: returnPath, MessageID: messageID,
		OriginalTo: rcpt, Subject: "Your order"})
	if err != nil {
		t.Fatalf("BuildARF: %v", err)
	}
	res, err := bounce.Parse(raw)
	if err != nil || res.Type != bounce.TypeARF || len(res.Reports) != 1 {
		t.Fatalf("Parse = %+v, %v; want one ARF report", res, err)
	}
	token, ok := s.TokenOf(res.ReturnPath)
	if !ok {
		t.Fatalf("TokenOf(%q) refused the original's return path", res.ReturnPath)
	}
	res.Reports[0].Token = token
	return res.Reports
}

func TestIntegrationReports(t *testing.T) {
	t.Parallel()
	e := newPG(t)
	ctx := t.Context()
	const id = "order-77.1@postline.test"
	addrs := []string{"ada@example.com", "bob@example.com", "cy@example.com"}
	e.send(t, id, event.StreamBulk, time.Now().Add(time.Hour), accepted(0, addrs[0]), accepted(1, addrs[1]), accepted(2, addrs[2]))

	// Forged first: a DSN to a return path signed by another key, and one
	// with a character of its token changed, move nothing.
	other := newSigner(t, otherKey)
	hard := report.Report{Kind: report.Bounced, Recipient: addrs[0], Status: "5.1.1", Code: 550,
		Diagnostic: "5.1.1 <ada@example.com>: Recipient address rejected: User unknown in virtual mailbox table",
		RemoteMTA:  "mx.example.com"}
	forged := dsn(t, other, other.Address(id, 0), id, hard)
	good := e.signer.Address(id, 0)
	flipped := returnpath.Prefix + flip(good[len(returnpath.Prefix):len(returnpath.Prefix)+returnpath.TokenLen], 5) + good[len(returnpath.Prefix)+returnpath.TokenLen:]
	forged = append(forged, dsn(t, e.signer, flipped, id, hard)...)
	if err := e.a.ApplyReturned(ctx, forged); err != nil {
		t.Fatalf("ApplyReturned(forged): %v", err)
	}
	for i, s := range e.states(t, id) {
		if s != idempotency.RecipientAccepted {
			t.Errorf("after forged reports recipient %d = %s, want accepted", i, s)
		}
	}
	if got := testutil.ToFloat64(e.a.metrics.reports.WithLabelValues(report.SourceDSN, string(report.Bounced), ResultForged)); got != 2 {
		t.Errorf(`reports_total{dsn,bounced,forged} = %v, want 2`, got)
	}
	if n := len(e.events.published()); n != 0 {
		t.Fatalf("forged reports published %d events", n)
	}

	bounced := dsn(t, e.signer, good, id, hard)
	complained := arf(t, e.signer, e.signer.Address(id, 1), id, addrs[1])
	delivered := []report.Report{{Kind: report.Delivered, Source: report.SourceSES, MessageID: id, Recipient: "CY@example.com"}}
	apply := func() {
		t.Helper()
		if err := e.a.ApplyReturned(ctx, bounced); err != nil {
			t.Fatalf("ApplyReturned(DSN): %v", err)
		}
		if err := e.a.ApplyReturned(ctx, complained); err != nil {
			t.Fatalf("ApplyReturned(ARF): %v", err)
		}
		if err := e.a.ApplySigned(ctx, delivered); err != nil {
			t.Fatalf("ApplySigned: %v", err)
		}
	}
	apply()

	rs := e.rows(t, id)
	if len(rs) != 3 {
		t.Fatalf("rows = %+v", rs)
	}
	if r := rs[0]; r.State != idempotency.RecipientBounced || r.BounceType != "hard" || r.Status != "5.1.1" || r.Code != 550 ||
		r.Source != report.SourceDSN || r.Rule == "" || r.ResolvedAt.IsZero() {
		t.Errorf("recipient 0 = %+v, want bounced hard 550 5.1.1 from the DSN", r)
	}
	if r := rs[1]; r.State != idempotency.RecipientComplained || r.FeedbackType != "abuse" || r.Source != report.SourceARF {
		t.Errorf("recipient 1 = %+v, want complained (abuse) from the ARF", r)
	}
	if r := rs[2]; r.State != idempotency.RecipientDelivered || r.Source != report.SourceSES {
		t.Errorf("recipient 2 = %+v, want delivered by SES", r)
	}
	for _, r := range rs {
		if r.Confirmation != "confirmed" {
			t.Errorf("confirmation = %q, want confirmed", r.Confirmation)
			break
		}
	}
	if got := testutil.ToFloat64(e.a.metrics.confirmations.WithLabelValues("confirmed")); got != 1 {
		t.Errorf("confirmations_total{confirmed} = %v, want 1", got)
	}

	// The events: one of each transition, as the schema wants them.
	checkEvents := func() {
		t.Helper()
		evs := e.events.published()
		life := e.life(t, id)
		want := map[string]event.Type{
			event.NewLifeID(id, life, 0, event.Bounced, 0):    event.Bounced,
			event.NewLifeID(id, life, 1, event.Complained, 0): event.Complained,
			event.NewLifeID(id, life, 2, event.Delivered, 0):  event.Delivered,
		}
		if len(evs) != len(want) {
			t.Fatalf("published %d events, want %d: %+v", len(evs), len(want), evs)
		}
		for _, ev := range evs {
			if want[ev.ID] != ev.Type {
				t.Errorf("event %s of type %s not expected", ev.ID, ev.Type)
			}
			delete(want, ev.ID)
			if ev.Stream != event.StreamBulk || ev.Tenant != "acme" || ev.Recipient != addrs[ev.RecipientIndex] ||
				ev.Provider != "primary" || ev.Metadata["order"] != "42" {
				t.Errorf("event = %+v", ev)
			}
			if ev.Type == event.Bounced && (ev.Bounce.Type != event.BounceHard || ev.Bounce.Status != "5.1.1" ||
				ev.Bounce.Code != 550 || ev.Bounce.Source != report.SourceDSN) {
				t.Errorf("bounce = %+v, want hard 550 5.1.1 from the DSN", ev.Bounce)
			}
			if ev.Type == event.Complained && ev.FeedbackType != "abuse" {
				t.Errorf("complaint feedback type %q, want abuse", ev.FeedbackType)
			}
		}
	}
	checkEvents()

	// Suppression: the hard bounce on every stream, the complaint on the
	// stream it came on only, the delivered address nowhere.
	checkLists := func() {
		t.Helper()
		for _, c := range []struct {
			addr   string
			stream suppression.Stream
			want   suppression.Reason
		}{
			{addrs[0], suppression.StreamTransactional, suppression.ReasonHardBounce},
			{addrs[0], suppression.StreamBulk, suppression.ReasonHardBounce},
			{addrs[1], suppression.StreamBulk, suppression.ReasonComplaint},
			{addrs[1], suppression.StreamTransactional, ""},
			{addrs[2], suppression.StreamTransactional, ""},
			{addrs[2], suppression.StreamBulk, ""},
		} {
			k := suppression.Key{Tenant: "acme", Stream: c.stream, Address: c.addr}
			hits, err := e.lists.Check(ctx, []suppression.Key{k})
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			got, ok := hits[k]
			if c.want == "" {
				if ok {
					t.Errorf("%s on %s suppressed by %+v, want not", c.addr, c.stream, got)
				}
				continue
			}
			if !ok || got.Reason != c.want || got.MessageID != id || !got.ExpiresAt.IsZero() {
				t.Errorf("%s on %s: %+v (found %v), want %s from %s, never expiring", c.addr, c.stream, got, ok, c.want, id)
			}
		}
		// Another tenant's mail to the same addresses is not suppressed.
		k := suppression.Key{Tenant: "other", Stream: suppression.StreamBulk, Address: addrs[0]}
		if hits, err := e.lists.Check(ctx, []suppression.Key{k}); err != nil || len(hits) != 0 {
			t.Errorf("other tenant: %v, %v; want nothing", hits, err)
		}
	}
	checkLists()

	// The same reports again: every recipient has moved, so nothing is
	// published at all, and nothing changes.
	calls := e.events.Calls()
	apply()
	if e.events.Calls() != calls {
		t.Errorf("the repeated reports published %d more times", e.events.Calls()-calls)
	}
	checkEvents()
	checkLists()
	for _, kind := range []struct {
		source string
		kind   report.Kind
	}{{report.SourceDSN, report.Bounced}, {report.SourceARF, report.Complained}, {report.SourceSES, report.Delivered}} {
		if got := testutil.ToFloat64(e.a.metrics.reports.WithLabelValues(kind.source, string(kind.kind), ResultStale)); got != 1 {
			t.Errorf("reports_total{%s,%s,stale} = %v, want 1", kind.source, kind.kind, got)
		}
	}

	// A forged token after all that still changes nothing.
	if err := e.a.ApplyReturned(ctx, dsn(t, other, other.Address(id, 2), id,
		report.Report{Kind: report.Bounced, Recipient: addrs[2], Status: "5.1.1", Code: 550})); err != nil {
		t.Fatal(err)
	}
	if s := e.states(t, id); s[2] != idempotency.RecipientDelivered {
		t.Errorf("a forged bounce moved recipient 2 to %s", s[2])
	}
}

// TestIntegrationDelayedAndSoft checks reports that resolve without
// suppressing, and one that resolves nothing, on the real stores; and
// that mail all of whose recipients bounced is cancelled.
func TestIntegrationDelayedAndSoft(t *testing.T) {
	t.Parallel()
	e := newPG(t)
	ctx := t.Context()
	const id = "newsletter-5@postline.test"
	e.send(t, id, event.StreamTransactional, time.Now().Add(time.Hour), accepted(0, "ada@example.com"), accepted(1, "bob@example.com"))

	delayed := dsn(t, e.signer, e.signer.Address(id, 0), id, report.Report{Kind: report.Delayed, Recipient: "ada@example.com",
		Status: "4.4.7", Diagnostic: "connection timed out"})
	if err := e.a.ApplyReturned(ctx, delayed); err != nil {
		t.Fatal(err)
	}
	if s := e.states(t, id); s[0] != idempotency.RecipientAccepted || len(e.events.published()) != 0 {
		t.Fatalf("after a delayed DSN: %v and %d events, want accepted and none", s, len(e.events.published()))
	}
	full := dsn(t, e.signer, e.signer.Address(id, 0), id, report.Report{Kind: report.Bounced, Recipient: "ada@example.com",
		Status: "5.2.2", Code: 552, Diagnostic: "5.2.2 mailbox full"})
	policy := dsn(t, e.signer, e.signer.Address(id, 1), id, report.Report{Kind: report.Bounced, Recipient: "bob@example.com",
		Status: "5.7.1", Code: 550, Diagnostic: "5.7.1 Message rejected: blocked by policy"})
	if err := e.a.ApplyReturned(ctx, append(full, policy...)); err != nil {
		t.Fatal(err)
	}
	rs := e.rows(t, id)
	if rs[0].BounceType != "soft" || rs[1].BounceType != "policy" || rs[0].Confirmation != "cancelled" {
		t.Errorf("rows = %+v, want soft and policy bounces and the mail cancelled", rs)
	}
	for _, a := range []string{"ada@example.com", "bob@example.com"} {
		for _, st := range []suppression.Stream{suppression.StreamTransactional, suppression.StreamBulk} {
			k := suppression.Key{Tenant: "acme", Stream: st, Address: a}
			if hits, err := e.lists.Check(ctx, []suppression.Key{k}); err != nil || len(hits) != 0 {
				t.Errorf("%s on %s: %v, %v; want not suppressed", a, st, hits, err)
			}
		}
	}
	if got := testutil.ToFloat64(e.a.metrics.confirmations.WithLabelValues("cancelled")); got != 1 {
		t.Errorf("confirmations_total{cancelled} = %v, want 1", got)
	}
}

func TestIntegrationSweep(t *testing.T) {
	t.Parallel()
	e := newPG(t)
	ctx := t.Context()
	const late, early = "late-1@postline.test", "early-1@postline.test"
	refused := idempotency.RecipientFate{Index: 1, Address: "bob@example.com", State: idempotency.RecipientBounced, Attempt: 1,
		Provider: "primary", BounceType: "hard", Status: "5.1.1", Code: 550, Source: "smtp"}
	e.send(t, late, event.StreamTransactional, time.Now().Add(-time.Minute), accepted(0, "ada@example.com"), refused, accepted(2, "cy@example.com"))
	e.send(t, early, event.StreamTransactional, time.Now().Add(time.Hour), accepted(0, "ada@example.com"))

	s, err := NewSweeper(SweepConfig{}, discard(), e.reg, e.ids, e.events)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.Sweep(ctx)
	if err != nil || n != 2 {
		t.Fatalf("Sweep = %d, %v; want the 2 accepted recipients of %s", n, err, late)
	}
	evs := e.events.published()
	life := e.life(t, late)
	want := map[string]bool{event.NewLifeID(late, life, 0, event.Unconfirmed, 0): true, event.NewLifeID(late, life, 2, event.Unconfirmed, 0): true}
	if len(evs) != 2 || !want[evs[0].ID] || !want[evs[1].ID] || evs[0].ID == evs[1].ID {
		t.Fatalf("events = %+v, want one unconfirmed event for recipients 0 and 2", evs)
	}
	if c := e.rows(t, late)[0].Confirmation; c != "unconfirmed" {
		t.Errorf("%s confirmation = %q, want unconfirmed", late, c)
	}
	if c := e.rows(t, early)[0].Confirmation; c != "" {
		t.Errorf("%s confirmation = %q, want none yet", early, c)
	}
	if got := testutil.ToFloat64(s.marked); got != 1 {
		t.Errorf("unconfirmed_total = %v, want 1", got)
	}

	calls := e.events.Calls()
	if n, err := s.Sweep(ctx); err != nil || n != 0 || e.events.Calls() != calls {
		t.Fatalf("second Sweep = %d, %v with %d publications; want nothing", n, err, e.events.Calls()-calls)
	}

	// Reports that come late still settle the mail.
	reps := []report.Report{
		{Kind: report.Delivered, Source: report.SourceMailgun, MessageID: late, Recipient: "ada@example.com"},
		{Kind: report.Delivered, Source: report.SourceMailgun, Token: e.signer.Token(late, 2)},
	}
	if err := e.a.ApplySigned(ctx, reps); err != nil {
		t.Fatal(err)
	}
	for _, r := range e.rows(t, late) {
		if r.Confirmation != "confirmed" {
			t.Errorf("after late deliveries recipient %d: %s, confirmation %q; want confirmed", r.Index, r.State, r.Confirmation)
		}
	}
}

// TestIntegrationSweepSmallBatch checks on the real store's ordering that
// a pass smaller than one mail's recipients still gives each of them an
// event before the mail is marked.
func TestIntegrationSweepSmallBatch(t *testing.T) {
	t.Parallel()
	e := newPG(t)
	const a, b = "batch-a@postline.test", "batch-b@postline.test"
	e.send(t, a, event.StreamBulk, time.Now().Add(-2*time.Minute), accepted(0, "r0@example.com"), accepted(1, "r1@example.com"), accepted(2, "r2@example.com"))
	e.send(t, b, event.StreamBulk, time.Now().Add(-time.Minute), accepted(0, "r0@example.com"), accepted(1, "r1@example.com"))
	s, err := NewSweeper(SweepConfig{Batch: 2}, discard(), e.reg, e.ids, e.events)
	if err != nil {
		t.Fatal(err)
	}
	for pass := 0; ; pass++ {
		if pass > 10 {
			t.Fatal("still sweeping after 10 passes")
		}
		n, err := s.Sweep(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n < 2 {
			break
		}
	}
	count := map[string]int{}
	for _, ev := range e.events.published() {
		count[ev.ID]++
	}
	for id, n := range map[string]int{a: 3, b: 2} {
		for i := range n {
			if c := count[event.NewLifeID(id, e.life(t, id), i, event.Unconfirmed, 0)]; c != 1 {
				t.Errorf("recipient %d of %s had %d unconfirmed events, want 1", i, id, c)
			}
		}
		if c := e.rows(t, id)[0].Confirmation; c != "unconfirmed" {
			t.Errorf("%s confirmation = %q, want unconfirmed", id, c)
		}
	}
}

// TestIntegrationConcurrentReplays applies one report from several
// receivers at once: the compare-and-set lets one of them move the
// recipient, the others count it stale, and whatever copies were written
// carry the one ID, so the transition happens exactly once.
func TestIntegrationConcurrentReplays(t *testing.T) {
	t.Parallel()
	e := newPG(t)
	const id = "race-1@postline.test"
	e.send(t, id, event.StreamTransactional, time.Now().Add(time.Hour), accepted(0, "ada@example.com"))
	reps := dsn(t, e.signer, e.signer.Address(id, 0), id, report.Report{Kind: report.Bounced, Recipient: "ada@example.com",
		Status: "5.1.1", Code: 550, Diagnostic: "5.1.1 user unknown"})
	const n = 4
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() { errs <- e.a.ApplyReturned(t.Context(), reps) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("ApplyReturned: %v", err)
		}
	}
	if s := e.states(t, id); len(s) != 1 || s[0] != idempotency.RecipientBounced {
		t.Fatalf("states = %v, want bounced", s)
	}
	ids := map[string]bool{}
	for _, ev := range e.events.published() {
		ids[ev.ID] = true
	}
	if len(ids) != 1 || !ids[event.NewLifeID(id, e.life(t, id), 0, event.Bounced, 0)] {
		t.Errorf("event IDs = %v, want only the bounce's", ids)
	}
	applied := testutil.ToFloat64(e.a.metrics.reports.WithLabelValues(report.SourceDSN, string(report.Bounced), ResultApplied))
	stale := testutil.ToFloat64(e.a.metrics.reports.WithLabelValues(report.SourceDSN, string(report.Bounced), ResultStale))
	if applied != 1 || stale != n-1 {
		t.Errorf("applied %v, stale %v; want 1 and %d", applied, stale, n-1)
	}
	if got := testutil.ToFloat64(e.a.metrics.transitions.WithLabelValues(string(event.Bounced), event.BounceHard)); got != 1 {
		t.Errorf("transitions_total{bounced,hard} = %v, want 1", got)
	}
	entries, err := e.lists.List(t.Context(), suppression.Filter{})
	if err != nil || len(entries) != 1 || entries[0].Stream != suppression.StreamAll {
		t.Errorf("suppression entries = %+v, %v; want one on every stream", entries, err)
	}
}
