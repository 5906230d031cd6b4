package job_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/job"
	"github.com/postline/postline/kafkaconn"
)

// consume reads n records from topic, failing t after a deadline.
func consume(t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("got %d of %d records before the deadline", len(recs), n)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			t.Fatalf("fetch: %v", errs)
		}
		recs = append(recs, fs.Records()...)
	}
	return recs
}

func sample(i int) job.Job {
	return job.Job{
		From:    "Postline <noreply@example.com>",
		To:      []string{"ada@example.test"},
		Subject: "Hello " + strings.Repeat("!", i),
		Text:    "Hi",
	}
}

// useTraceContext leaves the global propagator a no-op: the publisher's own
// default (W3C trace context) must carry the span without global set-up.
func useTraceContext(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
}

func tracedContext(t *testing.T) (context.Context, trace.SpanContext) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0xa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		SpanID:     trace.SpanID{0xb, 1, 2, 3, 4, 5, 6, 7},
		TraceFlags: trace.FlagsSampled,
	})
	return trace.ContextWithSpanContext(t.Context(), sc), sc
}

func TestPublisherConfig(t *testing.T) {
	loopback := kafkaconn.Config{Brokers: []string{"127.0.0.1:9092"}}
	tests := []struct {
		name string
		conn kafkaconn.Config
		cfg  job.PublisherConfig
		want string // substring of the error
	}{
		{"no cluster", kafkaconn.Config{}, job.PublisherConfig{}, "Kafka"},
		{"negative batch timeout", loopback, job.PublisherConfig{BatchTimeout: -time.Second}, "BatchTimeout"},
		{"bad domain", loopback, job.PublisherConfig{MessageIDDomain: "a b"}, "MessageIDDomain"},
		{"negative limit", loopback, job.PublisherConfig{Limits: job.Limits{MaxRecipients: -1}}, "MaxRecipients"},
	}
	for _, tt := range tests {
		_, err := job.NewPublisher(tt.conn, tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error naming %s", tt.name, err, tt.want)
		}
	}
	cfg := job.PublisherConfig{}.WithDefaults()
	if cfg.Topic != "mail.jobs" || cfg.MessageIDDomain != "postline.local" || cfg.BatchTimeout != 100*time.Microsecond || cfg.NowFunc == nil {
		t.Errorf("defaults: %+v", cfg)
	}
}

func TestPublish(t *testing.T) {
	// Registered first, so it runs after the other cleanups closed the cluster.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	useTraceContext(t)
	const partitions = 4
	brokers := testkit.FakeKafka(t, kfake.SeedTopics(partitions, "mail.jobs"))
	now := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	p, err := job.NewPublisher(testenv.KafkaCluster(brokers...).Config(), job.PublisherConfig{MessageIDDomain: "example.com", NowFunc: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, sc := tracedContext(t)

	withID, withBrackets, without := sample(0), sample(1), sample(2)
	withID.MessageID = "given.1@example.com"
	withBrackets.MessageID = "<given.2@example.com>"
	withBrackets.Priority = job.PriorityUrgent
	ids, err := p.Publish(ctx, withID, withBrackets, without)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if len(ids) != 3 || ids[0] != "given.1@example.com" || ids[1] != "given.2@example.com" || !strings.HasSuffix(ids[2], "@example.com") {
		t.Fatalf("ids %q", ids)
	}
	if without.MessageID != "" {
		t.Fatal("Publish modified the caller's job")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	recs := consume(t, brokers, "mail.jobs", 3)
	byKey := make(map[string]*kgo.Record)
	for _, r := range recs {
		byKey[string(r.Key)] = r
	}
	for i, id := range ids {
		r := byKey[id]
		if r == nil {
			t.Fatalf("no record keyed %q", id)
		}
		got, err := job.Decode(r.Value, job.Limits{})
		if err != nil {
			t.Fatalf("record %d does not decode: %v", i, err)
		}
		if got.MessageID != id || got.Version != job.SchemaVersion {
			t.Errorf("record %d: message_id %q version %d", i, got.MessageID, got.Version)
		}
		wantPriority := job.PriorityNormal
		if i == 1 {
			wantPriority = job.PriorityUrgent
		}
		if got.Priority != wantPriority {
			t.Errorf("record %d: priority %q, want %q", i, got.Priority, wantPriority)
		}
		if v := testkit.Header(r.Headers, jobheader.KeyAttempt); v != "1" {
			t.Errorf("record %d: attempt header %q", i, v)
		}
		if v := testkit.Header(r.Headers, jobheader.KeyFirstSeen); v != "2030-01-02T03:04:05.000000006Z" {
			t.Errorf("record %d: first-seen header %q", i, v)
		}
		carrier := jobheader.Carrier{}
		for _, h := range r.Headers {
			carrier = append(carrier, kafka.Header{Key: h.Key, Value: h.Value})
		}
		if jobheader.Attempt(carrier) != 1 {
			t.Errorf("record %d: Attempt != 1", i)
		}
		extracted := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), &carrier))
		if extracted.TraceID() != sc.TraceID() {
			t.Errorf("record %d: trace ID %v, want %v", i, extracted.TraceID(), sc.TraceID())
		}
		// The partition is the one a Java producer would choose for the key.
		want := kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: r.Key}, 0, 1, 2, 3)
		if int(r.Partition) != want {
			t.Errorf("record %d on partition %d, want %d (murmur2)", i, r.Partition, want)
		}
	}
}

func TestPublishRejectsTheWholeBatch(t *testing.T) {
	brokers := testkit.FakeKafka(t, kfake.SeedTopics(1, "mail.jobs"))
	p, err := job.NewPublisher(testenv.KafkaCluster(brokers...).Config(), job.PublisherConfig{Limits: job.Limits{MaxMessageBytes: 400}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	bad := sample(0)
	bad.To = []string{"nope"}
	big := sample(0)
	big.Text = strings.Repeat("x", 500)
	tests := []struct {
		name   string
		jobs   []job.Job
		index  int
		reason job.Reason
	}{
		{"invalid address", []job.Job{sample(0), bad, sample(1)}, 1, job.ReasonInvalidAddress},
		{"oversize encoded", []job.Job{big}, 0, job.ReasonOversizeMessage},
		{"header injection", []job.Job{{From: "a@b.c", To: []string{"d@e.f"}, Subject: "x\r\nBcc: g@h.i", Text: "t"}}, 0, job.ReasonHeaderInjection},
	}
	for _, tt := range tests {
		ids, err := p.Publish(t.Context(), tt.jobs...)
		var pe *job.PublishError
		var ve *job.ValidationError
		if !errors.As(err, &pe) || !errors.As(err, &ve) {
			t.Fatalf("%s: got %v, want a *PublishError wrapping a *ValidationError", tt.name, err)
		}
		if pe.Index != tt.index || ve.Reason != tt.reason || pe.MessageID == "" || ids != nil {
			t.Errorf("%s: index %d reason %s message ID %q ids %q", tt.name, pe.Index, ve.Reason, pe.MessageID, ids)
		}
	}
	// Nothing was written: a valid publish lands at offset 0.
	if _, err := p.Publish(t.Context(), sample(0)); err != nil {
		t.Fatal(err)
	}
	if r := consume(t, brokers, "mail.jobs", 1)[0]; r.Offset != 0 {
		t.Fatalf("first record at offset %d: a rejected batch was written", r.Offset)
	}
	if ids, err := p.Publish(t.Context()); ids != nil || err != nil {
		t.Fatalf("empty Publish: %q, %v", ids, err)
	}
}

func TestPublishToMissingTopicFails(t *testing.T) {
	brokers := testkit.FakeKafka(t, kfake.SeedTopics(1, "mail.jobs"))
	p, err := job.NewPublisher(testenv.KafkaCluster(brokers...).Config(), job.PublisherConfig{Topic: "no.such.topic"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	ids, err := p.Publish(ctx, sample(0))
	if err == nil {
		t.Fatal("published to a topic that does not exist: auto-creation must be off")
	}
	if len(ids) != 1 || ids[0] == "" {
		t.Fatalf("ids %q: the generated IDs must come back with a write error so a retry can reuse them", ids)
	}
}

// TestPublishKafka publishes to the real broker, including a record near
// the size limit, which needs the topic's max.message.bytes.
func TestPublishKafka(t *testing.T) {
	useTraceContext(t)
	topic := testenv.NewTopic(t, 3)
	brokers := testenv.KafkaBrokers()
	p, err := job.NewPublisher(testenv.KafkaCluster(brokers...).Config(), job.PublisherConfig{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, sc := tracedContext(t)

	big := sample(0)
	big.Text = strings.Repeat("t", job.Limits{}.WithDefaults().MaxBodyBytes)
	big.Attachments = []job.Attachment{{Filename: "big.bin", Content: bytes.Repeat([]byte{0xfe}, job.Limits{}.WithDefaults().MaxAttachmentBytes)}}
	jobs := []job.Job{big}
	for i := range 99 {
		jobs = append(jobs, sample(i))
	}
	ids, err := p.Publish(ctx, jobs...)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	recs := consume(t, brokers, topic, len(jobs))
	if len(recs) != len(jobs) {
		t.Fatalf("got %d records, want %d", len(recs), len(jobs))
	}
	seen := map[string]bool{}
	for _, r := range recs {
		j, err := job.Decode(r.Value, job.Limits{})
		if err != nil {
			t.Fatalf("record %s: %v", r.Key, err)
		}
		if string(r.Key) != j.MessageID {
			t.Fatalf("key %q, message ID %q", r.Key, j.MessageID)
		}
		if tp := testkit.Header(r.Headers, "traceparent"); !strings.Contains(tp, sc.TraceID().String()) {
			t.Fatalf("traceparent %q", tp)
		}
		seen[j.MessageID] = true
	}
	for _, id := range ids {
		if !seen[id] {
			t.Fatalf("message %s not consumed", id)
		}
	}
}
