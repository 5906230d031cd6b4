package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/redrive"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/job"
)

func TestOneLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "-"},
		{"short", "short"},
		{"a\r\nb", "a  b"},
		{"a\tb\x00c", "a b c"},
		{"abcdefghij", "abcd…"},
		{"\xff", "?"},
	}
	for _, tt := range tests {
		if got := oneLine(tt.in, 5); got != tt.want {
			t.Errorf("oneLine(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestDLQArgumentErrors(t *testing.T) {
	env := map[string]string{"POSTLINE_KAFKA_BROKERS": "127.0.0.1:1"}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "ls", "--limit", "-1"}, "--limit -1"},
		{[]string{"dlq", "ls", "--since", "last week"}, `--since "last week"`},
		{[]string{"dlq", "ls", "extra"}, "unknown command"},
		{[]string{"dlq", "replay", "--batch", "0", "--yes"}, "--batch 0"},
		{[]string{"dlq", "replay", "--until", "2h", "--since", "1h"}, "is not before"},
		{[]string{"dlq", "ls", "--tenant", "a\tb"}, `--tenant "a\tb": contains a control character`},
		{[]string{"dlq", "redrive", "--rate", "0"}, "--rate 0: want more than 0"},
		{[]string{"dlq", "redrive", "--rate", "20000"}, "--rate 20000"},
		{[]string{"dlq", "redrive", "--note", "two\nlines"}, "--note contains a control character"},
		{[]string{"dlq", "redrive", "--since", "yesterday"}, `--since "yesterday"`},
		{[]string{"dlq", "redrive", "--limit", "-2"}, "--limit -2"},
	}
	for _, tt := range tests {
		_, _, err := postctl(t, env, "", tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: got %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}

// TestDLQLsAndReplay runs ls and replay on real Kafka and PostgreSQL: dead
// letters written by package deadletter, rows in several states.
func TestDLQLsAndReplay(t *testing.T) {
	testenv.Integration(t, "Kafka and PostgreSQL")
	brokers := strings.Join(testenv.KafkaBrokers(), ",")
	dlqTopic, jobsTopic := testenv.NewTopic(t, 2), testenv.NewTopic(t, 2)
	url, pool := testenv.NewSchema(t)
	ctx := t.Context()
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.New(idempotency.Config{Owner: "test-worker"}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	newJob := func(id string) (job.Job, []byte) {
		j := job.Job{Version: 1, MessageID: id, From: "shop@example.com", To: []string{"ada@example.test"}, Subject: "s " + id, Text: "t"}
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		return j, b
	}
	// outcome claims the job and records status, as a worker would have.
	outcome := func(j job.Job, st idempotency.Status) {
		cs, err := store.Claim(ctx, []idempotency.ClaimRequest{{MessageID: j.MessageID, PayloadHash: j.Hash(), Attempt: 1}})
		if err != nil || cs[0].Result != idempotency.Claimed {
			t.Fatalf("claim %s: %+v, %v", j.MessageID, cs, err)
		}
		if _, err := store.Record(ctx, []idempotency.Fate{{MessageID: j.MessageID, Version: cs[0].Version, Status: st,
			Attempt: 3, ErrorClass: "permanent", Error: "550 5.1.1"}}); err != nil {
			t.Fatal(err)
		}
	}
	failedJob, failedVal := newJob("failed.1@example.com")
	sentJob, sentVal := newJob("sent.1@example.com")
	noRowJob, noRowVal := newJob("norow.1@example.com")
	outcome(failedJob, idempotency.StatusFailed)
	outcome(sentJob, idempotency.StatusSent)

	trace := kafka.Header{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}
	old := []kafka.Header{trace, {Key: jobheader.KeyAttempt, Value: []byte("3")}, {Key: jobheader.KeyFirstSeen, Value: []byte("2020-01-01T00:00:00Z")}}
	w, err := deadletter.New(deadletter.Config{Kafka: testenv.Kafka(), Topic: dlqTopic}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.Publish(ctx,
		deadletter.Letter{Key: []byte(failedJob.MessageID), Value: failedVal, Headers: old, Topic: "mail.jobs", Offset: 10,
			Reason: deadletter.ReasonSMTPPermanent, Class: "permanent", Error: "550 5.1.1 no such user\r\nbye", Attempt: 3},
		deadletter.Letter{Key: []byte(sentJob.MessageID), Value: sentVal, Topic: "mail.jobs", Offset: 11,
			Reason: deadletter.ReasonSMTPPermanent, Class: "permanent", Error: "550", Attempt: 1},
		deadletter.Letter{Key: []byte("broken.1@example.com"), Value: []byte(`{"version":1,`), Topic: "mail.jobs", Offset: 12,
			Reason: string(job.ReasonMalformedJSON), Class: "invalid", Error: "unexpected EOF"},
		deadletter.Letter{Key: []byte(noRowJob.MessageID), Value: noRowVal, Topic: "mail.jobs", Offset: 13,
			Reason: "expired", Class: "expired", Error: "not_after passed"},
	)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--brokers", brokers, "--database-url", url, "--topic", jobsTopic, "--dlq-topic", dlqTopic}
	run := func(stdin string, extra ...string) (string, string, error) {
		t.Helper()
		return postctl(t, nil, stdin, append(slices.Clone(args), extra...)...)
	}

	// ls: filters by reason and time, table and JSON Lines.
	lsIDs := func(extra ...string) []string {
		t.Helper()
		out, _, err := run("", append([]string{"--output", "json", "dlq", "ls"}, extra...)...)
		if err != nil {
			t.Fatalf("ls %v: %v", extra, err)
		}
		var ids []string
		for line := range strings.Lines(out) {
			var l redrive.DeadLetter
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("ls output line %q: %v", line, err)
			}
			if l.OriginalTopic != "mail.jobs" || l.OriginalOffset == nil || l.Time.IsZero() {
				t.Errorf("ls JSON lacks the origin or time: %+v", l)
			}
			ids = append(ids, l.MessageID)
		}
		slices.Sort(ids)
		return ids
	}
	lsTests := []struct {
		name  string
		extra []string
		want  []string
	}{
		{"all", nil, []string{"broken.1@example.com", failedJob.MessageID, noRowJob.MessageID, sentJob.MessageID}},
		{"by reason", []string{"--reason", "smtp_permanent"}, []string{failedJob.MessageID, sentJob.MessageID}},
		{"by two reasons", []string{"--reason", "expired", "--reason", "malformed_json"}, []string{"broken.1@example.com", noRowJob.MessageID}},
		{"since an hour ago", []string{"--since", "1h"}, []string{"broken.1@example.com", failedJob.MessageID, noRowJob.MessageID, sentJob.MessageID}},
		{"until an hour ago", []string{"--until", "1h"}, nil},
		{"by Message-ID", []string{"--message-id", "<" + failedJob.MessageID + ">"}, []string{failedJob.MessageID}},
		{"since in the future", []string{"--since", time.Now().Add(time.Hour).Format(time.RFC3339)}, nil},
		{"limit", []string{"--reason", "smtp_permanent", "--limit", "1"}, nil}, // checked by count below
	}
	for _, tt := range lsTests {
		got := lsIDs(tt.extra...)
		if tt.name == "limit" {
			if len(got) != 1 {
				t.Errorf("ls %s: %v, want one", tt.name, got)
			}
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("ls %s: %v, want %v", tt.name, got, tt.want)
		}
	}
	out, stderr, err := run("", "dlq", "ls", "--reason", "smtp_permanent")
	if err != nil || !strings.Contains(out, "PARTITION/OFFSET") || !strings.Contains(out, "550 5.1.1 no such user  bye") ||
		!strings.Contains(stderr, "2 dead letters") {
		t.Errorf("ls table:\n%s\nstderr %q, err %v", out, stderr, err)
	}

	replay := func(stdin string, extra ...string) replaySummary {
		t.Helper()
		out, _, err := run(stdin, append([]string{"--output", "json", "dlq", "replay"}, extra...)...)
		if err != nil {
			t.Fatalf("replay %v: %v", extra, err)
		}
		var s replaySummary
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("replay output %q: %v", out, err)
		}
		return s
	}
	// A dry run changes nothing.
	if s := replay("", "--dry-run", "--reason", "smtp_permanent,malformed_json"); s != (replaySummary{Matched: 3, Replayed: 2, SkippedInvalid: 1, DryRun: true}) {
		t.Errorf("dry run: %+v", s)
	}
	// Without --yes a "no" aborts before anything changes.
	if _, _, err := run("n\n", "dlq", "replay"); err == nil || !strings.Contains(err.Error(), "not confirmed") {
		t.Errorf("unconfirmed replay: %v", err)
	}
	if got := records(t, brokers, jobsTopic); len(got) != 0 {
		t.Fatalf("dry and unconfirmed runs published %d records", len(got))
	}

	// The replay: failed row replayed, sent row skipped, broken record skipped.
	s := replay("", "--yes", "--reason", "smtp_permanent,malformed_json")
	if s != (replaySummary{Matched: 3, Replayed: 1, SkippedInvalid: 1, SkippedNotReplayable: 1}) {
		t.Errorf("replay: %+v", s)
	}
	recs := records(t, brokers, jobsTopic)
	if len(recs) != 1 {
		t.Fatalf("jobs topic has %d records, want 1", len(recs))
	}
	m := recs[0]
	c := jobheader.Carrier(m.Headers)
	first, ok := jobheader.FirstSeen(m.Headers)
	if string(m.Key) != failedJob.MessageID || string(m.Value) != string(failedVal) || jobheader.Attempt(m.Headers) != 1 ||
		c.Get("traceparent") != string(trace.Value) || !ok || time.Since(first) > time.Minute {
		t.Errorf("replayed record: key %q headers %v", m.Key, m.Headers)
	}
	for _, h := range m.Headers {
		if strings.HasPrefix(h.Key, "postline-dlq") || strings.HasPrefix(h.Key, "postline-original") {
			t.Errorf("replayed record keeps dead-letter header %s", h.Key)
		}
	}
	row, err := store.Get(ctx, failedJob.MessageID)
	if err != nil || row.Status != idempotency.StatusPending || row.Attempt != 1 || row.ReplayedAt.IsZero() {
		t.Errorf("replayed row = %+v, %v; want pending at attempt 1", row, err)
	}
	if row, err := store.Get(ctx, sentJob.MessageID); err != nil || row.Status != idempotency.StatusSent {
		t.Errorf("sent row = %+v, %v; want it untouched", row, err)
	}
	// The replayed record claims the row.
	cs, err := store.Claim(ctx, []idempotency.ClaimRequest{{MessageID: failedJob.MessageID, PayloadHash: failedJob.Hash(), Attempt: jobheader.Attempt(m.Headers)}})
	if err != nil || cs[0].Result != idempotency.Claimed {
		t.Errorf("claim of the replayed record: %+v, %v", cs, err)
	}

	// Replaying again replays nothing for that ID.
	if s := replay("", "--yes", "--reason", "smtp_permanent"); s != (replaySummary{Matched: 2, SkippedNotReplayable: 2}) {
		t.Errorf("second replay: %+v", s)
	}
	// A Message-ID without a row is replayed (confirmed on stdin); the claim inserts the row.
	if s := replay("y\n", "--reason", "expired"); s != (replaySummary{Matched: 1, Replayed: 1}) {
		t.Errorf("replay without a row: %+v", s)
	}
	if _, err := store.Get(ctx, noRowJob.MessageID); err == nil {
		t.Error("replay inserted a row for a Message-ID without one")
	}
	if got := records(t, brokers, jobsTopic); len(got) != 2 {
		t.Errorf("jobs topic has %d records after all replays, want 2", len(got))
	}
}

// TestDLQRedrive runs dlq redrive on real Kafka and PostgreSQL: the dry
// run and the question show the count and change nothing, --yes re-drives
// the selection with redriven events carrying the note, and running it
// again sends nothing.
func TestDLQRedrive(t *testing.T) {
	testenv.Integration(t, "Kafka and PostgreSQL")
	t.Setenv("USER", "ada") // the actor on the events
	brokers := strings.Join(testenv.KafkaBrokers(), ",")
	dlqTopic, jobsTopic, eventsTopic := testenv.NewTopic(t, 2), testenv.NewTopic(t, 2), testenv.NewTopic(t, 1)
	url, pool := testenv.NewSchema(t)
	ctx := t.Context()
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.New(idempotency.Config{Owner: "test-worker"}, pool, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := deadletter.New(deadletter.Config{Kafka: testenv.Kafka(), Topic: dlqTopic}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, d := range []struct{ id, tenant, class string }{
		{"acme.1@example.com", "acme", "permanent"}, {"acme.2@example.com", "acme", "transient"}, {"globex.1@example.com", "globex", "permanent"},
	} {
		j := job.Job{Version: 1, MessageID: d.id, From: "shop@example.com", To: []string{"ada@example.test"}, Subject: "s", Text: "t", Tenant: d.tenant}
		cs, err := store.Claim(ctx, []idempotency.ClaimRequest{{MessageID: j.MessageID, PayloadHash: j.Hash(), Attempt: 1}})
		if err != nil || cs[0].Result != idempotency.Claimed {
			t.Fatalf("claim %s: %+v, %v", j.MessageID, cs, err)
		}
		if _, err := store.Record(ctx, []idempotency.Fate{{MessageID: j.MessageID, Version: cs[0].Version, Status: idempotency.StatusFailed, Attempt: 1}}); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(j)
		if err := w.Publish(ctx, deadletter.Letter{Key: []byte(j.MessageID), Value: b, Topic: "mail.jobs", Reason: "smtp_permanent", Class: d.class}); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"--brokers", brokers, "--database-url", url, "--topic", jobsTopic, "--dlq-topic", dlqTopic, "--events-topic", eventsTopic,
		"--output", "json", "dlq", "redrive", "--tenant", "acme", "--class", "permanent,transient", "--rate", "500", "--note", "relay fixed"}
	runRedrive := func(stdin string, extra ...string) (redrive.Summary, error) {
		t.Helper()
		out, _, err := postctl(t, nil, stdin, append(slices.Clone(args), extra...)...)
		var s redrive.Summary
		if err == nil {
			err = json.Unmarshal([]byte(out), &s)
		}
		return s, err
	}
	// ls takes the same tenant and class filters.
	out, _, err := postctl(t, nil, "", "--brokers", brokers, "--dlq-topic", dlqTopic, "--output", "json", "dlq", "ls", "--tenant", "acme", "--class", "transient")
	var listed redrive.DeadLetter
	if err != nil || strings.Count(out, "\n") != 1 || json.Unmarshal([]byte(out), &listed) != nil || listed.MessageID != "acme.2@example.com" || listed.Tenant != "acme" {
		t.Errorf("ls --tenant acme --class transient: %q, %v", out, err)
	}
	if s, err := runRedrive("", "--dry-run"); err != nil || s != (redrive.Summary{Matched: 2, Redriven: 2, DryRun: true}) {
		t.Errorf("dry run: %+v, %v", s, err)
	}
	if _, err := runRedrive("n\n"); err == nil || !strings.Contains(err.Error(), "not confirmed") {
		t.Errorf("unconfirmed re-drive: %v", err)
	}
	if got := records(t, brokers, jobsTopic); len(got) != 0 {
		t.Fatalf("dry and unconfirmed runs published %d records", len(got))
	}
	if s, err := runRedrive("y\n"); err != nil || s != (redrive.Summary{Matched: 2, Redriven: 2, Events: 2}) {
		t.Errorf("re-drive: %+v, %v", s, err)
	}
	recs := records(t, brokers, jobsTopic)
	var got []string
	for _, m := range recs {
		got = append(got, string(m.Key))
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"acme.1@example.com", "acme.2@example.com"}) {
		t.Errorf("jobs topic holds %v", got)
	}
	for _, m := range records(t, brokers, eventsTopic) {
		e, err := event.Decode(m.Value)
		if err != nil || e.Type != event.Redriven || e.Note != "relay fixed" || e.Actor != "postctl:ada" || e.Tenant != "acme" {
			t.Errorf("event %+v, %v", e, err)
		}
	}
	if s, err := runRedrive("", "--yes"); err != nil || s != (redrive.Summary{Matched: 2, SkippedNotReplayable: 2}) {
		t.Errorf("second re-drive: %+v, %v", s, err)
	}
	if got := records(t, brokers, jobsTopic); len(got) != 2 {
		t.Errorf("jobs topic has %d records after the second re-drive, want 2", len(got))
	}
}
