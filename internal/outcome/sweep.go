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
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/returnpath"
)

// Defaults of SweepConfig.
const (
	DefaultSweepInterval = time.Minute
	DefaultSweepBatch    = 500
)

// SweepStore is the store side of the unconfirmed sweep (idempotency.Store).
type SweepStore interface {
	DueUnconfirmed(ctx context.Context, limit int) ([]idempotency.Recipient, error)
	MarkUnconfirmed(ctx context.Context, messageIDs []string) (int, error)
}

// SweepConfig configures a Sweeper.
type SweepConfig struct {
	// Interval is how often the sweep looks for mail past its window.
	// Defaults to DefaultSweepInterval (1m).
	Interval time.Duration
	// Batch is how many recipients one pass handles at most; a full pass
	// is followed by another at once; a mail with more recipients than
	// Batch is still handled whole in one pass. Defaults to
	// DefaultSweepBatch (500).
	Batch int
	// NowFunc is the clock of events. Defaults to time.Now.
	NowFunc func() time.Time
}

// Sweeper marks mail whose confirmation window passed with recipients
// still unresolved as unconfirmed, with an event per such recipient, so
// that a person looks at it. Every worker runs one; two sweeping the same
// mail at once write the same events (same IDs) and one of them marks it.
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
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	if cfg.Interval <= 0 || cfg.Batch < 1 {
		return nil, fmt.Errorf("outcome: sweep Interval %v and Batch %d must be positive", cfg.Interval, cfg.Batch)
	}
	if store == nil || events == nil {
		return nil, errors.New("outcome: the sweep needs a store and events")
	}
	marked := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "postline", Subsystem: "outcome", Name: "unconfirmed_total",
		Help: "Mail marked unconfirmed: its confirmation window passed with recipients no report resolved.",
	})
	if err := reg.Register(marked); err != nil {
		return nil, fmt.Errorf("outcome: register metrics: %w", err)
	}
	return &Sweeper{cfg: cfg, logger: logger, store: store, events: events, marked: marked}, nil
}

// Run sweeps every Interval until ctx ends. A failed pass is logged and
// tried again at the next tick.
func (s *Sweeper) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		for {
			n, err := s.Sweep(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.logger.Warn("unconfirmed sweep failed; trying again later", "error", err)
				break
			}
			if n < s.cfg.Batch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sweep makes one pass and returns how many recipients it found.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	limit := s.cfg.Batch
	due, err := s.store.DueUnconfirmed(ctx, limit)
	if err != nil || len(due) == 0 {
		return 0, err
	}
	// A full pass of one mail's recipients may not hold all of them, and
	// a mail is marked only once all of them had their events: read that
	// mail whole (it has fewer than returnpath.MaxRecipients recipients).
	// Without this a Batch below a mail's recipient count would mark it
	// with some recipients never given an event.
	if len(due) == limit && limit < returnpath.MaxRecipients && due[0].MessageID == due[len(due)-1].MessageID {
		limit = returnpath.MaxRecipients
		if due, err = s.store.DueUnconfirmed(ctx, limit); err != nil || len(due) == 0 {
			return 0, err
		}
	}
	now := s.cfg.NowFunc().UTC()
	events := make([]event.Event, len(due))
	var ids []string
	seen := map[string]bool{}
	for i, r := range due {
		events[i] = event.Event{Schema: event.Schema, ID: event.NewLifeID(r.MessageID, r.Life, r.Index, event.Unconfirmed, 0),
			Type: event.Unconfirmed, At: now, MessageID: r.MessageID, Tenant: r.Tenant, Stream: streamOf(r),
			Recipient: r.Address, RecipientIndex: r.Index, Attempt: r.Attempt, Provider: r.Provider, Metadata: r.Metadata}
		if !seen[r.MessageID] {
			seen[r.MessageID] = true
			ids = append(ids, r.MessageID)
		}
	}
	// A batch cut in the middle of a mail's recipients: the mail is
	// marked once all of them had their events, in the next pass.
	if len(due) == limit && len(ids) > 1 {
		last := due[len(due)-1].MessageID
		ids = ids[:len(ids)-1]
		for len(events) > 0 && events[len(events)-1].MessageID == last {
			events = events[:len(events)-1]
		}
	}
	if err := s.events.Publish(ctx, events...); err != nil {
		return 0, fmt.Errorf("unconfirmed sweep: publish %d events: %w", len(events), err)
	}
	n, err := s.store.MarkUnconfirmed(ctx, ids)
	if err != nil {
		return 0, fmt.Errorf("unconfirmed sweep: %w", err)
	}
	s.marked.Add(float64(n))
	if n > 0 {
		s.logger.Info("mail unconfirmed after its window", "mails", n, "recipients", len(events))
	}
	return len(due), nil
}
