package eventstream_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/eventstream"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit/writertest"
)

// TestWriterFollowsTheWriterRules runs the Kafka writers' suite against the
// events writer on the local Kafka; writertest runs it against the
// stand-in.
func TestWriterFollowsTheWriterRules(t *testing.T) {
	testenv.Integration(t, "Kafka")
	writertest.Run(t, writertest.Subject[event.Event]{
		Open: func(t *testing.T) (writertest.Writer[event.Event], writertest.Log) {
			topic := testenv.NewTopic(t, 1)
			w, err := eventstream.New(eventstream.Config{Kafka: testenv.Kafka(), Topic: topic}, prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Close() })
			return w, writertest.TopicLog(topic)
		},
		Item:    writertest.Event,
		Invalid: writertest.InvalidEvent,
	})
}
