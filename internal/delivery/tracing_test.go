package delivery

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/job"
)

// producerSpanContext is the span context a publisher would have injected.
func producerSpanContext() trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:     trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
}

// injected returns headers with sc injected the way job.Publisher does.
func injected(t *testing.T, sc trace.SpanContext, headers ...kafka.Header) []kafka.Header {
	t.Helper()
	c := jobheader.Carrier(slices.Clone(headers))
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), &c)
	if c.Get("traceparent") == "" {
		t.Fatal("nothing injected")
	}
	return c
}

func TestDeliverSpanJoinsTheTraceContextOfTheHeaders(t *testing.T) {
	producerSpan := producerSpanContext()
	withState := producerSpan.WithTraceState(mustTraceState(t, "vendor=abc"))
	tests := []struct {
		name       string
		headers    []kafka.Header
		wantParent trace.SpanContext // invalid: a root span
		wantState  string
	}{
		{name: "no trace context starts a new trace"},
		{name: "traceparent is the parent", headers: injected(t, producerSpan), wantParent: producerSpan},
		{name: "tracestate is kept", headers: injected(t, withState), wantParent: withState, wantState: "vendor=abc"},
		{name: "the last traceparent wins", headers: append([]kafka.Header{{Key: "traceparent", Value: []byte("00-11111111111111111111111111111111-2222222222222222-01")}},
			injected(t, producerSpan)...), wantParent: producerSpan},
		{name: "a malformed traceparent starts a new trace", headers: []kafka.Header{{Key: "traceparent", Value: []byte("00-zz-01")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			p := &Pipeline{tracer: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer(tracerName)}
			it := &item{msg: consumer.Message{Topic: "mail.jobs", Partition: 2, Offset: 7, Headers: tt.headers}, attempt: 1}
			p.startDeliver(it)
			it.span.End()

			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("spans = %d, want 1", len(spans))
			}
			got := spans[0]
			if !tt.wantParent.IsValid() {
				if got.Parent().IsValid() {
					t.Fatalf("parent = %v, want a root span", got.Parent())
				}
				return
			}
			if !got.Parent().Equal(tt.wantParent) {
				t.Errorf("parent = %v/%v, want %v/%v", got.Parent().TraceID(), got.Parent().SpanID(), tt.wantParent.TraceID(), tt.wantParent.SpanID())
			}
			if got.SpanContext().TraceID() != tt.wantParent.TraceID() {
				t.Errorf("trace id = %v, want the parent's %v", got.SpanContext().TraceID(), tt.wantParent.TraceID())
			}
			if s := got.SpanContext().TraceState().String(); s != tt.wantState {
				t.Errorf("tracestate = %q, want %q", s, tt.wantState)
			}
			if got.SpanKind() != trace.SpanKindConsumer {
				t.Errorf("kind = %v, want consumer", got.SpanKind())
			}
		})
	}
}

func TestPipelineTracesEachRecord(t *testing.T) {
	const recipient = "b@example.com" // testJob's; must appear in no span
	producerSpan := producerSpanContext()
	tests := []struct {
		name         string
		record       []byte
		sendErr      func(*job.Job, int) error
		wantFate     string
		wantReason   string
		wantStatus   codes.Code
		wantChildren []string // names, sorted
		wantSend     map[attribute.Key]string
		wantCopies   int
	}{
		{
			name:         "sent",
			record:       mustJSON(t, testJob("a@x", "hi")),
			wantFate:     "sent",
			wantChildren: []string{"claim", "record", "send"},
			wantSend:     map[attribute.Key]string{attrRelay: "p1", attrAttempt: "1", attrResult: "sent"},
		},
		{
			name:         "permanent failure",
			record:       mustJSON(t, testJob("a@x", "hi")),
			sendErr:      func(*job.Job, int) error { return smtpErr(550, "5.1.1", "<"+recipient+">: no such user") },
			wantFate:     "failed",
			wantReason:   "smtp_permanent",
			wantStatus:   codes.Error,
			wantChildren: []string{"claim", "record", "send"},
			wantSend: map[attribute.Key]string{attrRelay: "p1", attrAttempt: "1", attrResult: "permanent",
				attrSMTPCode: "550", attrSMTPEnhanced: "5.1.1"},
		},
		{
			name:         "throttled goes to a delay tier",
			record:       mustJSON(t, testJob("a@x", "hi")),
			sendErr:      func(*job.Job, int) error { return smtpErr(450, "4.7.1", "rate limit exceeded") },
			wantFate:     "retried",
			wantChildren: []string{"claim", "record", "send"},
			wantSend: map[attribute.Key]string{attrRelay: "p1", attrAttempt: "1", attrResult: "throttled",
				attrSMTPCode: "450", attrSMTPEnhanced: "4.7.1"},
			wantCopies: 1,
		},
		{
			name:       "rejected",
			record:     []byte("{not json"),
			wantFate:   "rejected",
			wantReason: string(job.ReasonMalformedJSON),
			wantStatus: codes.Error,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			h := tracedHarness(t, tt.sendErr, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
			h.src = newFakeSource([][]byte{tt.record}, true)
			m := <-h.src.ch
			m.Headers = injected(t, producerSpan, m.Headers...)
			h.src.ch <- m
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if err := h.pipeline.Run(ctx, h.src); err != nil {
				t.Fatalf("Run: %v", err)
			}

			var deliver sdktrace.ReadOnlySpan
			var children []string
			spans := rec.Ended()
			for _, s := range spans {
				if s.Name() == "deliver" {
					deliver = s
				}
			}
			if deliver == nil {
				t.Fatalf("no deliver span among %d", len(spans))
			}
			if !deliver.Parent().Equal(producerSpan) {
				t.Errorf("deliver's parent = %v, want the producer's span", deliver.Parent().SpanID())
			}
			attrs := attrMap(deliver)
			if attrs[attrFate] != tt.wantFate || attrs[attrReason] != tt.wantReason {
				t.Errorf("deliver fate, reason = %q, %q; want %q, %q", attrs[attrFate], attrs[attrReason], tt.wantFate, tt.wantReason)
			}
			if deliver.Status().Code != tt.wantStatus {
				t.Errorf("deliver status = %v, want %v", deliver.Status().Code, tt.wantStatus)
			}
			for _, s := range spans {
				for _, kv := range s.Attributes() {
					if strings.Contains(kv.Value.Emit(), recipient) {
						t.Errorf("span %s attribute %s carries the recipient", s.Name(), kv.Key)
					}
				}
				if strings.Contains(s.Status().Description, recipient) {
					t.Errorf("span %s status carries the recipient", s.Name())
				}
				if s == deliver {
					continue
				}
				children = append(children, s.Name())
				if s.Parent().SpanID() != deliver.SpanContext().SpanID() || s.SpanContext().TraceID() != producerSpan.TraceID() {
					t.Errorf("span %s is not a child of deliver in the producer's trace", s.Name())
				}
				switch s.Name() {
				case "send":
					got := attrMap(s)
					for k, want := range tt.wantSend {
						if got[k] != want {
							t.Errorf("send %s = %q, want %q", k, got[k], want)
						}
					}
				case "claim", "record":
					if got := attrMap(s)[attrBatchSize]; got != "1" {
						t.Errorf("%s batch size = %q, want 1", s.Name(), got)
					}
				}
			}
			slices.Sort(children)
			if !slices.Equal(children, tt.wantChildren) {
				t.Errorf("deliver's children = %v, want %v", children, tt.wantChildren)
			}
			copies := h.retries.all()
			if len(copies) != tt.wantCopies {
				t.Fatalf("retry copies = %d, want %d", len(copies), tt.wantCopies)
			}
			original := jobheader.Carrier(m.Headers)
			for _, c := range copies {
				carrier := jobheader.Carrier(c.Headers)
				if got, want := carrier.Get("traceparent"), original.Get("traceparent"); got != want {
					t.Errorf("retry copy traceparent = %q, want the record's own %q", got, want)
				}
			}
		})
	}
}

func TestTraceAttr(t *testing.T) {
	_, noTrace := noop.NewTracerProvider().Tracer("").Start(context.Background(), "x")
	tests := []struct {
		name string
		span trace.Span
		want slog.Attr
	}{
		{name: "no span", span: nil, want: slog.Attr{}},
		{name: "span without a trace", span: noTrace, want: slog.Attr{}},
		{name: "span in a trace", span: trace.SpanFromContext(trace.ContextWithSpanContext(context.Background(), producerSpanContext())),
			want: slog.String("trace_id", "0af7651916cd43dd8448eb211c80319c")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := traceAttr(tt.span); !got.Equal(tt.want) {
				t.Errorf("traceAttr = %v, want %v", got, tt.want)
			}
		})
	}
}

// tracedHarness is a pipeline with one relay failing with sendErr, no
// resends, and spans going to tp.
func tracedHarness(t *testing.T, sendErr func(*job.Job, int) error, tp trace.TracerProvider) *harness {
	t.Helper()
	h := &harness{store: newFakeStore(), smtp: newFakeSMTP(sendErr), dlq: newFakeDLQ(), retries: newFakeRetries()}
	p, err := New(Config{Senders: 1, BatchSize: 4, BatchLinger: time.Millisecond, Resends: -1},
		slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), Deps{
			Store:          h.store,
			Relays:         []Relay{{Name: "p1", NewSession: func() Session { return h.smtp }}},
			DeadLetters:    h.dlq,
			Retries:        h.retries,
			TracerProvider: tp,
		})
	if err != nil {
		t.Fatal(err)
	}
	h.pipeline = p
	return h
}

func attrMap(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := make(map[attribute.Key]string)
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.Emit()
	}
	return m
}

func mustTraceState(t *testing.T, s string) trace.TraceState {
	t.Helper()
	ts, err := trace.ParseTraceState(s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
