package delivery

import (
	"context"
	"errors"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/circuit"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/unsubscribe"
	"github.com/postline/postline/job"
)

// The pipeline's ports: every interface it talks to the outside through
// (Kafka, PostgreSQL, the relays, the template store), in the order a job
// meets them, each under the stage that calls it. The pipeline declares
// them; Deps hands it the implementations, which the assertions at the end
// tie to this module's own.

// Intake (pipeline.go: Run, intake, pauseWhileNoRelay) reads records
// from a Source and pauses it while every circuit is open.

// Source hands out consumed records and takes them back when finished. The
// source owns offset commits: the pipeline calls MarkDone exactly once per
// record whose fate is durably recorded, from any goroutine, in any order.
// Messages must be closed by the source when it stops.
type Source interface {
	Messages() <-chan consumer.Message
	MarkDone(consumer.Message)
}

// Pauser is implemented by sources that can stop handing out records while
// keeping their group membership (consumer.Consumer does).
type Pauser interface {
	Pause()
	Resume()
}

// Claim (pipeline.go: claim; recipients.go: loadRecipients, suppress)
// claims the Message-ID, keeps its lease, and reads where its recipients
// stand.

// Store is the idempotency store. Each call is one round trip for the whole
// batch; results are in input order. Safe for concurrent use.
type Store interface {
	Claim(ctx context.Context, reqs []idempotency.ClaimRequest) ([]idempotency.Claim, error)
	Record(ctx context.Context, outs []idempotency.Fate) (lost []string, err error)
	RecordRejected(ctx context.Context, rejs []idempotency.Rejection) error
	NoteConflicts(ctx context.Context, ids []string) error
}

// Leases keeps the leases of claimed jobs alive from the claim until their
// fate is recorded, however long they wait for a relay slot and send
// (idempotency.LeaseKeeper). Safe for concurrent use.
type Leases interface {
	Hold(messageID string, version int64)
	Drop(messageID string, version int64)
}

// RecipientStates reads what earlier attempts and reports decided for the
// recipients of mails (idempotency.Store does). Safe for concurrent use.
type RecipientStates interface {
	Recipients(ctx context.Context, messageIDs []string) (map[string][]idempotency.Recipient, error)
}

// Suppressions are the suppression lists. Safe for concurrent use.
type Suppressions interface {
	// Suppressed returns the keys that are on a list, with the list
	// entry's reason.
	Suppressed(ctx context.Context, keys []SuppressionKey) (map[SuppressionKey]string, error)
	// Suppress adds hard-bounced addresses to the lists.
	Suppress(ctx context.Context, entries []Suppression) error
}

// SuppressionKey names one address on the suppression lists of a tenant's
// stream. Address is lower case.
type SuppressionKey struct {
	Tenant, Stream, Address string
}

// Suppression is an address to add to a suppression list after the relay
// refused it for good.
type Suppression struct {
	Key       SuppressionKey
	MessageID string // the mail it came from
	Status    string // the refusal's enhanced status
}

// Send (send.go, compose.go, unsubscribe.go) renders template jobs,
// picks a relay by its circuit and the group's load, and sends on one of
// its sessions.

// Composer renders template jobs: a job that names a template instead of
// carrying its bodies. Safe for concurrent use.
type Composer interface {
	// Compose renders j's template with its data and locale. An error
	// that says ComposeUnavailable (the template store cannot be read)
	// is retried; any other error means no version of the template could
	// render the job, and it is dead-lettered as render_failed.
	Compose(ctx context.Context, j *job.Job) (Composed, error)
}

// Composed is a rendered template job.
type Composed struct {
	Subject, Text, HTML string
	// Template is the version that rendered it, and why that one.
	Template event.TemplateUse
}

// ErrComposeUnavailable marks a composer error that retrying can mend:
// the template store did not answer.
var ErrComposeUnavailable = errors.New("delivery: the template store is unavailable")

// Breakers are the relays' circuit breakers, shared by the fleet. Safe
// for concurrent use. Allow answers from a local cache except when it claims
// a half-open probe.
type Breakers interface {
	Allow(ctx context.Context, relay string) (circuit.Decision, error)
	Report(ctx context.Context, relay string, o circuit.SendResult, class string) error
	// AnyAllowed reports whether some relay can take mail now.
	AnyAllowed() bool
	// NextProbeAt is the earliest time an open circuit may half-open.
	NextProbeAt() (time.Time, bool)
	// Changed delivers a value whenever the breakers' state changes.
	Changed() <-chan struct{}
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

// Session is one SMTP connection. A session is used by one goroutine only.
type Session interface {
	// SendTo sends j to rcpts (see sender.Session.SendTo): the result says
	// which recipients the relay took and which it refused at RCPT; err is
	// why the others were not sent.
	SendTo(ctx context.Context, j *job.Job, rcpts []sender.Recipient) (sender.Result, error)
	Close() error
}

// ChainingSession is a Session that can write the next job's envelope
// behind a message (sender.Session.SendToThen); sessions without it send
// one job at a time.
type ChainingSession interface {
	SendToThen(ctx context.Context, j *job.Job, rcpts []sender.Recipient, then sender.Then) (sender.Result, bool, error)
}

// ReturnPaths gives each recipient its own return path, so that reports
// about it name it (returnpath.Signer does).
type ReturnPaths interface {
	Address(messageID string, idx int) string
}

// Unsubscribes give a recipient's copy the URIs of its one-click
// unsubscribe headers (unsubscribe.Links does): nil when none can be made
// for it. Safe for concurrent use.
type Unsubscribes interface {
	URIs(t unsubscribe.Token) []string
}

// Settle (record.go) writes what each fate writes: dead letters, retry
// copies and events here, rows through Store and hard bounces through
// Suppressions.

// DeadLetters publishes dead letters; it returns once they are durable.
// Safe for concurrent use.
type DeadLetters interface {
	Publish(ctx context.Context, letters ...deadletter.Letter) error
}

// Retries publishes retry copies to the delay topics; it returns once they
// are durable. Safe for concurrent use.
type Retries interface {
	Publish(ctx context.Context, copies ...retry.Copy) error
}

// Events publishes the events of recorded fates; it returns once they
// are durable. Safe for concurrent use.
type Events interface {
	Publish(ctx context.Context, events ...event.Event) error
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
	_ Unsubscribes    = (*unsubscribe.Links)(nil)

	// The classification reads the reply and stage of the sender's errors.
	_ failure.Reply  = (*sender.Error)(nil)
	_ failure.Staged = (*sender.Error)(nil)
)
