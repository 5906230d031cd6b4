package outcome

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/eventstream"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/report"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/testenv"
)

// The tests below hold the event IDs of a mail's lives and the applier's
// ordering to the real stores: PostgreSQL for the rows and the outbox,
// Kafka for the events, read back through event.Reader, which drops copies
// by ID as consumers do.

// doneFails is the Postgres store with OutboxDone failing while fail is
// above zero: an applier that died after publishing, before it deleted
// the outbox entry.
type doneFails struct {
	*idempotency.Store
	mu   sync.Mutex
	fail int
}

func (s *doneFails) OutboxDone(ctx context.Context, ids []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail > 0 {
		s.fail--
		return errors.New("the applier stopped here")
	}
	return s.Store.OutboxDone(ctx, ids)
}

// TestIntegrationReplayedMailGetsNewEventIDs follows one Message-ID through
// three lives: refused at RCPT (the worker's bounced event) and failed;
// replayed from the dead letters, accepted and bounced by a DSN; purged
// after its retention, sent again, accepted and bounced by a DSN again.
// Each life's bounce has an ID of its own, so a consumer deduping by ID
// hands out all three; the copy of one bounce that a drain writes again
// after its applier stopped carries that bounce's ID and is dropped.
func TestIntegrationReplayedMailGetsNewEventIDs(t *testing.T) {
	t.Parallel()
	topic := testenv.NewTopic(t, 1)
	e := newPG(t)
	ctx := t.Context()
	w, err := eventstream.New(eventstream.Config{Kafka: testenv.Kafka(), Topic: topic}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	store := &doneFails{Store: e.ids}
	a, err := New(Config{DrainAge: time.Nanosecond}, discard(), prometheus.NewRegistry(), store, w, e.lists, e.signer)
	if err != nil {
		t.Fatal(err)
	}
	const id = "order-88.1@postline.test"
	const addr = "ada@example.com"
	h := sha256.Sum256([]byte(id))
	// worker publishes what the worker would for recipient 0 of the claim c.
	worker := func(c idempotency.Claim, tp event.Type) event.Event {
		t.Helper()
		ev := event.Event{Schema: event.Schema, ID: event.NewLifeID(id, c.Life, 0, tp, c.Attempt), Type: tp, At: time.Now().UTC(),
			MessageID: id, Tenant: "acme", Stream: event.StreamTransactional, Recipient: addr, Attempt: c.Attempt, Provider: "primary"}
		if tp == event.Bounced {
			ev.Bounce = &event.Bounce{Type: event.BounceHard, Status: "5.1.1", Code: 550, Source: "smtp"}
		}
		if err := w.Publish(ctx, ev); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	claim := func() idempotency.Claim {
		t.Helper()
		cs, err := e.ids.Claim(ctx, []idempotency.ClaimRequest{{MessageID: id, PayloadHash: h[:], Attempt: 1, Tenant: "acme"}})
		if err != nil || len(cs) != 1 || cs[0].Result != idempotency.Claimed {
			t.Fatalf("Claim = %+v, %v", cs, err)
		}
		return cs[0]
	}
	hard := report.Report{Kind: report.Bounced, Recipient: addr, Status: "5.1.1", Code: 550, Diagnostic: "5.1.1 user unknown"}
	bounce := dsn(t, e.signer, e.signer.Address(id, 0), id, hard)
	sendAndBounce := func() (idempotency.Claim, event.Event) {
		t.Helper()
		c := claim()
		if _, err := e.ids.Record(ctx, []idempotency.Fate{{MessageID: id, Version: c.Version, Status: idempotency.StatusSent,
			Attempt: 1, Provider: "primary", Stream: event.StreamTransactional, ConfirmBy: time.Now().Add(time.Hour),
			Recipients: []idempotency.RecipientFate{accepted(0, addr)}}}); err != nil {
			t.Fatal(err)
		}
		worker(c, event.Accepted)
		if err := a.ApplyReturned(ctx, bounce); err != nil {
			t.Fatalf("ApplyReturned: %v", err)
		}
		ev := event.Event{ID: event.NewLifeID(id, c.Life, 0, event.Bounced, 0)}
		return c, ev
	}

	// Life 1: the relay refuses the recipient for good; the job fails.
	c1 := claim()
	refused := idempotency.RecipientFate{Index: 0, Address: addr, State: idempotency.RecipientBounced, Attempt: 1,
		Provider: "primary", BounceType: "hard", Status: "5.1.1", Code: 550, Source: "smtp"}
	if _, err := e.ids.Record(ctx, []idempotency.Fate{{MessageID: id, Version: c1.Version, Status: idempotency.StatusFailed,
		Attempt: 1, Provider: "primary", Stream: event.StreamTransactional, Recipients: []idempotency.RecipientFate{refused}}}); err != nil {
		t.Fatal(err)
	}
	bounced1 := worker(c1, event.Bounced)

	// Life 2: postctl dlq replay; this time a relay takes it and a DSN
	// bounces it. The applier publishes, then stops before it deletes the
	// outbox entry: the drain writes the bounce again, a copy.
	if reset, err := e.ids.ResetForReplay(ctx, []idempotency.Reset{{MessageID: id, PayloadHash: h[:]}}); err != nil || len(reset) != 1 {
		t.Fatalf("ResetForReplay = %v, %v", reset, err)
	}
	store.mu.Lock()
	store.fail = 1
	store.mu.Unlock()
	c2, bounced2 := sendAndBounce()
	if n, err := a.Drain(ctx); err != nil || n != 1 {
		t.Fatalf("Drain = %d, %v; want the entry the applier left", n, err)
	}
	// The same DSN again: the recipient moved on, nothing more.
	if err := a.ApplyReturned(ctx, bounce); err != nil {
		t.Fatal(err)
	}

	// Life 3: purged after its retention, the same Message-ID sent again.
	if _, err := e.pool(t).Exec(ctx, `UPDATE postline_messages SET created_at = now() - interval '2 hours',
		updated_at = now() - interval '2 hours' WHERE message_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if n, err := e.ids.Purge(ctx, time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	c3, bounced3 := sendAndBounce()

	lives := []int64{c1.Life, c2.Life, c3.Life}
	if slices.Contains(lives, 0) || lives[0] == lives[1] || lives[1] == lives[2] || lives[0] == lives[2] {
		t.Fatalf("lives = %v, want three different ones", lives)
	}
	old := event.NewID(id, 0, event.Bounced, 0)
	if ids := []string{bounced1.ID, bounced2.ID, bounced3.ID}; ids[0] == ids[1] || ids[1] == ids[2] || ids[0] == ids[2] || slices.Contains(ids, old) {
		t.Fatalf("bounced IDs = %v (the ID without a life: %s), want three of their own", ids, old)
	}
	sentinel := event.Event{Schema: event.Schema, ID: event.NewLifeID("sentinel@postline.test", 1, 0, event.Accepted, 1), Type: event.Accepted,
		At: time.Now().UTC(), MessageID: "sentinel@postline.test", Stream: event.StreamTransactional, Recipient: addr, Attempt: 1}
	if err := w.Publish(ctx, sentinel); err != nil {
		t.Fatal(err)
	}

	// On the topic: every record, the copy included.
	raw := readTopic(t, topic, sentinel.ID)
	count := map[string]int{}
	for _, ev := range raw {
		count[ev.ID]++
	}
	if count[bounced2.ID] != 2 {
		t.Errorf("life 2's bounce is on the topic %d times, want twice (the applier's and the drain's)", count[bounced2.ID])
	}
	// Through event.Reader: each transition once, every life's.
	got := readDeduped(t, topic, sentinel.ID)
	want := []string{
		bounced1.ID,
		event.NewLifeID(id, c2.Life, 0, event.Accepted, 1), bounced2.ID,
		event.NewLifeID(id, c3.Life, 0, event.Accepted, 1), bounced3.ID,
		sentinel.ID,
	}
	if !slices.Equal(got, want) {
		t.Errorf("event.Reader handed out %v, want %v", got, want)
	}
	if p, err := e.ids.Outbox(ctx, 0, 10); err != nil || len(p) != 0 {
		t.Errorf("outbox = %+v, %v; want empty", p, err)
	}
}

// readTopic reads topic's partition 0 from the start up to the event
// with ID last, and returns every event on it in order.
func readTopic(t *testing.T, topic, last string) []event.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: testenv.KafkaBrokers(), Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	var out []event.Event
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read %s: %v", topic, err)
		}
		ev, err := event.Decode(m.Value)
		if err != nil {
			t.Fatalf("record %d of %s: %v", m.Offset, topic, err)
		}
		out = append(out, ev)
		if ev.ID == last {
			return out
		}
	}
}

// readDeduped reads topic through event.Reader, as a consumer does, up to
// the event with ID last, and returns the IDs it handed out in order.
func readDeduped(t *testing.T, topic, last string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := event.NewReader(testenv.Kafka().Config(), event.ReaderConfig{GroupID: testenv.UniqueName("group"), Topic: topic,
		MaxWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var ids []string
	for {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		ids = append(ids, m.Event.ID)
		if m.Event.ID == last {
			return ids
		}
	}
}

// pool is the pool of e's stores, for what a test reads or writes around
// them.
func (e *pgEnv) pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	if e.db == nil {
		t.Fatal("pgEnv without a pool")
	}
	return e.db
}

// TestIntegrationRowWithoutLifeKeepsOldIDs: a mail whose row was written
// before lives were recorded (life NULL) gets the IDs it always had, so
// mail in flight across the upgrade keeps its IDs.
func TestIntegrationRowWithoutLifeKeepsOldIDs(t *testing.T) {
	t.Parallel()
	e := newPG(t)
	ctx := t.Context()
	const id = "before-lives@postline.test"
	e.send(t, id, event.StreamTransactional, time.Now().Add(time.Hour), accepted(0, "ada@example.com"))
	if _, err := e.pool(t).Exec(ctx, `UPDATE postline_messages SET life = NULL WHERE message_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if r := e.rows(t, id); r[0].Life != 0 {
		t.Fatalf("life of a row without one = %d, want 0", r[0].Life)
	}
	rep := []report.Report{{Kind: report.Delivered, Source: report.SourceSES, MessageID: id, Recipient: "ada@example.com"}}
	if err := e.a.ApplySigned(ctx, rep); err != nil {
		t.Fatal(err)
	}
	evs := e.events.published()
	if len(evs) != 1 || evs[0].ID != event.NewID(id, 0, event.Delivered, 0) {
		t.Errorf("events = %+v, want the delivery with the ID derived without a life", evs)
	}
}

// transitionLog records every change of a recipient row's state in the
// test's schema, by a trigger: the oracle of what the rows went through.
const transitionLog = `
CREATE TABLE test_transitions (
	n          bigserial PRIMARY KEY,
	message_id text NOT NULL,
	idx        smallint NOT NULL,
	from_state text NOT NULL,
	to_state   text NOT NULL
);
CREATE FUNCTION test_note_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.state IS DISTINCT FROM OLD.state THEN
		INSERT INTO test_transitions (message_id, idx, from_state, to_state)
		VALUES (NEW.message_id, NEW.idx, OLD.state, NEW.state);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER test_note_transition AFTER UPDATE ON postline_recipients
	FOR EACH ROW EXECUTE FUNCTION test_note_transition();`

// TestIntegrationConcurrentReportsPublishOnlyTheirTransitions races a
// delivery, a hard bounce and a complaint about each recipient, each
// report applied twice at once, against the real store: for every
// recipient the events published are exactly the transitions its row went
// through (no event for a report whose compare-and-set lost), the hard
// bounce's suppression exists only where the bounce happened, and nothing
// is left owed in the outbox.
func TestIntegrationConcurrentReportsPublishOnlyTheirTransitions(t *testing.T) {
	t.Parallel()
	_, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := pool.Exec(t.Context(), transitionLog); err != nil {
		t.Fatalf("install the transition log: %v", err)
	}
	e := newPGOn(t, pool)
	ctx := t.Context()
	const mails = 30
	ids := make([]string, mails)
	for i := range ids {
		ids[i] = fmt.Sprintf("race-%02d@postline.test", i)
		e.send(t, ids[i], event.StreamTransactional, time.Now().Add(time.Hour), accepted(0, fmt.Sprintf("r%02d@example.com", i)))
	}
	type apply struct {
		signed bool
		reps   []report.Report
	}
	reportsApplied := 0
	for i, id := range ids {
		addr := fmt.Sprintf("r%02d@example.com", i)
		rp := e.signer.Address(id, 0)
		applies := []apply{
			{true, []report.Report{{Kind: report.Delivered, Source: report.SourceSES, MessageID: id, Recipient: addr}}},
			{false, dsn(t, e.signer, rp, id, report.Report{Kind: report.Bounced, Recipient: addr, Status: "5.1.1", Code: 550,
				Diagnostic: "5.1.1 user unknown"})},
			{false, arf(t, e.signer, rp, id, addr)},
		}
		applies = append(applies, applies...) // each report twice
		reportsApplied += len(applies)
		start := make(chan struct{})
		errs := make(chan error, len(applies))
		var wg sync.WaitGroup
		for _, ap := range applies {
			wg.Go(func() {
				<-start
				if ap.signed {
					errs <- e.a.ApplySigned(ctx, ap.reps)
				} else {
					errs <- e.a.ApplyReturned(ctx, ap.reps)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
		}
	}

	rows, err := pool.Query(ctx, `SELECT message_id, to_state FROM test_transitions ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	made := map[string][]string{}
	for rows.Next() {
		var id, to string
		if err := rows.Scan(&id, &to); err != nil {
			t.Fatal(err)
		}
		made[id] = append(made[id], to)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	published := map[string][]string{}
	for _, ev := range e.events.published() {
		life := e.life(t, ev.MessageID)
		if ev.ID != event.NewLifeID(ev.MessageID, life, ev.RecipientIndex, ev.Type, 0) {
			t.Errorf("%s: event %s of type %s does not carry its transition's ID", ev.MessageID, ev.ID, ev.Type)
		}
		published[ev.MessageID] = append(published[ev.MessageID], string(ev.Type))
	}
	entries, err := e.lists.List(ctx, suppression.Filter{Stream: suppression.StreamAll, Reason: suppression.ReasonHardBounce, Limit: suppression.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	hardSuppressed := map[string]bool{}
	for _, en := range entries {
		hardSuppressed[en.MessageID] = true
	}
	transitions := 0
	paths := map[string]int{}
	for _, id := range ids {
		m := made[id]
		transitions += len(m)
		paths[fmt.Sprint(m)]++
		// The transitions of one recipient are distinct (the state only
		// moves forward), so the events must be the same set, each once;
		// appliers finishing at once may publish in either order.
		p := slices.Clone(published[id])
		sort.Strings(p)
		want := slices.Clone(m)
		sort.Strings(want)
		if !slices.Equal(p, want) {
			t.Errorf("%s: row went through %v, events published %v", id, m, published[id])
		}
		if len(m) == 0 || m[len(m)-1] != string(idempotency.RecipientComplained) {
			t.Errorf("%s: transitions %v, want them to end complained (a complaint follows any state)", id, m)
		}
		if s := e.states(t, id); s[0] != idempotency.RecipientComplained {
			t.Errorf("%s: state %s, want complained", id, s[0])
		}
		if bounced := slices.Contains(m, string(idempotency.RecipientBounced)); hardSuppressed[id] != bounced {
			t.Errorf("%s: hard-bounce suppression %v, bounced %v", id, hardSuppressed[id], bounced)
		}
	}
	t.Logf("transition paths over %d recipients: %v", mails, paths)
	applied := 0.0
	for _, kind := range []struct {
		source string
		kind   report.Kind
	}{{report.SourceSES, report.Delivered}, {report.SourceDSN, report.Bounced}, {report.SourceARF, report.Complained}} {
		applied += testutil.ToFloat64(e.a.metrics.reports.WithLabelValues(kind.source, string(kind.kind), ResultApplied))
		applied += testutil.ToFloat64(e.a.metrics.reports.WithLabelValues(kind.source, string(kind.kind), ResultStale))
	}
	if applied != float64(reportsApplied) {
		t.Errorf("applied and stale reports = %v, want every one of the %d counted once", applied, reportsApplied)
	}
	if got := testutil.ToFloat64(e.a.metrics.reports.WithLabelValues(report.SourceARF, string(report.Complained), ResultApplied)); got != mails {
		t.Errorf("complaints applied = %v, want one per recipient (%d)", got, mails)
	}
	if n := len(e.events.published()); n != transitions {
		t.Errorf("published %d events for %d transitions", n, transitions)
	}
	if p, err := e.ids.Outbox(ctx, 0, 100); err != nil || len(p) != 0 {
		t.Errorf("outbox = %+v, %v; want empty", p, err)
	}
}
