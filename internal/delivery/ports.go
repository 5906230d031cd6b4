package delivery

import (
	"context"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/job"
)

// Source hands out consumed records and takes them back when finished. The
// source owns offset commits: the pipeline calls MarkDone exactly once per
// record whose outcome is durably recorded, from any goroutine, in any order.
// Messages must be closed by the source when it stops.
type Source interface {
	Messages() <-chan consumer.Message
	MarkDone(consumer.Message)
}

// Store is the idempotency store. Each call is one round trip for the whole
// batch; results are in input order. Safe for concurrent use.
type Store interface {
	Claim(ctx context.Context, reqs []idempotency.ClaimRequest) ([]idempotency.Claim, error)
	Record(ctx context.Context, outs []idempotency.Outcome) (lost []string, err error)
	RecordRejected(ctx context.Context, rejs []idempotency.Rejection) error
	NoteConflicts(ctx context.Context, ids []string) error
}

// Session is one SMTP connection. A session is used by one goroutine only.
type Session interface {
	Send(ctx context.Context, j *job.Job) error
	Close() error
}

// DeadLetters publishes dead letters; it returns once they are durable.
// Safe for concurrent use.
type DeadLetters interface {
	Publish(ctx context.Context, letters ...deadletter.Letter) error
}

// SendError is what the pipeline needs to know about a failed send.
type SendError interface {
	error
	Permanent() bool
}

var (
	_ Store       = (*idempotency.Store)(nil)
	_ DeadLetters = (*deadletter.Writer)(nil)
	_ Source      = (*consumer.Consumer)(nil)
)
