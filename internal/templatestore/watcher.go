package templatestore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/configerr"
	"github.com/postline/postline/internal/metricreg"
)

// DefaultWatchInterval is the default for WatcherConfig.Interval.
const DefaultWatchInterval = 2 * time.Second

// LabelSource is what a Watcher reads: a *Store.
type LabelSource interface {
	LabelsVersion(ctx context.Context) (Revision, error)
	Labels(ctx context.Context, names []string) ([]Label, error)
}

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// Interval is how often the label revision is polled. Defaults to
	// DefaultWatchInterval (2s).
	Interval time.Duration
	// Tick returns a channel that delivers every interval and a function
	// that stops it. Defaults to a time.Ticker.
	Tick func(interval time.Duration) (c <-chan time.Time, stop func())
	// NowFunc is the clock of Snapshot.LoadedAt. Defaults to time.Now.
	NowFunc func() time.Time
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg WatcherConfig) WithDefaults() WatcherConfig {
	cfg.Interval = cmp.Or(cfg.Interval, DefaultWatchInterval)
	if cfg.Tick == nil {
		cfg.Tick = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	return cfg
}

// Validate reports the first invalid field of cfg (after WithDefaults).
func (cfg WatcherConfig) Validate() error {
	if cfg.Interval < time.Millisecond {
		return configerr.Errorf("Interval", "templatestore watcher config: Interval %v is shorter than 1ms", cfg.Interval)
	}
	return nil
}

// Snapshot is an immutable copy of every template's labels at one label
// revision. Its methods are safe for concurrent use.
type Snapshot struct {
	// Revision is the label revision the labels were read at (or after).
	Revision int64
	// LoadedAt is when it was read; zero for the empty snapshot a Watcher
	// holds before its first load.
	LoadedAt time.Time
	labels   map[string]map[string]Label
}

// Label returns the label of the template name, if it is set.
func (s *Snapshot) Label(name, label string) (Label, bool) {
	l, ok := s.labels[name][label]
	return l, ok
}

// Labels returns the labels of the template name, ordered by label.
func (s *Snapshot) Labels(name string) []Label {
	var out []Label
	for _, label := range []string{LabelActive, LabelCanary, LabelFallback} {
		if l, ok := s.labels[name][label]; ok {
			out = append(out, l)
		}
	}
	return out
}

// Len returns how many templates have labels.
func (s *Snapshot) Len() int { return len(s.labels) }

// Watcher keeps a Snapshot of all labels, reloading it when a poll of the
// label revision finds it changed.
type Watcher struct {
	cfg    WatcherConfig
	src    LabelSource
	logger *slog.Logger

	reloads    prometheus.Counter
	pollErrors prometheus.Counter

	mu        sync.Mutex
	snap      *Snapshot
	changed   chan struct{} // closed when snap is replaced
	ready     chan struct{} // closed after the first load
	readyOnce sync.Once
}

// NewWatcher returns a Watcher reading src. A nil logger discards logs; a nil
// reg leaves its metrics unregistered.
func NewWatcher(cfg WatcherConfig, src LabelSource, logger *slog.Logger, reg prometheus.Registerer) (*Watcher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if src == nil {
		return nil, errors.New("templatestore watcher: nil label source")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	set := metricreg.NewSet(reg, "templatestore")
	w := &Watcher{
		cfg: cfg, src: src, logger: logger,
		reloads:    set.Counter("watcher_reloads_total", "Label snapshots loaded by watchers (the first, and one per revision change seen)."),
		pollErrors: set.Counter("watcher_poll_errors_total", "Watcher polls that failed; the snapshot is kept until a poll succeeds."),
		snap:       &Snapshot{},
		changed:    make(chan struct{}),
		ready:      make(chan struct{}),
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("templatestore: register metrics: %w", err)
	}
	return w, nil
}

// Snapshot returns the current labels. It never blocks on the database.
func (w *Watcher) Snapshot() *Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.snap
}

// Changed returns a channel that is closed when the snapshot is next
// replaced. Take it before Snapshot to miss no change.
func (w *Watcher) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// Ready returns a channel closed once the first snapshot is loaded.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Run polls every Interval until ctx ends, then returns nil. It loads the
// first snapshot at once. A failed poll is counted and logged, the snapshot
// is kept, and the next poll tries again.
func (w *Watcher) Run(ctx context.Context) error {
	tick, stop := w.cfg.Tick(w.cfg.Interval)
	defer stop()
	for {
		if _, err := w.Poll(ctx); err != nil && ctx.Err() == nil {
			w.pollErrors.Inc()
			w.logger.WarnContext(ctx, "template label poll failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		}
	}
}

// Poll reads the label revision and, when it differs from the snapshot's
// (or nothing is loaded yet), reloads every label. It reports whether the
// snapshot was replaced.
func (w *Watcher) Poll(ctx context.Context) (bool, error) {
	rev, err := w.src.LabelsVersion(ctx)
	if err != nil {
		return false, err
	}
	cur := w.Snapshot()
	if !cur.LoadedAt.IsZero() && cur.Revision == rev.Revision {
		return false, nil
	}
	// The revision is read before the labels, so labels newer than it are
	// reloaded again at the next poll, never missed.
	labels, err := w.src.Labels(ctx, nil)
	if err != nil {
		return false, err
	}
	next := &Snapshot{Revision: rev.Revision, LoadedAt: w.cfg.NowFunc(), labels: make(map[string]map[string]Label)}
	for _, l := range labels {
		m := next.labels[l.Name]
		if m == nil {
			m = make(map[string]Label, 3)
			next.labels[l.Name] = m
		}
		m[l.Label] = l
	}
	w.mu.Lock()
	w.snap = next
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
	w.readyOnce.Do(func() { close(w.ready) })
	w.reloads.Inc()
	return true, nil
}
