package delivery_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/delivery"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/job"
)

// TestTraceFollowsAJobThroughKafkaAndARetry publishes a job under a span,
// lets a real relay throttle its first attempt so it goes through a delay
// topic and the retry scheduler, and checks the spans of the worker and the
// scheduler form one trace: publish -> deliver (attempt 1) and publish ->
// reinject -> deliver (attempt 2), each deliver with its claim, send and
// record children. Kafka, Postgres and SMTP are real; the pipeline, the
// consumer and the scheduler run in this process with one in-memory
// exporter.
func TestTraceFollowsAJobThroughKafkaAndARetry(t *testing.T) {
	testenv.Integration(t, "Kafka and PostgreSQL")
	// job.Publisher injects with the global propagator, as a producing
	// service that set one up would.
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })

	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	brokers := testenv.KafkaBrokers()
	tiers := retry.Tiers{500 * time.Millisecond}
	jobsTopic, dlqTopic, prefix := testenv.UniqueName("trace.jobs"), testenv.UniqueName("trace.dlq"), testenv.UniqueName("trace.retry")
	createTopics(t, brokers, append(topic.Defaults(jobsTopic, dlqTopic, 1), retry.TopicSpecs(prefix, tiers, 1)...))

	_, pool := testenv.NewSchema(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	reg := prometheus.NewRegistry()
	store, err := idempotency.New(idempotency.Config{Owner: "trace-test"}, pool, logger, reg)
	if err != nil {
		t.Fatal(err)
	}
	// The relay refuses the first RCPT as throttled, then accepts.
	relaySrv := smtptest.NewServer(t, smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		if c.Verb == smtptest.VerbRcpt && c.Attempt == 1 {
			return &smtptest.Reply{Code: 450, Enhanced: "4.7.1", Text: "rate limit exceeded"}
		}
		return nil
	}))
	relay, err := sender.New(sender.Config{Name: "relay", Host: relaySrv.Host(), Port: relaySrv.Port()}, logger, reg)
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := deadletter.New(deadletter.Config{Kafka: testenv.KafkaCluster(brokers...), Topic: dlqTopic}, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	retries, err := retry.NewWriter(retry.WriterConfig{Kafka: testenv.KafkaCluster(brokers...), Prefix: prefix, Tiers: tiers}, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer retries.Close()
	cons, err := consumer.New(consumer.Config{
		Kafka: testenv.KafkaCluster(brokers...), Topic: jobsTopic, GroupID: testenv.UniqueName("trace-worker"),
		SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond, DrainTimeout: 2 * time.Second,
		MaxWait: 50 * time.Millisecond,
	}, logger, reg)
	if err != nil {
		t.Fatal(err)
	}
	pipeline, err := delivery.New(delivery.Config{Senders: 1, Resends: -1, Tiers: tiers}, logger, reg, delivery.Deps{
		Store:          store,
		Relays:         []delivery.Relay{{Name: relay.Name(), NewSession: func() delivery.Session { return relay.NewSession() }}},
		DeadLetters:    dlq,
		Retries:        retries,
		TracerProvider: tp,
	})
	if err != nil {
		t.Fatal(err)
	}
	scheduler, err := retry.NewScheduler(retry.SchedulerConfig{
		RejectFunc: func(_ context.Context, m consumer.Message, reason, _ string) error {
			t.Errorf("scheduler rejected %s@%d: %s", m.Topic, m.Offset, reason)
			return nil
		},
		Kafka: testenv.KafkaCluster(brokers...), Prefix: prefix, Tiers: tiers, JobsTopic: jobsTopic, GroupID: testenv.UniqueName("trace-scheduler"),
		MaxJitter: -1, SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond, DrainTimeout: time.Second,
		TracerProvider: tp,
	}, logger, prometheus.NewRegistry()) // the scheduler's consumer metrics would clash with the worker's
	if err != nil {
		t.Fatal(err)
	}

	// The worker's two-phase stop: stop consuming, let the pipeline
	// finish; the scheduler stops on its own context.
	consumeCtx, stopConsuming := context.WithCancel(ctx)
	scheduleCtx, stopScheduling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Go(func() { errs <- cons.Run(consumeCtx) })
	wg.Go(func() { errs <- pipeline.Run(ctx, cons) })
	wg.Go(func() { errs <- scheduler.Run(scheduleCtx) })
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		stopConsuming()
		stopScheduling()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("run: %v", err)
			}
		}
	}
	defer stop()

	pub, err := job.NewPublisher(testenv.KafkaCluster(brokers...).Config(), job.PublisherConfig{Topic: jobsTopic})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	publishCtx, publish := tp.Tracer("test").Start(ctx, "publish", trace.WithSpanKind(trace.SpanKindProducer))
	ids, err := pub.Publish(publishCtx, job.Job{Version: 1, From: "sender@example.com", To: []string{"rcpt@example.com"},
		Subject: "traced", Text: "hello"})
	publish.End()
	if err != nil {
		t.Fatalf("publish: %v", err)
	}

	// Wait for the second attempt's deliver span to end.
	var spans tracetest.SpanStubs
	for deadline := time.Now().Add(60 * time.Second); ; {
		spans = exporter.GetSpans()
		if d := find(spans, "deliver", attrIs("postline.attempt", "2")); d != nil && attrOf(*d, "postline.outcome") != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no attempt-2 deliver span after 60s; spans: %v", names(spans))
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	spans = exporter.GetSpans()
	t.Logf("spans: %v", names(spans))

	root := find(spans, "publish")
	traceID := root.SpanContext.TraceID()
	for _, s := range spans {
		if s.SpanContext.TraceID() != traceID {
			t.Errorf("span %s is in trace %v, want the publisher's %v", s.Name, s.SpanContext.TraceID(), traceID)
		}
	}
	deliver1 := find(spans, "deliver", attrIs("postline.attempt", "1"))
	reinject := find(spans, "reinject")
	deliver2 := find(spans, "deliver", attrIs("postline.attempt", "2"))
	if deliver1 == nil || reinject == nil || deliver2 == nil {
		t.Fatalf("want deliver (attempt 1), reinject and deliver (attempt 2) spans; got %v", names(spans))
	}
	checkChild(t, "deliver (attempt 1)", *deliver1, *root)
	checkChild(t, "reinject", *reinject, *root)
	checkChild(t, "deliver (attempt 2)", *deliver2, *reinject)
	checkAttrs(t, "deliver (attempt 1)", *deliver1, map[string]string{"postline.outcome": "retried", "messaging.message.id": ids[0],
		"messaging.destination.name": jobsTopic})
	checkAttrs(t, "reinject", *reinject, map[string]string{"postline.attempt": "2", "postline.tier": "500ms",
		"messaging.destination.name": jobsTopic})
	checkAttrs(t, "deliver (attempt 2)", *deliver2, map[string]string{"postline.outcome": "sent", "messaging.message.id": ids[0]})

	for _, tt := range []struct {
		name   string
		parent tracetest.SpanStub
		send   map[string]string
	}{
		{"attempt 1", *deliver1, map[string]string{"postline.result": "throttled", "postline.smtp.code": "450",
			"postline.smtp.enhanced": "4.7.1", "postline.provider": "relay", "postline.attempt": "1"}},
		{"attempt 2", *deliver2, map[string]string{"postline.result": "sent", "postline.provider": "relay", "postline.attempt": "2"}},
	} {
		for _, name := range []string{"claim", "send", "record"} {
			child := find(spans, name, childOf(tt.parent))
			if child == nil {
				t.Errorf("%s: no %s span under its deliver span", tt.name, name)
				continue
			}
			if name == "send" {
				checkAttrs(t, tt.name+" send", *child, tt.send)
			} else {
				checkAttrs(t, tt.name+" "+name, *child, map[string]string{"postline.batch_size": "1"})
			}
		}
	}
}

func createTopics(t *testing.T, brokers []string, specs []topic.Spec) {
	t.Helper()
	names := make([]string, len(specs))
	for i := range specs {
		specs[i].ReplicationFactor = 1
		names[i] = specs[i].Name
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := topic.Ensure(ctx, testenv.KafkaCluster(brokers...), specs...); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := topic.Delete(ctx, testenv.KafkaCluster(brokers...), names...); err != nil {
			t.Errorf("delete topics: %v", err)
		}
	})
}

// find returns the first span named name that matches every filter, or nil.
func find(spans tracetest.SpanStubs, name string, filters ...func(tracetest.SpanStub) bool) *tracetest.SpanStub {
next:
	for i, s := range spans {
		if s.Name != name {
			continue
		}
		for _, f := range filters {
			if !f(s) {
				continue next
			}
		}
		return &spans[i]
	}
	return nil
}

func attrIs(key, value string) func(tracetest.SpanStub) bool {
	return func(s tracetest.SpanStub) bool { return attrOf(s, key) == value }
}

func childOf(parent tracetest.SpanStub) func(tracetest.SpanStub) bool {
	return func(s tracetest.SpanStub) bool { return s.Parent.SpanID() == parent.SpanContext.SpanID() }
}

func attrOf(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == attribute.Key(key) {
			return kv.Value.Emit()
		}
	}
	return ""
}

func checkChild(t *testing.T, what string, child, parent tracetest.SpanStub) {
	t.Helper()
	if child.Parent.SpanID() != parent.SpanContext.SpanID() || child.Parent.TraceID() != parent.SpanContext.TraceID() {
		t.Errorf("%s: parent span %v, want %s's %v", what, child.Parent.SpanID(), parent.Name, parent.SpanContext.SpanID())
	}
}

func checkAttrs(t *testing.T, what string, s tracetest.SpanStub, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := attrOf(s, k); got != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got, v)
		}
	}
}

func names(spans tracetest.SpanStubs) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name + "(" + attrOf(s, "postline.attempt") + ")"
	}
	return out
}
