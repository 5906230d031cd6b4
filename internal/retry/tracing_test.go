package retry

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/testenv"
)

func TestReinjectSpanCarriesItsContextIntoTheRecord(t *testing.T) {
	const attemptHeader = "postline-attempt"
	// traceparent is the retry test's W3C example: trace 0af7...319c.
	producer, err := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		traced    bool // spans are recorded (else the no-op provider)
		headers   []kafka.Header
		wantTrace trace.TraceID // zero: a new trace
	}{
		{name: "child of the record's context", traced: true,
			headers:   []kafka.Header{{Key: attemptHeader, Value: []byte("2")}, {Key: "traceparent", Value: []byte(traceparent)}},
			wantTrace: producer},
		{name: "a record without context starts a trace", traced: true,
			headers: []kafka.Header{{Key: attemptHeader, Value: []byte("2")}}},
		{name: "tracing off keeps the record's context", traced: false,
			headers:   []kafka.Header{{Key: attemptHeader, Value: []byte("2")}, {Key: "traceparent", Value: []byte(traceparent)}},
			wantTrace: producer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			cfg := SchedulerConfig{Kafka: testenv.KafkaCluster("127.0.0.1:1"), RejectFunc: rejectUnexpected(t), JobsTopic: "jobs"}
			if tt.traced {
				cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			}
			s, err := NewScheduler(cfg, slog.New(slog.DiscardHandler), nil)
			if err != nil {
				t.Fatal(err)
			}
			original := slices.Clone(tt.headers)
			p := s.startReinject(parked{msg: consumer.Message{Topic: "mail.retry.5s", Key: []byte("m@x"), Headers: tt.headers},
				tier: "5s", planned: time.Now().Add(time.Hour)}) // not late
			s.acked([]parked{p})

			if !slices.EqualFunc(tt.headers, original, headerEqual) {
				t.Errorf("the consumed record's headers changed: %v", tt.headers)
			}
			out := jobheader.Carrier(p.headers)
			if got := out.Get(attemptHeader); got != "2" {
				t.Errorf("attempt header = %q, want it kept", got)
			}
			injected := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), &out))
			if !tt.traced {
				if got := out.Get("traceparent"); got != traceparent {
					t.Errorf("traceparent = %q, want the record's %q", got, traceparent)
				}
				return
			}
			spans := rec.Ended()
			if len(spans) != 1 || spans[0].Name() != "reinject" || spans[0].SpanKind() != trace.SpanKindProducer {
				t.Fatalf("spans = %v, want one producer span named reinject", spans)
			}
			span := spans[0]
			if injected.TraceID() != span.SpanContext().TraceID() || injected.SpanID() != span.SpanContext().SpanID() {
				t.Errorf("re-injected context = %v/%v, want the reinject span's %v/%v",
					injected.TraceID(), injected.SpanID(), span.SpanContext().TraceID(), span.SpanContext().SpanID())
			}
			if tt.wantTrace.IsValid() {
				if span.SpanContext().TraceID() != tt.wantTrace || span.Parent().SpanID().String() != "b7ad6b7169203331" {
					t.Errorf("reinject span is not a child of the record's context: parent %v", span.Parent())
				}
			} else if span.Parent().IsValid() {
				t.Errorf("reinject span has parent %v, want a root span", span.Parent())
			}
			attrs := map[string]string{}
			for _, kv := range span.Attributes() {
				attrs[string(kv.Key)] = kv.Value.Emit()
			}
			for k, want := range map[string]string{"postline.tier": "5s", "postline.attempt": "2",
				"messaging.destination.name": "jobs", "postline.lateness_seconds": "0"} {
				if attrs[k] != want {
					t.Errorf("attribute %s = %q, want %q", k, attrs[k], want)
				}
			}
		})
	}
}

func TestAbandonedReinjectSpansEndAsErrors(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	s, err := NewScheduler(SchedulerConfig{Kafka: testenv.KafkaCluster("127.0.0.1:1"), RejectFunc: rejectUnexpected(t),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	batch := []parked{
		s.startReinject(parked{msg: consumer.Message{Offset: 1}, tier: "5s", planned: time.Now()}),
		s.startReinject(parked{msg: consumer.Message{Offset: 2}, tier: "5s", planned: time.Now()}),
	}
	abandon(batch)
	spans := rec.Ended()
	if len(spans) != len(batch) {
		t.Fatalf("ended spans = %d, want %d", len(spans), len(batch))
	}
	for _, span := range spans {
		if span.Status().Code != codes.Error {
			t.Errorf("abandoned span status = %v, want error", span.Status())
		}
	}
}

func headerEqual(a, b kafka.Header) bool { return a.Key == b.Key && string(a.Value) == string(b.Value) }
