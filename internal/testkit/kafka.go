package testkit

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// FakeKafka starts an in-process, single-broker Kafka (franz-go's kfake)
// with opts (kfake.SeedTopics to create topics, for example), closes it
// when the test ends, and returns its broker addresses. Unlike testenv's
// real broker it needs no running service and is not skipped under -short.
func FakeKafka(t testing.TB, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("start fake kafka: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}
