package templatestore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/postline/postline/internal/templatestore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeLabels is a LabelSource whose revision and labels the test sets.
type fakeLabels struct {
	mu       sync.Mutex
	revision int64
	labels   []templatestore.Label
	err      error
	reads    int // Labels calls
}

func (f *fakeLabels) set(revision int64, labels ...templatestore.Label) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revision, f.labels = revision, labels
}

func (f *fakeLabels) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeLabels) LabelsVersion(context.Context) (templatestore.Revision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return templatestore.Revision{Revision: f.revision}, f.err
}

func (f *fakeLabels) Labels(_ context.Context, names []string) ([]templatestore.Label, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if names != nil {
		panic("watcher asked for some labels, not all")
	}
	return append([]templatestore.Label(nil), f.labels...), f.err
}

func (f *fakeLabels) labelReads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// manualTick is a Tick the test drives: each send on c is one tick.
type manualTick struct {
	c       chan time.Time
	stopped chan struct{}
	once    sync.Once
}

func newManualTick() *manualTick {
	return &manualTick{c: make(chan time.Time), stopped: make(chan struct{})}
}

func (m *manualTick) tick(interval time.Duration) (<-chan time.Time, func()) {
	return m.c, func() { m.once.Do(func() { close(m.stopped) }) }
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestWatcherFollowsRevision(t *testing.T) {
	src := &fakeLabels{}
	src.set(1, templatestore.Label{Name: "welcome", Label: "active", Version: 1})
	tick := newManualTick()
	reg := prometheus.NewRegistry()
	w, err := templatestore.NewWatcher(templatestore.WatcherConfig{Tick: tick.tick}, src, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Snapshot().LoadedAt.IsZero() || w.Snapshot().Len() != 0 {
		t.Fatal("snapshot before Run is not empty")
	}
	changed := w.Changed()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	waitClosed(t, w.Ready(), "the first load")
	waitClosed(t, changed, "the first change")
	snap := w.Snapshot()
	if l, ok := snap.Label("welcome", "active"); !ok || l.Version != 1 || snap.Revision != 1 {
		t.Fatalf("first snapshot: %+v %v rev %d", l, ok, snap.Revision)
	}

	// A tick without a revision change does not reload.
	changed = w.Changed()
	tick.c <- time.Now()
	tick.c <- time.Now() // the second send returns after the first poll finished
	if n := src.labelReads(); n != 1 {
		t.Errorf("labels read %d times without a revision change, want 1", n)
	}
	select {
	case <-changed:
		t.Fatal("Changed fired without a change")
	default:
	}

	// A revision change is seen at the next tick.
	src.set(2,
		templatestore.Label{Name: "welcome", Label: "active", Version: 2},
		templatestore.Label{Name: "welcome", Label: "canary", Version: 3, Percent: 5})
	tick.c <- time.Now()
	waitClosed(t, changed, "the change of revision 2")
	snap = w.Snapshot()
	if got := snap.Labels("welcome"); len(got) != 2 || got[0].Version != 2 || got[1].Percent != 5 || snap.Revision != 2 {
		t.Fatalf("snapshot after revision 2: %+v rev %d", got, snap.Revision)
	}
	if _, ok := snap.Label("other", "active"); ok {
		t.Error("snapshot has a label of a template that has none")
	}

	// A failing source keeps the snapshot and is counted.
	src.fail(errors.New("database down"))
	tick.c <- time.Now()
	tick.c <- time.Now()
	if w.Snapshot() != snap {
		t.Error("a failed poll replaced the snapshot")
	}
	if pollErrors := counter(t, reg, "postline_templatestore_watcher_poll_errors_total", ""); pollErrors < 1 {
		t.Errorf("watcher_poll_errors_total = %v, want at least 1", pollErrors)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	waitClosed(t, tick.stopped, "the ticker to stop")
}

func TestWatcherSeesStoreChangeWithinTwoIntervals(t *testing.T) {
	t.Parallel()
	_, pool := migrated(t)
	s, reg := newStore(t, pool)
	push(t, s, draft("welcome", "one"))
	push(t, s, draft("welcome", "two"))
	if _, err := s.SetLabel(t.Context(), "welcome", "active", 1, 0, "test"); err != nil {
		t.Fatal(err)
	}

	const interval = 250 * time.Millisecond
	w, err := templatestore.NewWatcher(templatestore.WatcherConfig{Interval: interval}, s, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	waitClosed(t, w.Ready(), "the first load")
	if l, ok := w.Snapshot().Label("welcome", "active"); !ok || l.Version != 1 {
		t.Fatalf("first snapshot: %+v, %v", l, ok)
	}

	changed := w.Changed()
	if _, err := s.SetLabel(t.Context(), "welcome", "active", 2, 0, "test"); err != nil {
		t.Fatal(err)
	}
	setAt := time.Now()
	waitClosed(t, changed, "the watcher to see the change")
	if took := time.Since(setAt); took > 2*interval {
		t.Errorf("the watcher saw the change after %v, more than two intervals (%v)", took, 2*interval)
	}
	if l, ok := w.Snapshot().Label("welcome", "active"); !ok || l.Version != 2 {
		t.Errorf("snapshot after the change: %+v, %v; want active 2", l, ok)
	}
	if n := counter(t, reg, "postline_templatestore_round_trips_total", "labels_version"); n < 2 {
		t.Errorf("labels_version round trips = %v, want at least 2", n)
	}
}
