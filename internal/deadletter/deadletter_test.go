package deadletter

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/testenv"
)

func TestHeaders(t *testing.T) {
	original := []kafka.Header{
		{Key: "traceparent", Value: []byte("00-abc-def-01")},
		{Key: jobheader.KeyAttempt, Value: []byte("2")},
		{Key: jobheader.KeyDLQReason, Value: []byte("left by an earlier dead-lettering")},
	}
	tests := []struct {
		name   string
		letter Letter
		want   map[string]string
	}{
		{
			name: "dead-letter headers are set and the trace context kept",
			letter: Letter{Headers: original, Topic: "mail.jobs", Partition: 3, Offset: 42,
				Reason: "invalid_address", Class: "invalid", Error: "to[0]: bad", Attempt: 2},
			want: map[string]string{
				"traceparent":                     "00-abc-def-01",
				jobheader.KeyAttempt:              "2",
				jobheader.KeyDLQReason:            "invalid_address",
				jobheader.KeyDLQClass:             "invalid",
				jobheader.KeyDLQError:             "to[0]: bad",
				jobheader.KeyDLQOriginalTopic:     "mail.jobs",
				jobheader.KeyDLQOriginalPartition: "3",
				jobheader.KeyDLQOriginalOffset:    "42",
				jobheader.KeyDLQTime:              "2026-11-29T00:00:00Z",
			},
		},
		{
			name:   "attempt 0 is written as 1",
			letter: Letter{Reason: "malformed_json"},
			want:   map[string]string{jobheader.KeyAttempt: "1", jobheader.KeyDLQReason: "malformed_json"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Headers(tt.letter, "2026-11-29T00:00:00Z")
			seen := map[string]int{}
			for _, h := range got {
				seen[h.Key]++
			}
			for k, n := range seen {
				if n > 1 {
					t.Errorf("header %s appears %d times", k, n)
				}
			}
			carrier := jobheader.Carrier(got)
			for k, v := range tt.want {
				if g := carrier.Get(k); g != v {
					t.Errorf("header %s = %q, want %q", k, g, v)
				}
			}
		})
	}
	if string(original[2].Value) != "left by an earlier dead-lettering" {
		t.Error("Headers modified the original record's headers")
	}
}

func TestErrorHeaderIsBounded(t *testing.T) {
	long := strings.Repeat("é", 2*maxErrorBytes)
	carrier := jobheader.Carrier(Headers(Letter{Error: long}, "now"))
	got := carrier.Get(jobheader.KeyDLQError)
	if len(got) > maxErrorBytes+len("…") {
		t.Fatalf("error header is %d bytes, want at most %d", len(got), maxErrorBytes+len("…"))
	}
	if !strings.HasSuffix(got, "…") || strings.ContainsRune(got, '\uFFFD') {
		t.Fatalf("error header was not cut on a rune boundary with an ellipsis: %q", got[len(got)-8:])
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		cfg     Config
		wantErr string
	}{
		{Config{Kafka: testenv.KafkaCluster("b:9092")}, ""},
		{Config{}, "Kafka"},
		{Config{Kafka: testenv.KafkaCluster("b:9092"), BatchTimeout: -time.Second}, "BatchTimeout"},
	}
	for _, tt := range tests {
		err := tt.cfg.WithDefaults().Validate()
		if (err == nil) != (tt.wantErr == "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Validate(%+v) = %v, want error containing %q", tt.cfg, err, tt.wantErr)
		}
	}
	if got := (Config{}).WithDefaults(); got.Topic != DefaultTopic || got.BatchTimeout != DefaultBatchTimeout {
		t.Errorf("WithDefaults = %+v", got)
	}
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	w, err := New(Config{Kafka: testenv.KafkaCluster("127.0.0.1:1")}, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.letters.WithLabelValues("malformed_json").Inc()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestPublishRoundTrip writes dead letters to the real broker and reads them
// back: value and key byte for byte, reason headers attached.
func TestPublishRoundTrip(t *testing.T) {
	testenv.Integration(t, "Kafka")
	topic := testenv.NewTopic(t, 1)
	reg := prometheus.NewRegistry()
	w, err := New(Config{Kafka: testenv.Kafka(), Topic: topic}, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	letters := []Letter{
		{Key: []byte("a@x"), Value: []byte("{not json"), Topic: "mail.jobs", Offset: 7, Reason: "malformed_json", Class: "invalid"},
		{Key: []byte("b@x"), Value: []byte(`{"version":1}`), Topic: "mail.jobs", Offset: 8, Reason: "smtp_permanent", Class: "permanent", Attempt: 1},
	}
	if err := w.Publish(ctx, letters...); err != nil {
		t.Fatal(err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: testenv.KafkaBrokers(), Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	for i, want := range letters {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read dead letter %d: %v", i, err)
		}
		c := jobheader.Carrier(m.Headers)
		if string(m.Key) != string(want.Key) || string(m.Value) != string(want.Value) {
			t.Errorf("letter %d: key/value = %q/%q, want %q/%q", i, m.Key, m.Value, want.Key, want.Value)
		}
		if c.Get(jobheader.KeyDLQReason) != want.Reason || c.Get(jobheader.KeyDLQOriginalOffset) != []string{"7", "8"}[i] {
			t.Errorf("letter %d: headers %v", i, m.Headers)
		}
	}
	if got := testutil.ToFloat64(w.letters.WithLabelValues("malformed_json")); got != 1 {
		t.Errorf("records_total{reason=malformed_json} = %v, want 1", got)
	}
}
