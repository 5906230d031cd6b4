package testenv

import (
	"cmp"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/postline/postline/internal/backoff"
	"github.com/postline/postline/internal/topic"
)

// NewTopic creates a uniquely named topic with partitions partitions on the
// test Kafka cluster, waits until it is usable, and deletes it when the test
// ends. The topic allows records of topic.MaxMessageBytes, like the jobs
// topic. It skips the test under -short.
func NewTopic(t testing.TB, partitions int) string {
	t.Helper()
	Integration(t, "Kafka")
	name := UniqueName("test")
	brokers := KafkaBrokers()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := topic.Ensure(ctx, Kafka(), topic.Spec{
		Name:              name,
		Partitions:        partitions,
		ReplicationFactor: 1,
		Configs:           map[string]string{"max.message.bytes": strconv.Itoa(topic.MaxMessageBytes)},
	})
	if err != nil {
		t.Fatalf("create test topic %s on %v: %v", name, brokers, err)
	}
	t.Cleanup(func() {
		// A busy broker may answer a deletion with an error that says
		// nothing about the test (Broker Not Available while the
		// controller is slow): try again before calling it a failure.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var last error
		err := backoff.Policy{First: 200 * time.Millisecond, Max: 2 * time.Second}.Do(ctx, func() error {
			last = topic.Delete(ctx, Kafka(), name)
			return last
		})
		if err != nil {
			t.Errorf("delete test topic %s: %v", name, cmp.Or(last, err))
		}
	})
	return name
}
