package idempotency

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/postline/postline/internal/configerr"
)

// LeaseExtender extends leases in one round trip: *Store satisfies it.
type LeaseExtender interface {
	ExtendLease(ctx context.Context, ids []string, versions []int64) (lost []string, err error)
}

var _ LeaseExtender = (*Store)(nil)

// KeeperConfig configures a LeaseKeeper.
type KeeperConfig struct {
	// Lease is the lease the extender grants (the store's Config.Lease).
	// Defaults to DefaultLease (30s).
	Lease time.Duration
	// Interval is the time between extension rounds. It must be well
	// below Lease, so that one failed round does not let a lease lapse.
	// Defaults to Lease/3.
	Interval time.Duration
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg KeeperConfig) WithDefaults() KeeperConfig {
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	cfg.Interval = cmp.Or(cfg.Interval, cfg.Lease/3)
	return cfg
}

// Validate reports the first invalid field of cfg (after WithDefaults).
func (cfg KeeperConfig) Validate() error {
	switch {
	case cfg.Lease < time.Millisecond:
		return configerr.Errorf("Lease", "lease keeper config: Lease %v is shorter than 1ms", cfg.Lease)
	case cfg.Interval <= 0 || cfg.Interval >= cfg.Lease:
		return configerr.Errorf("Interval", "lease keeper config: Interval %v must be positive and shorter than Lease %v", cfg.Interval, cfg.Lease)
	}
	return nil
}

// LeaseKeeper keeps the leases of claimed jobs alive for as long as the
// process works on them. A job is claimed well before it is sent: it waits
// for a relay slot (pacing, adaptive concurrency, a busy pool) and then for
// the SMTP transaction, and under throttling that can outlast the lease; the
// reaper would then take the row over and re-publish it while the first
// worker still sends, a duplicate delivery. The owner Holds a lease when the
// claim succeeds and Drops it once the fate is recorded; every Interval
// the keeper extends every held lease in one ExtendLease round trip.
//
// Extensions do not bump the row version (see Store.ExtendLease): the
// version a job holds from its Claim stays the one Record compare-and-sets
// on, so the keeper never has to hand a new version back to the job, and a
// takeover (which does bump it) still makes both the next extension and the
// late Record lose. A lease the extension lost is no longer extended, and
// Held reports false for it. Drop after Record, not before: a lease must
// stay alive while the fate is being written; an extension racing with
// that write loses harmlessly (counted in cas_conflicts_total).
//
// A LeaseKeeper is safe for concurrent use. Run it in one goroutine for as
// long as jobs can be held; it stops with its context.
type LeaseKeeper struct {
	cfg    KeeperConfig
	ext    LeaseExtender
	logger *slog.Logger
	// newTicker is time.NewTicker's channel and stop, replaced in tests;
	// onRound, when set (tests), is called after each round of Run.
	newTicker func(time.Duration) (<-chan time.Time, func())
	onRound   func()

	mu   sync.Mutex
	held map[string]heldLease
}

// heldLease is one lease the keeper holds.
type heldLease struct {
	version int64
	lost    bool // an extension found the row no longer ours at version
}

// NewLeaseKeeper returns a keeper extending leases through ext. A nil
// logger discards logs.
func NewLeaseKeeper(cfg KeeperConfig, ext LeaseExtender, logger *slog.Logger) (*LeaseKeeper, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if ext == nil {
		return nil, errors.New("lease keeper: nil extender")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &LeaseKeeper{cfg: cfg, ext: ext, logger: logger, held: make(map[string]heldLease),
		newTicker: func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}}, nil
}

// Hold starts keeping the lease of id, claimed at version. Holding an ID
// again replaces its version (a re-claim after a hand-back).
func (k *LeaseKeeper) Hold(id string, version int64) {
	k.mu.Lock()
	k.held[id] = heldLease{version: version}
	k.mu.Unlock()
}

// Drop stops keeping the lease of id at version; a hold of another version
// (a newer claim of the same ID) is left alone.
func (k *LeaseKeeper) Drop(id string, version int64) {
	k.mu.Lock()
	if h, ok := k.held[id]; ok && h.version == version {
		delete(k.held, id)
	}
	k.mu.Unlock()
}

// Held reports whether the lease of id at version is held and was not
// lost: false means another owner may have taken the row over.
func (k *LeaseKeeper) Held(id string, version int64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	h, ok := k.held[id]
	return ok && h.version == version && !h.lost
}

// Len is the number of leases held, lost ones included until dropped.
func (k *LeaseKeeper) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.held)
}

// Run extends the held leases every Interval until ctx ends, then returns
// nil. A failed round is logged; the next one tries again.
func (k *LeaseKeeper) Run(ctx context.Context) error {
	tick, stop := k.newTicker(k.cfg.Interval)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		}
		if _, _, err := k.Extend(ctx); err != nil && ctx.Err() == nil {
			k.logger.WarnContext(ctx, "lease extension failed; trying again next round", "error", err,
				"interval", k.cfg.Interval, "lease", k.cfg.Lease)
		}
		if k.onRound != nil {
			k.onRound()
		}
	}
}

// Extend makes one round: every held lease not lost is extended in one
// round trip. It returns how many were extended and how many were lost.
func (k *LeaseKeeper) Extend(ctx context.Context) (extended, lost int, err error) {
	type pair struct {
		id      string
		version int64
	}
	k.mu.Lock()
	pairs := make([]pair, 0, len(k.held))
	for id, h := range k.held {
		if !h.lost {
			pairs = append(pairs, pair{id, h.version})
		}
	}
	k.mu.Unlock()
	if len(pairs) == 0 {
		return 0, 0, nil
	}
	// In ID order, like every write of the store, for readable logs and
	// stable tests; the statement orders its locks itself.
	slices.SortFunc(pairs, func(a, b pair) int { return cmp.Compare(a.id, b.id) })
	ids := make([]string, len(pairs))
	versions := make([]int64, len(pairs))
	for i, p := range pairs {
		ids[i], versions[i] = p.id, p.version
	}

	lostIDs, err := k.ext.ExtendLease(ctx, ids, versions)
	if err != nil {
		return 0, 0, fmt.Errorf("extend %d leases: %w", len(ids), err)
	}
	byID := make(map[string]int64, len(ids))
	for i, id := range ids {
		byID[id] = versions[i]
	}
	k.mu.Lock()
	for _, id := range lostIDs {
		// Mark only the hold this round tried: a lease dropped or re-held
		// meanwhile is not the one that was lost.
		if h, ok := k.held[id]; ok && h.version == byID[id] {
			h.lost = true
			k.held[id] = h
		}
	}
	k.mu.Unlock()
	for _, id := range lostIDs {
		k.logger.DebugContext(ctx, "held lease lost: the row changed under its owner", "message_id", id)
	}
	return len(ids) - len(lostIDs), len(lostIDs), nil
}
