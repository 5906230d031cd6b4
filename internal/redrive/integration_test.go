package redrive_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/eventstream"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/redrive"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/suppression"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/job"
)

// stack is an isolated dead-letter, jobs and events topic and schema, with
// the real store, lists and writers.
type stack struct {
	dlq, jobs, events string
	store             *idempotency.Store
	lists             *suppression.Store
	pub               *kafkaclient.TopicWriter
	ev                *eventstream.Writer
}

func newStack(t *testing.T) stack {
	t.Helper()
	testenv.Integration(t, "Kafka and PostgreSQL")
	s := stack{dlq: testenv.NewTopic(t, 2), jobs: testenv.NewTopic(t, 2), events: testenv.NewTopic(t, 2)}
	_, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	var err error
	if s.store, err = idempotency.New(idempotency.Config{Owner: "test-worker"}, pool, nil, nil); err != nil {
		t.Fatal(err)
	}
	if s.lists, err = suppression.New(suppression.Config{}, pool, nil, nil); err != nil {
		t.Fatal(err)
	}
	if s.pub, err = testenv.Kafka().TopicWriter(kafkaclient.WriterConfig{Topic: s.jobs, Name: "publisher", Limits: map[string]int{s.jobs: topic.MaxMessageBytes}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.pub.Close() })
	if s.ev, err = eventstream.New(eventstream.Config{Kafka: testenv.Kafka(), Topic: s.events}, prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.ev.Close() })
	return s
}

func (s stack) redriver(t *testing.T) *redrive.Redriver {
	t.Helper()
	r, err := redrive.New(redrive.Config{Source: redrive.TopicSource{Kafka: testenv.Kafka(), Topic: s.dlq},
		Store: s.store, Lists: s.lists, Publisher: s.pub, Events: s.ev})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fate claims j's row and records st, as a worker would have.
func (s stack) fate(t *testing.T, j job.Job, st idempotency.Status) {
	t.Helper()
	ctx := t.Context()
	cs, err := s.store.Claim(ctx, []idempotency.ClaimRequest{{MessageID: j.MessageID, PayloadHash: j.Hash(), Attempt: 1}})
	if err != nil || cs[0].Result != idempotency.Claimed {
		t.Fatalf("claim %s: %+v, %v", j.MessageID, cs, err)
	}
	if _, err := s.store.Record(ctx, []idempotency.Fate{{MessageID: j.MessageID, Version: cs[0].Version, Status: st,
		Attempt: 3, ErrorClass: "permanent", Error: "550 5.1.1"}}); err != nil {
		t.Fatal(err)
	}
}

// readTopic reads every record of name, independently of the package.
func readTopic(t *testing.T, name string) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	infos, err := topic.Describe(ctx, testenv.Kafka(), name)
	if err != nil {
		t.Fatal(err)
	}
	var out []kafka.Message
	for _, p := range infos[0].Partitions {
		if p.EndOffset == p.StartOffset {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: testenv.KafkaBrokers(), Dialer: testenv.Kafka().Dialer("test"),
			Topic: name, Partition: p.ID, MaxWait: 100 * time.Millisecond})
		for range p.EndOffset - p.StartOffset {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("read %s/%d: %v", name, p.ID, err)
			}
			out = append(out, m)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func keys(msgs []kafka.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Key))
	}
	slices.Sort(out)
	return out
}

// TestRedriveAgainstKafkaAndPostgreSQL puts dead letters of several tenants,
// reasons and classes on an isolated topic, rows failed, dead and sent, and
// re-drives a selection: the dry run counts it and changes nothing, the run
// publishes exactly it with its redriven events and resets its rows, and the
// same re-drive again publishes nothing.
func TestRedriveAgainstKafkaAndPostgreSQL(t *testing.T) {
	s := newStack(t)
	ctx := t.Context()
	type letter struct {
		j             job.Job
		reason, class string
		row           idempotency.Status // "" = no row
	}
	newJob := func(id, tenant string, rcpts ...string) job.Job {
		return job.Job{Version: 1, MessageID: id, From: "shop@example.com", To: rcpts, Subject: "s " + id, Text: "t", Tenant: tenant}
	}
	letters := []letter{
		{newJob("acme-perm-1@x", "acme", "a1@example.test", "a2@example.test"), "smtp_permanent", "permanent", idempotency.StatusFailed},
		{newJob("acme-perm-2@x", "acme", "a3@example.test"), "smtp_permanent", "permanent", idempotency.StatusFailed},
		{newJob("acme-sent@x", "acme", "a4@example.test"), "smtp_permanent", "permanent", idempotency.StatusSent},
		{newJob("acme-max@x", "acme", "a5@example.test"), "max_attempts", "transient", idempotency.StatusDead},
		{newJob("globex-perm@x", "globex", "g1@example.test"), "smtp_permanent", "permanent", idempotency.StatusFailed},
		{newJob("globex-expired@x", "globex", "g2@example.test"), "expired", "expired", idempotency.StatusDead},
		{newJob("initech-perm@x", "initech", "i1@example.test"), "smtp_permanent", "permanent", idempotency.StatusFailed},
	}
	trace := kafka.Header{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}
	var dls []deadletter.Letter
	for _, l := range letters {
		if l.row != "" {
			s.fate(t, l.j, l.row)
		}
		b, err := json.Marshal(l.j)
		if err != nil {
			t.Fatal(err)
		}
		dls = append(dls, deadletter.Letter{Key: []byte(l.j.MessageID), Value: b, Headers: []kafka.Header{trace}, Topic: "mail.jobs",
			Reason: l.reason, Class: l.class, Error: "550 5.1.1 no such user", Attempt: 3})
	}
	dls = append(dls, deadletter.Letter{Key: []byte("broken@x"), Value: []byte(`{"version":1,`), Topic: "mail.jobs",
		Reason: string(job.ReasonMalformedJSON), Class: "invalid", Error: "unexpected EOF"})
	w, err := deadletter.New(deadletter.Config{Kafka: testenv.Kafka(), Topic: s.dlq}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Publish(ctx, dls...); err != nil {
		t.Fatal(err)
	}
	// The relay's refusal of acme-perm-1's first recipient suppressed it;
	// a complaint suppressed another address of the same mail.
	if _, err := s.lists.Add(ctx, []suppression.Entry{
		{Tenant: "acme", Stream: suppression.StreamTransactional, Address: "a1@example.test", Reason: suppression.ReasonHardBounce,
			Source: suppression.SourceRelayRefusal, MessageID: "acme-perm-1@x"},
		{Tenant: "acme", Stream: suppression.StreamTransactional, Address: "a2@example.test", Reason: suppression.ReasonComplaint,
			Source: "arf", MessageID: "acme-perm-1@x"},
	}); err != nil {
		t.Fatal(err)
	}

	// The selection: acme and globex, permanent and transient failures.
	// acme-sent is skipped (sent); globex-expired and initech are not
	// selected.
	spec := redrive.FilterSpec{Tenants: []string{"acme,globex"}, Classes: []string{"permanent", "transient"}, Since: "1h"}
	filter, err := spec.Parse(time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := []string{"acme-max@x", "acme-perm-1@x", "acme-perm-2@x", "globex-perm@x"}
	r := s.redriver(t)

	plan, err := r.Plan(ctx, filter)
	if want := (redrive.Summary{Matched: 5, Redriven: 4, SkippedNotReplayable: 1, DryRun: true}); err != nil || plan != want {
		t.Errorf("Plan = %+v, %v; want %+v", plan, err, want)
	}
	if got := readTopic(t, s.jobs); len(got) != 0 {
		t.Fatalf("the dry run published %d records", len(got))
	}
	if row, err := s.store.Get(ctx, "acme-perm-1@x"); err != nil || row.Status != idempotency.StatusFailed {
		t.Fatalf("the dry run changed a row: %+v, %v", row, err)
	}

	opts := redrive.Options{Rate: 1000, Note: "relay fixed, INC-42", Actor: "postctl:ada"}
	sum, err := r.Run(ctx, filter, opts)
	if want := (redrive.Summary{Matched: 5, Redriven: 4, SkippedNotReplayable: 1, Unsuppressed: 1, Events: 5}); err != nil || sum != want {
		t.Errorf("Run = %+v, %v; want %+v", sum, err, want)
	}
	recs := readTopic(t, s.jobs)
	if got := keys(recs); !slices.Equal(got, wantKeys) {
		t.Errorf("jobs topic holds %v, want %v", got, wantKeys)
	}
	for _, m := range recs {
		if jobheader.Attempt(m.Headers) != 1 || testkit.Header(m.Headers, "traceparent") != string(trace.Value) {
			t.Errorf("record %s: headers %v", m.Key, m.Headers)
		}
		for _, h := range m.Headers {
			if strings.HasPrefix(h.Key, "postline-dlq") || strings.HasPrefix(h.Key, "postline-original") {
				t.Errorf("record %s keeps dead-letter header %s", m.Key, h.Key)
			}
		}
	}
	for _, id := range wantKeys {
		if row, err := s.store.Get(ctx, id); err != nil || row.Status != idempotency.StatusPending || row.Attempt != 1 || row.ReplayedAt.IsZero() {
			t.Errorf("row %s = %+v, %v; want pending at attempt 1", id, row, err)
		}
	}
	for id, want := range map[string]idempotency.Status{"acme-sent@x": idempotency.StatusSent, "globex-expired@x": idempotency.StatusDead,
		"initech-perm@x": idempotency.StatusFailed} {
		if row, err := s.store.Get(ctx, id); err != nil || row.Status != want {
			t.Errorf("row %s = %s, %v; want it left %s", id, row.Status, err, want)
		}
	}
	// Only the relay's entry came off; the complaint stays.
	left, err := s.lists.Check(ctx, []suppression.Key{{Tenant: "acme", Stream: suppression.StreamTransactional, Address: "a1@example.test"},
		{Tenant: "acme", Stream: suppression.StreamTransactional, Address: "a2@example.test"}})
	if err != nil || len(left) != 1 {
		t.Errorf("suppressions left: %v, %v; want the complaint only", left, err)
	}

	// One redriven event per recipient, with the note, in each row's new life.
	var events []event.Event
	for _, m := range readTopic(t, s.events) {
		e, err := event.Decode(m.Value)
		if err != nil {
			t.Fatalf("event %s: %v", m.Value, err)
		}
		if string(m.Key) != e.MessageID || testkit.Header(m.Headers, eventstream.HeaderType) != string(event.Redriven) {
			t.Errorf("event record key %q, headers %v", m.Key, m.Headers)
		}
		events = append(events, e)
	}
	if len(events) != 5 {
		t.Fatalf("%d events, want 5 (one per recipient)", len(events))
	}
	var about []string
	for _, e := range events {
		if !slices.Contains(about, e.MessageID) {
			about = append(about, e.MessageID)
		}
		if e.Type != event.Redriven || e.Note != opts.Note || e.Actor != opts.Actor || e.Tenant == "" {
			t.Errorf("event %+v", e)
		}
	}
	if slices.Sort(about); !slices.Equal(about, wantKeys) {
		t.Errorf("events of %v, want %v", about, wantKeys)
	}

	// The same re-drive again sends nothing: the rows are pending.
	again, err := s.redriver(t).Run(ctx, filter, opts)
	if want := (redrive.Summary{Matched: 5, SkippedNotReplayable: 5}); err != nil || again != want {
		t.Errorf("second Run = %+v, %v; want %+v", again, err, want)
	}
	if got := readTopic(t, s.jobs); len(got) != 4 {
		t.Errorf("jobs topic has %d records after the second run, want 4", len(got))
	}
	if got := readTopic(t, s.events); len(got) != 5 {
		t.Errorf("events topic has %d records after the second run, want 5", len(got))
	}
	if plan, err := r.Plan(ctx, filter); err != nil || plan.Redriven != 0 {
		t.Errorf("Plan after the re-drive = %+v, %v; want nothing to re-drive", plan, err)
	}

	// ls's view: by class and tenant, invalid records have no tenant.
	var listed []string
	err = r.List(ctx, redrive.Filter{Classes: []string{"invalid", "expired"}}, func(l redrive.DeadLetter) error {
		listed = append(listed, l.MessageID+"/"+l.Tenant)
		return nil
	})
	slices.Sort(listed)
	if err != nil || !slices.Equal(listed, []string{"broken@x/", "globex-expired@x/globex"}) {
		t.Errorf("List = %v, %v", listed, err)
	}
}
