package kafkaclient_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/kafkaconn"
)

// A TopicWriter publishes records as they are given, bad input included:
// the reaper and postctl's replay copy records the worker validates.
func TestTopicWriterPublishesRaw(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "jobs.raw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	brokers := fake.ListenAddrs()
	c, err := kafkaclient.New(kafkaconn.Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TopicWriter(kafkaclient.WriterConfig{Limits: map[string]int{"jobs.raw": 1 << 20}}); err == nil || !strings.Contains(err.Error(), "Topic") {
		t.Errorf("TopicWriter without a topic: %v", err)
	}
	p, err := c.TopicWriter(kafkaclient.WriterConfig{Topic: "jobs.raw", Limits: map[string]int{"jobs.raw": 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Topic() != "jobs.raw" {
		t.Fatalf("Topic() = %q", p.Topic())
	}
	msgs := []kafka.Message{
		{Key: []byte("k"), Value: []byte("{not json"), Headers: []kafka.Header{{Key: "h", Value: []byte("v")}}},
		{Value: []byte(`{"version":2}`)},
	}
	if err := p.PublishRaw(t.Context(), msgs); err != nil {
		t.Fatal(err)
	}
	if err := p.PublishRaw(t.Context(), nil); err != nil {
		t.Fatalf("PublishRaw of nothing: %v", err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("jobs.raw"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	values := map[string]bool{}
	for len(values) < len(msgs) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("got %d of %d records before the deadline", len(values), len(msgs))
		}
		if errs := fs.Errors(); len(errs) > 0 {
			t.Fatalf("fetch: %v", errs)
		}
		for _, r := range fs.Records() {
			values[string(r.Value)] = true
		}
	}
	if !values["{not json"] || !values[`{"version":2}`] {
		t.Fatalf("raw values not published as given: %v", values)
	}
}
