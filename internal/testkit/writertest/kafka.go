package writertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/testenv"
)

// How a TopicLog reads: it waits up to logWait for its record, asking the
// broker for more every pollWait.
const (
	logWait  = 30 * time.Second
	pollWait = 100 * time.Millisecond
)

// TopicLog returns the log of partition 0 of topic on the test Kafka
// (testenv), read from its first record on each call: for a writer whose
// records go to a one-partition topic.
func TopicLog(topic string) Log {
	return func(t *testing.T, until string) []string {
		t.Helper()
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: testenv.KafkaBrokers(), Topic: topic, Partition: 0,
			MaxWait: pollWait})
		defer r.Close()
		ctx, cancel := context.WithTimeout(t.Context(), logWait)
		defer cancel()
		var out []string
		for {
			m, err := r.ReadMessage(ctx)
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("no record keyed %q on %s within %v; read %v", until, topic, logWait, out)
			}
			if err != nil {
				t.Fatalf("read %s: %v", topic, err)
			}
			out = append(out, string(m.Key))
			if string(m.Key) == until {
				return out
			}
		}
	}
}
