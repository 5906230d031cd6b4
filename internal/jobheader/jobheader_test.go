package jobheader

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func hdrs(kv ...string) []kafka.Header {
	var h []kafka.Header
	for i := 0; i < len(kv); i += 2 {
		h = append(h, kafka.Header{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return h
}

func TestAttempt(t *testing.T) {
	tests := []struct {
		name    string
		headers []kafka.Header
		want    int
	}{
		{"missing", nil, 1},
		{"one", hdrs(KeyAttempt, "1"), 1},
		{"three", hdrs("other", "9", KeyAttempt, "3"), 3},
		{"last wins", hdrs(KeyAttempt, "2", KeyAttempt, "5"), 5},
		{"zero", hdrs(KeyAttempt, "0"), 1},
		{"negative", hdrs(KeyAttempt, "-4"), 1},
		{"garbage", hdrs(KeyAttempt, "two"), 1},
		{"empty", hdrs(KeyAttempt, ""), 1},
		{"spaces", hdrs(KeyAttempt, " 2"), 1},
		// Regression: Atoi took values a Postgres integer cannot hold, so
		// the claim failed for ever.
		{"int32 max", hdrs(KeyAttempt, "2147483647"), MaxAttempt},
		{"int32 max plus one", hdrs(KeyAttempt, "2147483648"), 1},
		{"beyond int64", hdrs(KeyAttempt, "99999999999999999999"), 1},
		{"minus one", hdrs(KeyAttempt, "-1"), 1},
		{"int32 min", hdrs(KeyAttempt, "-2147483648"), 1},
		{"leading space", hdrs(KeyAttempt, " 3"), 1},
		{"trailing space", hdrs(KeyAttempt, "3 "), 1},
		{"trailing NUL", hdrs(KeyAttempt, "3\x00"), 1},
		{"plus sign", hdrs(KeyAttempt, "+3"), 3},
		{"leading zeros", hdrs(KeyAttempt, "007"), 7},
		{"hex", hdrs(KeyAttempt, "0x3"), 1},
		{"underscore", hdrs(KeyAttempt, "1_0"), 1},
		{"fraction", hdrs(KeyAttempt, "3.0"), 1},
		{"last wins even when bad", hdrs(KeyAttempt, "4", KeyAttempt, "2147483648"), 1},
		{"last of many", hdrs(KeyAttempt, "4", "other", "x", KeyAttempt, "6", KeyAttempt, "9"), 9},
		{"key is case-sensitive", hdrs(KeyAttempt, "4", "Postline-Attempt", "8"), 4},
		{"very long digits", hdrs(KeyAttempt, strings.Repeat("9", 1<<16)), 1},
		{"very long zeros then a digit", hdrs(KeyAttempt, strings.Repeat("0", 1<<16)+"5"), 5},
	}
	for _, tt := range tests {
		if got := Attempt(tt.headers); got != tt.want {
			t.Errorf("%s: Attempt = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestThrottles(t *testing.T) {
	tests := []struct {
		name    string
		headers []kafka.Header
		want    int
	}{
		{"missing", nil, 0},
		{"zero", hdrs(KeyThrottles, "0"), 0},
		{"two", hdrs(KeyAttempt, "3", KeyThrottles, "2"), 2},
		{"last wins", hdrs(KeyThrottles, "1", KeyThrottles, "4"), 4},
		{"negative", hdrs(KeyThrottles, "-1"), 0},
		{"garbage", hdrs(KeyThrottles, "x"), 0},
		{"empty", hdrs(KeyThrottles, ""), 0},
		{"int32 max", hdrs(KeyThrottles, "2147483647"), MaxThrottles},
		{"int32 max plus one", hdrs(KeyThrottles, "2147483648"), 0},
		{"beyond int64", hdrs(KeyThrottles, "99999999999999999999"), 0},
		{"leading space", hdrs(KeyThrottles, " 3"), 0},
		{"trailing NUL", hdrs(KeyThrottles, "3\x00"), 0},
		{"plus sign", hdrs(KeyThrottles, "+3"), 3},
		{"last wins even when bad", hdrs(KeyThrottles, "4", KeyThrottles, "-1"), 0},
		{"very long", hdrs(KeyThrottles, strings.Repeat("1", 1<<16)), 0},
	}
	for _, tt := range tests {
		if got := Throttles(tt.headers); got != tt.want {
			t.Errorf("%s: Throttles = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestTimeHeaders(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	tests := []struct {
		name    string
		headers []kafka.Header
		want    time.Time
		ok      bool
	}{
		{"missing", nil, time.Time{}, false},
		{"nanoseconds", hdrs(KeyFirstSeen, FormatTime(at)), at, true},
		{"seconds with offset", hdrs(KeyFirstSeen, "2030-01-02T04:04:05+01:00"), at.Truncate(time.Second), true},
		{"garbage", hdrs(KeyFirstSeen, "yesterday"), time.Time{}, false},
	}
	for _, tt := range tests {
		got, ok := FirstSeen(tt.headers)
		if ok != tt.ok || !got.Equal(tt.want) {
			t.Errorf("%s: FirstSeen = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	got, ok := NotBefore(hdrs(KeyFirstSeen, "x", KeyNotBefore, FormatTime(at)))
	if !ok || !got.Equal(at) {
		t.Errorf("NotBefore = %v, %v", got, ok)
	}
	if s := FormatTime(at.In(time.FixedZone("X", 7200))); s != "2030-01-02T03:04:05.000000006Z" {
		t.Errorf("FormatTime = %q, want UTC with nanoseconds", s)
	}
}

func TestHeaderCarrier(t *testing.T) {
	orig := hdrs("a", "1", "traceparent", "old", "b", "2", "traceparent", "older")
	shared := orig[:2]
	c := Carrier(orig)
	c.Set("traceparent", "new")
	want := hdrs("a", "1", "traceparent", "new", "b", "2")
	if !reflect.DeepEqual([]kafka.Header(c), want) {
		t.Fatalf("after Set: %q, want %q", c, want)
	}
	if string(shared[1].Value) != "old" {
		t.Fatal("Set wrote to the original backing array")
	}
	c.Set("tracestate", "k=v")
	if got := c.Get("tracestate"); got != "k=v" {
		t.Fatalf("Get(tracestate) = %q", got)
	}
	if got := c.Get("missing"); got != "" {
		t.Fatalf("Get(missing) = %q", got)
	}
	if got, want := c.Keys(), []string{"a", "traceparent", "b", "tracestate"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Keys = %q, want %q", got, want)
	}
	dup := Carrier(hdrs("k", "1", "k", "2"))
	if got := dup.Keys(); !reflect.DeepEqual(got, []string{"k"}) {
		t.Fatalf("Keys with duplicates = %q", got)
	}
}

func TestHeaderCarrierPropagatesTraceContext(t *testing.T) {
	prop := propagation.TraceContext{}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	var c Carrier
	// Inject twice, as a retry re-publishing a record does: no duplicates.
	prop.Inject(ctx, &c)
	prop.Inject(ctx, &c)
	if len(c) != 1 || c[0].Key != "traceparent" {
		t.Fatalf("headers after two injections: %q", c)
	}
	got := trace.SpanContextFromContext(prop.Extract(context.Background(), &c))
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsSampled() {
		t.Fatalf("extracted %v, want %v", got, sc)
	}
}
