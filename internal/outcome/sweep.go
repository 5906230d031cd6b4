package outcome

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/configerr"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/metricreg"
)

// Defaults of SweepConfig.
const (
	DefaultSweepInterval = time.Minute
	DefaultSweepBatch    = 500
)

// SweepStore is the store side of the unconfirmed sweep
// (idempotency.Store). SweepUnconfirmed makes one pass in one transaction:
// it takes the fleet's turn (or reports it skipped), reads what came due
// since the last pass, hands the accepted recipients of that mail to
// publish, marks the mail and moves on; an error from publish leaves
// everything for the next pass. It is safe for concurrent use.
type SweepStore interface {
	SweepUnconfirmed(ctx context.Context, sw idempotency.UnconfirmedSweep,
		publish func(ctx context.Context, due []idempotency.Recipient) error) (idempotency.UnconfirmedPass, error)
}

var _ SweepStore = (*idempotency.Store)(nil)

// SweepConfig configures a Sweeper.
type SweepConfig struct {
	// Interval is how often the sweep looks for mail past its window.
	// Defaults to DefaultSweepInterval (1m).
	Interval time.Duration
	// Batch is how many due recipients one pass reads at most; a full pass
	// is followed by another at once; the mail a pass ends in is still
	// handled whole. Defaults to DefaultSweepBatch (500).
	Batch int
	// LateGrace is how long after a relay took a recipient past its mail's
	// window the sweep waits before reading it (see
	// idempotency.UnconfirmedSweep). Defaults to
	// idempotency.DefaultLateGrace (5m).
	LateGrace time.Duration
	// NowFunc is the clock of events. Defaults to time.Now.
	NowFunc func() time.Time
}

// Sweeper marks mail whose confirmation window passed with recipients
// still unresolved as unconfirmed, with an event per such recipient, so
// that a person looks at it. Every worker runs one, and one pass of the
// fleet's sweepers at a time does the work: the others' passes skip while
// it holds the turn. Each pass reads what came due since the last one, so
// its cost follows the mail that came due, not the mail marked before.
type Sweeper struct {
	cfg    SweepConfig
	logger *slog.Logger
	store  SweepStore
	events Events
	marked prometheus.Counter
}

// NewSweeper returns a Sweeper.
func NewSweeper(cfg SweepConfig, logger *slog.Logger, reg prometheus.Registerer, store SweepStore, events Events) (*Sweeper, error) {
	cfg.Interval = cmp.Or(cfg.Interval, DefaultSweepInterval)
	cfg.Batch = cmp.Or(cfg.Batch, DefaultSweepBatch)
	cfg.LateGrace = cmp.Or(cfg.LateGrace, idempotency.DefaultLateGrace)
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	if cfg.Interval <= 0 || cfg.Batch < 1 || cfg.LateGrace < 0 {
		return nil, configerr.Errorf("Interval", "outcome: sweep Interval %v and Batch %d must be positive, LateGrace %v not negative",
			cfg.Interval, cfg.Batch, cfg.LateGrace)
	}
	if store == nil || events == nil {
		return nil, errors.New("outcome: the sweep needs a store and events")
	}
	set := metricreg.NewExclusiveSet(reg, "outcome")
	marked := set.Counter("unconfirmed_total", "Mail marked unconfirmed: its confirmation window passed with recipients no report resolved.")
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("outcome: register metrics: %w", err)
	}
	return &Sweeper{cfg: cfg, logger: logger, store: store, events: events, marked: marked}, nil
}

// Run sweeps every Interval until ctx ends. A failed pass is logged and
// tried again at the next tick; a pass skipped because another worker's
// holds the turn waits for the next tick too.
func (s *Sweeper) Run(ctx context.Context) error {
	return runPasses(ctx, s.cfg.Interval, s.logger, "unconfirmed sweep failed; trying again later",
		func(ctx context.Context) (bool, error) {
			pass, err := s.pass(ctx)
			return pass.More, err
		})
}

// Sweep makes one pass and returns how many recipients it found: 0 when
// another worker's pass held the turn.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	pass, err := s.pass(ctx)
	return pass.Recipients, err
}

func (s *Sweeper) pass(ctx context.Context) (idempotency.UnconfirmedPass, error) {
	pass, err := s.store.SweepUnconfirmed(ctx, idempotency.UnconfirmedSweep{Limit: s.cfg.Batch, LateGrace: s.cfg.LateGrace}, s.publish)
	if err != nil {
		return idempotency.UnconfirmedPass{}, fmt.Errorf("unconfirmed sweep: %w", err)
	}
	if !pass.Swept {
		s.logger.Debug("unconfirmed sweep skipped: another pass holds the turn")
		return pass, nil
	}
	s.marked.Add(float64(pass.Marked))
	if pass.Marked > 0 {
		s.logger.Info("mail unconfirmed after its window", "mails", pass.Marked, "recipients", pass.Recipients)
	}
	return pass, nil
}

// publish writes an unconfirmed event for each recipient of due, before the
// store marks their mail.
func (s *Sweeper) publish(ctx context.Context, due []idempotency.Recipient) error {
	now := s.cfg.NowFunc().UTC()
	events := make([]event.Event, len(due))
	for i, r := range due {
		events[i] = event.Event{Schema: event.Schema, ID: event.NewLifeID(r.MessageID, r.Life, r.Index, event.Unconfirmed, 0),
			Type: event.Unconfirmed, At: now, MessageID: r.MessageID, Tenant: r.Tenant, Stream: streamOf(r),
			Recipient: r.Address, RecipientIndex: r.Index, Attempt: r.Attempt, Provider: r.Provider, Metadata: r.Metadata}
	}
	if err := s.events.Publish(ctx, events...); err != nil {
		return fmt.Errorf("publish %d events: %w", len(events), err)
	}
	return nil
}
