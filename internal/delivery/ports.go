package delivery

import (
	"context"
	"time"

	"github.com/postline/postline/internal/circuit"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/sender"
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
	// SendTo sends j to rcpts (see sender.Session.SendTo): the result says
	// which recipients the relay took and which it refused at RCPT; err is
	// why the others were not sent.
	SendTo(ctx context.Context, j *job.Job, rcpts []sender.Recipient) (sender.Result, error)
	Close() error
}

// DeadLetters publishes dead letters; it returns once they are durable.
// Safe for concurrent use.
type DeadLetters interface {
	Publish(ctx context.Context, letters ...deadletter.Letter) error
}

// Breakers are the providers' circuit breakers, shared by the fleet. Safe
// for concurrent use. Allow answers from a local cache except when it claims
// a half-open probe.
type Breakers interface {
	Allow(ctx context.Context, provider string) (circuit.Decision, error)
	Report(ctx context.Context, provider string, o circuit.Outcome, class string) error
	// AnyAllowed reports whether some provider can take mail now.
	AnyAllowed() bool
	// NextProbeAt is the earliest time an open circuit may half-open.
	NextProbeAt() (time.Time, bool)
	// Changed delivers a value whenever the breakers' state changes.
	Changed() <-chan struct{}
}

// Retries publishes retry copies to the delay topics; it returns once they
// are durable. Safe for concurrent use.
type Retries interface {
	Publish(ctx context.Context, copies ...retry.Copy) error
}

// Group is the consumer group as the lag monitor last read it.
type Group interface {
	// Lag is the whole group's lag of the jobs topic, in records.
	Lag() (total int64, perPartition map[int]int64, at time.Time)
	// SendingMembers is the number of live members of the group that have
	// mail to send (all of them when the group is caught up): the workers
	// sharing each relay's rate.
	SendingMembers() int
}

// Pauser is implemented by sources that can stop handing out records while
// keeping their group membership (consumer.Consumer does).
type Pauser interface {
	Pause()
	Resume()
}

var (
	_ Store       = (*idempotency.Store)(nil)
	_ DeadLetters = (*deadletter.Writer)(nil)
	_ Source      = (*consumer.Consumer)(nil)
	_ Pauser      = (*consumer.Consumer)(nil)
	_ Breakers    = (*circuit.Breakers)(nil)
	_ Retries     = (*retry.Writer)(nil)
	_ Group       = (*consumer.LagMonitor)(nil)
	_ Session     = (*sender.Session)(nil)

	_ RecipientStates = (*idempotency.Store)(nil)

	// The classification reads the reply and stage of the sender's errors.
	_ failure.Reply  = (*sender.Error)(nil)
	_ failure.Staged = (*sender.Error)(nil)
)
