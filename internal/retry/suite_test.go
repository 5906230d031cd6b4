package retry_test

import (
	"context"
	"testing"
	"time"

	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit/writertest"
	"github.com/postline/postline/internal/topic"
)

// TestWriterFollowsTheWriterRules runs the Kafka writers' suite against the
// retry tiers' writer on the local Kafka, with one tier (a copy for a tier
// it lacks is invalid); writertest runs it against the stand-in.
func TestWriterFollowsTheWriterRules(t *testing.T) {
	testenv.Integration(t, "Kafka")
	tier := retry.DefaultTiers[0]
	writertest.Run(t, writertest.Subject[retry.Copy]{
		Open: func(t *testing.T) (writertest.Writer[retry.Copy], writertest.Log) {
			tiers := retry.Tiers{tier}
			prefix := testenv.UniqueName("retry")
			specs := retry.TopicSpecs(prefix, tiers, 1)
			for i := range specs {
				specs[i].ReplicationFactor = 1
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			if err := topic.Ensure(ctx, testenv.Kafka(), specs...); err != nil {
				t.Fatalf("create the tier's topic: %v", err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := topic.Delete(ctx, testenv.Kafka(), specs[0].Name); err != nil {
					t.Errorf("delete the tier's topic: %v", err)
				}
			})
			w, err := retry.NewWriter(retry.WriterConfig{Kafka: testenv.Kafka(), Prefix: prefix, Tiers: tiers}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Close() })
			return w, writertest.TopicLog(retry.TopicName(prefix, tier))
		},
		Item:    writertest.Copy(tier),
		Invalid: writertest.Copy(tier + time.Second),
	})
}
