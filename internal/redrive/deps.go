package redrive

import (
	"context"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/backoff"
	"github.com/postline/postline/internal/eventstream"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/suppression"
)

// Store is the part of the message rows a re-drive reads and resets.
type Store interface {
	// Statuses reads rows without changing them (a plan).
	Statuses(ctx context.Context, messageIDs []string) (map[string]idempotency.Status, error)
	// Reopen resets failed and dead rows (and IDs without a row) to
	// pending, each with a new life, and returns those it reset.
	Reopen(ctx context.Context, resets []idempotency.Reset) ([]idempotency.Reopened, error)
}

// Lists is the part of the suppression lists a re-drive changes.
type Lists interface {
	LiftFromMessages(ctx context.Context, messageIDs []string, source string) (int, error)
}

// Publisher writes records to the jobs topic as they are.
type Publisher interface {
	PublishRaw(ctx context.Context, msgs []kafka.Message) error
}

// Events writes events to the events topic.
type Events interface {
	Publish(ctx context.Context, events ...event.Event) error
}

// Clock is the time a re-drive paces itself by.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx ends (returning its error).
	Sleep(ctx context.Context, d time.Duration) error
}

var (
	_ Store     = (*idempotency.Store)(nil)
	_ Lists     = (*suppression.Store)(nil)
	_ Publisher = (*kafkaclient.TopicWriter)(nil)
	_ Events    = (*eventstream.Writer)(nil)
	_ Clock     = realClock{}
)

type realClock struct{}

func (realClock) Now() time.Time                                   { return time.Now() }
func (realClock) Sleep(ctx context.Context, d time.Duration) error { return backoff.Sleep(ctx, d) }
