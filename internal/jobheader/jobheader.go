// Package jobheader owns the Kafka headers Postline keeps on a job's
// records: their keys (attempt, first-seen, not-before, throttles, last
// class, and the dead-letter fields), reading them as untrusted input,
// writing them without touching a shared backing array, and carrying W3C
// trace context in them. They are the workers' bookkeeping, not part of
// the job document: applications publish with job.Publisher, which sets the
// first attempt's headers, and read dead letters' headers by the names
// docs/topics-and-headers.md lists.
package jobheader

import (
	"math"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/propagation"
)

// Kafka header keys carried by job records on mail.jobs, the delay topics and
// the dead-letter topic. W3C trace context travels as "traceparent" and
// "tracestate" next to them.
const (
	// KeyAttempt is the delivery attempt this record is for, in decimal,
	// starting at 1. A missing header means attempt 1.
	KeyAttempt = "postline-attempt"
	// KeyNotBefore is the RFC 3339 time before which the record must not
	// be delivered (set on delay-topic records).
	KeyNotBefore = "postline-not-before"
	// KeyFirstSeen is the RFC 3339 time the job was first published.
	KeyFirstSeen = "postline-first-seen"
	// KeyLastClass is the failure class of the previous attempt.
	KeyLastClass = "postline-last-class"
	// KeyThrottles is how many of the attempts so far the relay refused
	// as throttled, in decimal; missing means none. The retry policy keeps
	// "wait until the relay takes mail" apart from "attempt n failed": a
	// throttle does not grow the exponential backoff.
	KeyThrottles = "postline-throttles"

	// KeyDLQReason is the machine-readable reason a record was
	// dead-lettered (a job.Reason value or a delivery outcome such as
	// "smtp_permanent").
	KeyDLQReason = "postline-dlq-reason"
	// KeyDLQClass is the failure class that dead-lettered the record.
	KeyDLQClass = "postline-dlq-class"
	// KeyDLQError is a human-readable description of the last error.
	KeyDLQError = "postline-dlq-error"
	// KeyDLQOriginalTopic, KeyDLQOriginalPartition and
	// KeyDLQOriginalOffset locate the record the dead letter copies.
	KeyDLQOriginalTopic     = "postline-original-topic"
	KeyDLQOriginalPartition = "postline-original-partition"
	KeyDLQOriginalOffset    = "postline-original-offset"
	// KeyDLQTime is the RFC 3339 time the record was dead-lettered.
	KeyDLQTime = "postline-dlq-time"
	// KeyDLQOmitted, on a dead letter too large for the dead-letter
	// topic, names what was left out of the original record and its sizes
	// ("value=4190000 headers=3"); the original is still at its topic,
	// partition and offset until retention removes it.
	KeyDLQOmitted = "postline-dlq-omitted"

	// Prefix starts every header key Postline sets.
	Prefix = "postline-"
)

// MaxAttempt and MaxThrottles bound the counts Attempt and Throttles
// return: the largest value a Postgres integer column holds, where the
// worker stores them. A header above the bound is garbage, not a count.
const (
	MaxAttempt   = math.MaxInt32
	MaxThrottles = math.MaxInt32
)

// Attempt returns the attempt number in headers: the last KeyAttempt
// value, or 1 when it is missing, not a decimal integer (spaces or other
// bytes around the digits included), below 1 or above MaxAttempt. Producers
// can set this header, so it is read as untrusted.
func Attempt(headers []kafka.Header) int {
	v, ok := lastHeaderView(headers, KeyAttempt)
	if !ok {
		return 1
	}
	n, ok := parseCount(v)
	if !ok || n < 1 || n > MaxAttempt {
		return 1
	}
	return n
}

// Throttles returns the count in the last KeyThrottles header: 0 when it
// is missing, not a decimal integer, negative or above MaxThrottles.
func Throttles(headers []kafka.Header) int {
	v, ok := lastHeaderView(headers, KeyThrottles)
	if !ok {
		return 0
	}
	n, ok := parseCount(v)
	if !ok || n < 0 || n > MaxThrottles {
		return 0
	}
	return n
}

// parseCount parses a decimal that fits 32 bits, as strconv.ParseInt does:
// an optional sign and digits, nothing else (no spaces, no NUL).
func parseCount(v string) (int, bool) {
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, false
	}
	return int(n), true
}

// FirstSeen returns the time in the last KeyFirstSeen header, and false
// when it is missing or not RFC 3339.
func FirstSeen(headers []kafka.Header) (time.Time, bool) {
	return timeHeader(headers, KeyFirstSeen)
}

// NotBefore returns the time in the last KeyNotBefore header, and false
// when it is missing or not RFC 3339.
func NotBefore(headers []kafka.Header) (time.Time, bool) {
	return timeHeader(headers, KeyNotBefore)
}

// FormatTime formats t the way time-valued headers carry it: RFC 3339 with
// nanoseconds, in UTC.
func FormatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

func timeHeader(headers []kafka.Header, key string) (time.Time, bool) {
	v, ok := lastHeaderView(headers, key)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// lastHeaderView is lastHeader without the copy, for a value that is only
// parsed, never kept: the string shares the header's bytes, which a
// consumed record's headers never change (Carrier.Set writes a copy).
// Every record's attempt, throttle and time headers are read this way.
func lastHeaderView(headers []kafka.Header, key string) (string, bool) {
	for i := len(headers) - 1; i >= 0; i-- {
		if headers[i].Key == key {
			v := headers[i].Value
			return unsafe.String(unsafe.SliceData(v), len(v)), true
		}
	}
	return "", false
}

func lastHeader(headers []kafka.Header, key string) (string, bool) {
	for i := len(headers) - 1; i >= 0; i-- {
		if headers[i].Key == key {
			return string(headers[i].Value), true
		}
	}
	return "", false
}

// Carrier adapts Kafka record headers to OpenTelemetry's
// propagation.TextMapCarrier, to inject and extract W3C trace context:
//
//	c := jobheader.Carrier(msg.Headers)
//	otel.GetTextMapPropagator().Inject(ctx, &c)
//	msg.Headers = c
//
// Keys match exactly (Kafka header keys are case-sensitive; the W3C
// propagator uses lower case). Set replaces an existing key and drops its
// duplicates, so a record re-published by every retry does not grow. Not
// safe for concurrent use.
type Carrier []kafka.Header

var _ propagation.TextMapCarrier = (*Carrier)(nil)

// Get returns the value of the last header with key, or "".
func (c *Carrier) Get(key string) string {
	v, _ := lastHeader(*c, key)
	return v
}

// Set sets key to value: it replaces the first header with key, removes any
// later ones, or appends a new header.
func (c *Carrier) Set(key, value string) {
	*c = Set(*c, key, value)
}

// Keys returns the distinct header keys in order of first appearance.
func (c *Carrier) Keys() []string {
	keys := make([]string, 0, len(*c))
	for _, h := range *c {
		if !slices.Contains(keys, h.Key) {
			keys = append(keys, h.Key)
		}
	}
	return keys
}

// Set returns headers with key set to value, replacing the first
// header with key and removing later duplicates, or appending. It never
// writes to headers' backing array, which a consumed record or a sibling
// message may share.
func Set(headers []kafka.Header, key, value string) []kafka.Header {
	found := false
	out := make([]kafka.Header, 0, len(headers)+1)
	for _, h := range headers {
		if h.Key != key {
			out = append(out, h)
			continue
		}
		if !found {
			found = true
			out = append(out, kafka.Header{Key: key, Value: []byte(value)})
		}
	}
	if !found {
		out = append(out, kafka.Header{Key: key, Value: []byte(value)})
	}
	return out
}
