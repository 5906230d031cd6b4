package delivery

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/jobheader"
)

// Traces. Every consumed record gets a "deliver" span (kind consumer) whose
// parent is the W3C trace context in the record's headers: the publisher's
// span for a first attempt, the retry scheduler's "reinject" span for a
// retry. It lasts from intake until the record is marked done, across the
// re-checks of a busy Message-ID and the hand-backs while no relay is
// open, and ends with the record's fate. Its children are:
//
//   - "claim", one per claim of the record. A claim is one store round trip
//     for a whole batch; each record still gets its own span over that
//     round trip, with the batch size as an attribute, so one record's
//     trace reads top to bottom without links.
//   - "send" (kind client), one per SMTP transaction: a resend or a
//     failover to the next relay is another send span.
//   - "record", over the batch's dead-letter, retry-copy and store writes,
//     again one span per record with the batch size.
//
// A retry copy keeps the trace context of the record that failed, and the
// retry scheduler's "reinject" span is a child of it whose context goes
// into the re-injected record: producer -> deliver (attempt 1), and
// producer -> reinject -> deliver (attempt 2); a third attempt's reinject
// is a child of the second's.
//
// Spans carry the relay, the attempt, the result or failure class and
// the SMTP reply code; never recipients, bodies or error texts, which may
// quote addresses. A record abandoned by a hard stop leaves its span
// unended (it is not exported); its redelivery starts a new one.
const tracerName = "github.com/postline/postline/internal/delivery"

// Span attributes of the pipeline's own; the messaging.* ones come from the
// semantic conventions.
const (
	attrAttempt      = attribute.Key("postline.attempt")
	attrRelay        = attribute.Key("postline.provider")
	attrResult       = attribute.Key("postline.result")
	attrSMTPCode     = attribute.Key("postline.smtp.code")
	attrSMTPEnhanced = attribute.Key("postline.smtp.enhanced")
	attrBatchSize    = attribute.Key("postline.batch_size")
	attrFate         = attribute.Key("postline.outcome")
	attrReason       = attribute.Key("postline.reason")
)

// resultSent is the send span's result of an accepted message; a failed
// send's result is its failure class.
const resultSent = "sent"

// tracing is false for a no-op tracer: its spans only carry the record's
// trace context, and building their attributes is skipped.
func (p *Pipeline) tracing() bool {
	_, untraced := p.tracer.(noop.Tracer)
	return !untraced
}

// startDeliver starts it's deliver span as a child of the trace context in
// its record's headers. Without tracing (a no-op tracer provider) the span is the
// parent's context only, so the options, which a no-op tracer drops, are
// not built: they were a good part of a mail's allocations.
func (p *Pipeline) startDeliver(it *item) {
	carrier := jobheader.Carrier(it.msg.Headers)
	parent := propagation.TraceContext{}.Extract(context.Background(), &carrier)
	if !p.tracing() {
		// What a no-op tracer's Start returns, without the context it
		// would wrap the span in for nothing.
		it.span = trace.SpanFromContext(parent)
		return
	}
	_, it.span = p.tracer.Start(parent, "deliver",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			semconv.MessagingSystemKafka,
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(it.msg.Topic),
			semconv.MessagingDestinationPartitionID(strconv.Itoa(it.msg.Partition)),
			semconv.MessagingKafkaOffset(int(it.msg.Offset)),
			attrAttempt.Int(it.attempt),
		))
	if it.rejected == nil && it.span.IsRecording() {
		it.span.SetAttributes(semconv.MessagingMessageID(it.job.MessageID))
	}
}

// endDeliver ends it's deliver span with the record's fate, the label of
// its fate f.
func endDeliver(it *item, f fate, label string) {
	if !it.span.IsRecording() {
		// Attributes and status of a span that records nothing are
		// dropped: skip building them.
		it.span.End()
		return
	}
	it.span.SetAttributes(attrFate.String(label))
	if f.kind == fateRejected || f.reason != "" {
		it.span.SetAttributes(attrReason.String(f.reason))
	}
	switch label {
	case string(idempotency.StatusFailed), string(idempotency.StatusDead), "rejected", "conflict":
		it.span.SetStatus(codes.Error, label)
	}
	it.span.End()
}

// childContext returns ctx (for its cancellation) carrying it's deliver
// span, to start the record's child spans in.
func childContext(ctx context.Context, it *item) context.Context {
	return trace.ContextWithSpan(ctx, it.span)
}

// traceRoundTrip gives each item of a batch a span name over one round trip
// that ran from start to end, with the attributes attrs returns for the
// item's index. Span times are wall-clock times, never Config.NowFunc's.
func (p *Pipeline) traceRoundTrip(ctx context.Context, name string, items []*item, start, end time.Time, attrs func(i int) []attribute.KeyValue) {
	if !p.tracing() {
		return // a no-op tracer's spans are dropped as they end
	}
	size := attrBatchSize.Int(len(items))
	for i, it := range items {
		_, span := p.tracer.Start(childContext(ctx, it), name,
			trace.WithTimestamp(start), trace.WithAttributes(size))
		span.SetAttributes(attrs(i)...)
		span.End(trace.WithTimestamp(end))
	}
}

// startSend starts the span of one SMTP transaction of it.
func (p *Pipeline) startSend(ctx context.Context, it *item, relay string) (context.Context, trace.Span) {
	if !p.tracing() {
		// Nothing reads the span from the send's context: without
		// tracing it need not carry one.
		return ctx, trace.SpanFromContext(context.Background())
	}
	return p.tracer.Start(childContext(ctx, it), "send",
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrRelay.String(relay), attrAttempt.Int(it.attempt)))
}

// endSend ends a send span with the transaction's result: "sent", or the
// failure class and the SMTP reply. The error text is left out: it may
// quote a recipient.
func endSend(span trace.Span, v failure.Verdict, ok bool) {
	if !span.IsRecording() {
		span.End()
		return
	}
	if ok {
		span.SetAttributes(attrResult.String(resultSent))
		span.End()
		return
	}
	span.SetAttributes(attrResult.String(string(v.Class)))
	if v.Code != 0 {
		span.SetAttributes(attrSMTPCode.Int(v.Code))
	}
	if v.Enhanced != "" {
		span.SetAttributes(attrSMTPEnhanced.String(v.Enhanced))
	}
	span.SetStatus(codes.Error, string(v.Class))
	span.End()
}

// traceAttr is the trace_id log attribute of span, or an empty attribute
// (which handlers drop) when there is no trace.
func traceAttr(span trace.Span) slog.Attr {
	if span == nil {
		return slog.Attr{}
	}
	sc := span.SpanContext()
	if !sc.HasTraceID() {
		return slog.Attr{}
	}
	return slog.String("trace_id", sc.TraceID().String())
}
