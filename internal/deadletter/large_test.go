package deadletter

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/topic"
	"github.com/postline/postline/job"
)

// newDLQTopic creates a one-partition topic of maxBytes on the test
// cluster, deleted when the test ends.
func newDLQTopic(t *testing.T, maxBytes int) string {
	t.Helper()
	testenv.Integration(t, "Kafka")
	name := testenv.UniqueName("dlq")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := topic.Ensure(ctx, testenv.Kafka(), topic.Spec{Name: name, Partitions: 1, ReplicationFactor: 1,
		Configs: map[string]string{"max.message.bytes": strconv.Itoa(maxBytes)}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = topic.Delete(context.Background(), testenv.Kafka(), name) })
	return name
}

func readAll(t *testing.T, name string, n int) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: testenv.KafkaBrokers(), Topic: name, MaxBytes: 16 << 20, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	var out []kafka.Message
	for len(out) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read dead letter %d of %d: %v", len(out)+1, n, err)
		}
		out = append(out, m)
	}
	return out
}

// Regression: three dead letters of 1.5 MB for one partition in one call.
// With a 16 MiB batch limit against a 4 MiB topic the broker refused the
// batch (MESSAGE_TOO_LARGE) forever; batches cut to the topic's limit go
// through.
func TestPublishLargeLettersInOneCall(t *testing.T) {
	name := newDLQTopic(t, topic.CopyMaxMessageBytes)
	w, err := New(Config{Kafka: testenv.Kafka(), Topic: name, MaxMessageBytes: topic.CopyMaxMessageBytes}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	value := []byte(strings.Repeat("a", 1_500_000))
	letters := make([]Letter, 3)
	for i := range letters {
		letters[i] = Letter{Key: []byte("k"), Value: value, Topic: "mail.jobs", Offset: int64(i), Reason: ReasonSMTPPermanent, Class: "permanent", Attempt: 1}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := w.Publish(ctx, letters...); err != nil {
		t.Fatalf("publish three 1.5 MB dead letters: %v", err)
	}
	for i, m := range readAll(t, name, 3) {
		if len(m.Value) != len(value) {
			t.Errorf("dead letter %d has %d bytes, want the whole %d", i, len(m.Value), len(value))
		}
	}
}

// Regression: a record just under the jobs topic's 4 MiB limit, rejected
// as oversize. Into a dead-letter topic made as large as the jobs topic
// (too small for the record plus its dead-letter headers) it is written
// without its value, saying so, instead of being refused forever; into the
// standard dead-letter topic it is written whole.
func TestPublishLetterLargerThanTheTopic(t *testing.T) {
	value := make([]byte, topic.MaxMessageBytes-200)
	for i := range value {
		value[i] = 'v'
	}
	letter := Letter{Key: []byte("key"), Value: value, Headers: []kafka.Header{{Key: "traceparent", Value: []byte("00-abc")}},
		Topic: "mail.jobs", Partition: 3, Offset: 42, Reason: string(job.ReasonOversizeMessage), Class: "invalid", Error: "too big", Attempt: 1}

	t.Run("topic as small as the jobs topic", func(t *testing.T) {
		name := newDLQTopic(t, topic.MaxMessageBytes)
		reg := prometheus.NewRegistry()
		w, err := New(Config{Kafka: testenv.Kafka(), Topic: name, MaxMessageBytes: topic.MaxMessageBytes}, reg)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if err := w.Publish(ctx, letter); err != nil {
			t.Fatalf("publish: %v", err)
		}
		m := readAll(t, name, 1)[0]
		h := jobheader.Carrier(m.Headers)
		if len(m.Value) != 0 || h.Get(jobheader.KeyDLQOmitted) != "value="+strconv.Itoa(len(value)) ||
			h.Get(jobheader.KeyDLQReason) != string(job.ReasonOversizeMessage) || h.Get(jobheader.KeyDLQOriginalOffset) != "42" ||
			h.Get("traceparent") != "00-abc" {
			t.Errorf("shortened letter: %d bytes, headers %v", len(m.Value), m.Headers)
		}
		if got := testutil.ToFloat64(w.shortened); got != 1 {
			t.Errorf("shortened_total = %v, want 1", got)
		}
	})
	t.Run("standard dead-letter topic", func(t *testing.T) {
		name := newDLQTopic(t, topic.CopyMaxMessageBytes)
		w, err := New(Config{Kafka: testenv.Kafka(), Topic: name}, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if err := w.Publish(ctx, letter); err != nil {
			t.Fatalf("publish: %v", err)
		}
		if m := readAll(t, name, 1)[0]; len(m.Value) != len(value) || testkit.Header(m.Headers, jobheader.KeyDLQOmitted) != "" {
			t.Errorf("letter into the standard topic: %d bytes, omitted %q; want it whole", len(m.Value), testkit.Header(m.Headers, jobheader.KeyDLQOmitted))
		}
	})
}

// fit's shortening, step by step, against its own size bound.
func TestFit(t *testing.T) {
	big := make([]byte, 10_000)
	headers := []kafka.Header{{Key: "x-producer", Value: big}, {Key: jobheader.KeyDLQReason, Value: []byte("r")}}
	tests := []struct {
		name        string
		max         int
		msg         kafka.Message
		wantOmitted string
	}{
		{"fits", 50_000, kafka.Message{Value: big, Headers: headers}, ""},
		{"value dropped", 15_000, kafka.Message{Value: big, Headers: headers}, "value=10000"},
		{"value and foreign headers dropped", 5_000, kafka.Message{Value: big, Headers: headers}, "value=10000 headers=1"},
		{"key dropped too", 5_000, kafka.Message{Key: big, Value: big, Headers: headers}, "value=10000 headers=1 key"},
	}
	for _, tt := range tests {
		got, short := fit(tt.msg, tt.max)
		if short != (tt.wantOmitted != "") || testkit.Header(got.Headers, jobheader.KeyDLQOmitted) != tt.wantOmitted {
			t.Errorf("%s: shortened %t, omitted %q; want %q", tt.name, short, testkit.Header(got.Headers, jobheader.KeyDLQOmitted), tt.wantOmitted)
		}
		if recordBytes(got) > tt.max {
			t.Errorf("%s: %d bytes after fit, over %d", tt.name, recordBytes(got), tt.max)
		}
		if testkit.Header(got.Headers, jobheader.KeyDLQReason) != "r" {
			t.Errorf("%s: the reason was dropped", tt.name)
		}
	}
}
