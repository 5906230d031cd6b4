package webhook

import (
	"context"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/event"
)

// EventScanner yields the records of the events topic from a replay's
// From on: a redrive.TopicSource with From set.
type EventScanner interface {
	Scan(ctx context.Context, fn func(kafka.Message) error) error
}

// SelectEvents reads the events src yields and returns, as pending
// deliveries for f's endpoint, those whose time, type and tenant f
// selects; records that are not events are passed over. What Requeue
// queues again for a replay from the topic (postctl webhooks replay
// --source events, the console).
func SelectEvents(ctx context.Context, src EventScanner, f ReplayFilter) ([]Pending, error) {
	var picked []Pending
	err := src.Scan(ctx, func(m kafka.Message) error {
		e, err := event.Decode(m.Value)
		if err != nil || !f.Matches(&e) {
			return nil
		}
		picked = append(picked, Pending{Endpoint: f.Endpoint, EventID: e.ID, Type: e.Type, Tenant: e.Tenant,
			EventAt: e.At, Payload: m.Value, Topic: m.Topic, Partition: m.Partition, Offset: m.Offset})
		return nil
	})
	return picked, err
}
