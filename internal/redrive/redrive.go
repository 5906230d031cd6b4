package redrive

import (
	"context"
	"errors"
	"math/rand/v2"

	"github.com/segmentio/kafka-go"
	"golang.org/x/time/rate"
)

// DefaultBatch is how many dead letters a plan checks per database round
// trip, and the most a run resets and publishes at once.
const DefaultBatch = 500

// Config wires a Redriver.
type Config struct {
	// Source is the dead-letter topic. Required.
	Source Source
	// Store is the message rows. Run requires it; Plan reads the rows
	// through it when set, and otherwise counts every valid job as one it
	// would re-drive (rows not checked).
	Store Store
	// Lists is the suppression lists; nil leaves suppressions alone.
	Lists Lists
	// Publisher writes to the jobs topic. Run requires it.
	Publisher Publisher
	// Events writes the redriven events; nil writes none (postctl dlq
	// replay, which predates them).
	Events Events
	// Batch is DefaultBatch when 0.
	Batch int
	// Clock is the real clock when nil.
	Clock Clock
}

// Summary is what a Plan or a Run found and did.
type Summary struct {
	// Matched is the dead letters the filter selected.
	Matched int `json:"matched"`
	// Redriven is the records published to the jobs topic; for a plan,
	// those a run would publish now.
	Redriven int `json:"redriven"`
	// SkippedNotReplayable is the selected jobs whose row was not failed
	// or dead (sent, pending after an earlier re-drive, on its way), or
	// whose Message-ID came earlier in the same selection.
	SkippedNotReplayable int `json:"skipped_not_replayable"`
	// SkippedInvalid is the selected records that are not valid jobs.
	SkippedInvalid int `json:"skipped_invalid"`
	// Unsuppressed is the suppression entries lifted: those the re-driven
	// failures had added.
	Unsuppressed int `json:"unsuppressed"`
	// Events is the redriven events written (one per recipient).
	Events int `json:"events"`
	// DryRun says this is a plan: nothing was changed.
	DryRun bool `json:"dry_run,omitempty"`
}

// Redriver selects and re-drives dead letters. It is safe for concurrent
// use: each call keeps its own state (the console may plan while a run is
// under way; two runs of one selection send each mail once, by the rows).
type Redriver struct {
	cfg Config
}

// New returns a Redriver for cfg.
func New(cfg Config) (*Redriver, error) {
	if cfg.Source == nil {
		return nil, errors.New("redrive: Config.Source is required")
	}
	if cfg.Batch < 0 {
		return nil, errors.New("redrive: Config.Batch must not be negative")
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	return &Redriver{cfg: cfg}, nil
}

// each calls fn for every dead letter f selects, up to its limit.
func (r *Redriver) each(ctx context.Context, f Filter, fn func(letter) error) error {
	n := 0
	return r.cfg.Source.Scan(ctx, func(m kafka.Message) error {
		l := read(m)
		if !f.Match(l.DeadLetter) {
			return nil
		}
		n++
		if err := fn(l); err != nil {
			return err
		}
		if f.Limit > 0 && n >= f.Limit {
			return ErrStop
		}
		return nil
	})
}

// List calls fn for every dead letter f selects, in scan order.
func (r *Redriver) List(ctx context.Context, f Filter, fn func(DeadLetter) error) error {
	return r.each(ctx, f, func(l letter) error { return fn(l.DeadLetter) })
}

// Count returns how many dead letters f selects.
func (r *Redriver) Count(ctx context.Context, f Filter) (int, error) {
	n := 0
	err := r.each(ctx, f, func(letter) error { n++; return nil })
	return n, err
}

// Plan is a dry run: it counts what f selects and how many of those a Run
// would re-drive now, reading the rows (Config.Store) in batches without
// changing them, and changes nothing anywhere.
func (r *Redriver) Plan(ctx context.Context, f Filter) (Summary, error) {
	s := Summary{DryRun: true}
	seen := make(map[string]bool)
	var batch []string
	check := func() error {
		if len(batch) == 0 {
			return nil
		}
		defer func() { batch = batch[:0] }()
		if r.cfg.Store == nil {
			s.Redriven += len(batch)
			return nil
		}
		statuses, err := r.cfg.Store.Statuses(ctx, batch)
		if err != nil {
			return err
		}
		for _, id := range batch {
			if st, ok := statuses[id]; !ok || st.Replayable() {
				s.Redriven++
			} else {
				s.SkippedNotReplayable++
			}
		}
		return nil
	}
	err := r.each(ctx, f, func(l letter) error {
		s.Matched++
		switch {
		case l.jobErr != nil:
			s.SkippedInvalid++
		case seen[l.job.MessageID]:
			s.SkippedNotReplayable++
		default:
			seen[l.job.MessageID] = true
			if batch = append(batch, l.job.MessageID); len(batch) >= r.cfg.Batch {
				return check()
			}
		}
		return nil
	})
	if err == nil {
		err = check()
	}
	return s, err
}

// Run re-drives the dead letters f selects, at most o.Rate a second: for
// each valid job whose Message-ID is new to the run, its row is reopened
// (only a failed or dead row, or none, is); for those reopened, the
// suppressions their failure added are lifted, the redriven events are
// written and the records are published to the jobs topic as first
// attempts. It returns what it did, also when it fails part way.
func (r *Redriver) Run(ctx context.Context, f Filter, o Options) (Summary, error) {
	if err := o.Validate(nil); err != nil {
		return Summary{}, err
	}
	if r.cfg.Store == nil || r.cfg.Publisher == nil {
		return Summary{}, errors.New("redrive: Run needs Config.Store and Config.Publisher")
	}
	lim := rate.NewLimiter(rate.Limit(o.Rate), burst(o.Rate, r.cfg.Batch))
	w := &runner{cfg: r.cfg, opts: o, pace: pacer{lim: lim, clock: r.cfg.Clock}, seen: make(map[string]bool),
		// A Message-ID without a row has no life yet (its claim draws
		// one); its redriven events hash this run's instead, so they are
		// new to every run.
		runLife: 1 + rand.Int64N(1<<53)}
	var batch []letter
	err := r.each(ctx, f, func(l letter) error {
		w.sum.Matched++
		if batch = append(batch, l); len(batch) < lim.Burst() {
			return nil
		}
		err := w.redrive(ctx, batch)
		batch = batch[:0]
		return err
	})
	if err == nil {
		err = w.redrive(ctx, batch)
	}
	return w.sum, err
}
