package retry

import (
	"context"
	"time"

	"github.com/postline/postline/internal/jobheader"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Traces. A retry copy carries the W3C trace context of the record that
// failed (the worker copies the headers as they were). When a copy is due,
// the scheduler starts a "reinject" span (kind producer) as a child of that
// context and writes the span's own context into the re-injected record's
// traceparent and tracestate, so the next attempt's deliver span is the
// reinject span's child: producer -> reinject -> deliver (attempt 2). The
// span lasts from the record falling due until the jobs topic acknowledged
// it, and carries the tier, the attempt and the lateness; the wait in the
// delay topic itself is not a span.
const tracerName = "github.com/postline/postline/internal/retry"

// Span attributes of the scheduler's own.
const (
	attrTier     = attribute.Key("postline.tier")
	attrAttempt  = attribute.Key("postline.attempt")
	attrLateness = attribute.Key("postline.lateness_seconds")
)

// startReinject starts p's reinject span and sets p.headers to its record's
// headers with the span's trace context.
func (s *Scheduler) startReinject(p parked) parked {
	carrier := jobheader.Carrier(p.msg.Headers)
	parent := propagation.TraceContext{}.Extract(context.Background(), &carrier)
	ctx, span := s.tracer.Start(parent, "reinject",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemKafka,
			semconv.MessagingOperationTypeSend,
			semconv.MessagingDestinationName(s.cfg.JobsTopic),
			semconv.MessagingKafkaMessageKey(string(p.msg.Key)),
			attrTier.String(p.tier),
			attrAttempt.Int(jobheader.Attempt(p.msg.Headers)),
		))
	// Inject writes a copy (jobheader.Carrier.Set never touches the consumed
	// record's backing array). A span without a valid context (a no-op
	// provider and a record without trace context) injects nothing.
	propagation.TraceContext{}.Inject(ctx, &carrier)
	p.span, p.headers = span, carrier
	return p
}

// endReinject ends a reinject span once the jobs topic has the record.
func endReinject(span trace.Span, late time.Duration) {
	span.SetAttributes(attrLateness.Float64(late.Seconds()))
	span.End()
}

// abandon ends the reinject spans of records left unwritten at shutdown;
// they stay uncommitted and are re-read by the next owner.
func abandon(batch []parked) {
	for _, p := range batch {
		p.span.SetStatus(codes.Error, "not re-injected before shutdown")
		p.span.End()
	}
}
