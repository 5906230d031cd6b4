package reaper

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// testRetention is the retention the purge tests configure.
const testRetention = 2 * time.Hour

func TestPurgeInBatchesUntilAShortOne(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name       string
		store      *fakeStore
		wantPurged int
		wantCalls  []int
		wantErr    error
	}{
		{"nothing to purge: one statement", &fakeStore{}, 0, []int{3}, nil},
		{"a backlog goes in batches", &fakeStore{terminal: 7}, 7, []int{3, 3, 3}, nil},
		{"an exact multiple needs one empty statement", &fakeStore{terminal: 6}, 6, []int{3, 3, 3}, nil},
		{"a failed statement fails the pass", &fakeStore{terminal: 7, purgeErr: boom}, 0, []int{3}, boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(Config{Retention: testRetention, PurgeBatch: 3, PurgePause: time.Millisecond}, tt.store, &fakePub{}, nil, prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			n, err := r.Once(t.Context())
			if n != 0 || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Once() = %d, %v; want 0 recovered, %v", n, err, tt.wantErr)
			}
			if !slices.Equal(tt.store.purges, tt.wantCalls) {
				t.Errorf("purge statements with limits %v, want %v", tt.store.purges, tt.wantCalls)
			}
			if got := testutil.ToFloat64(r.purged); got != float64(tt.wantPurged) {
				t.Errorf("purged_total = %v, want %d", got, tt.wantPurged)
			}
		})
	}
}

func TestPurgeStopsAfterAnInterval(t *testing.T) {
	// A backlog far larger than one pass: statements stop once the next
	// pause would end past PurgeInterval, and the rest waits for the next
	// pass.
	store := &fakeStore{terminal: 1 << 30}
	r, err := New(Config{PurgeInterval: 50 * time.Millisecond, Retention: testRetention, PurgeBatch: 1, PurgePause: 20 * time.Millisecond},
		store, &fakePub{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n, err := r.Purge(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n < 1 || n > 3 || time.Since(start) > time.Second {
		t.Errorf("Purge deleted %d rows in %v; want 1 to 3 statements within the 50ms interval", n, time.Since(start))
	}
}

// topicPub is a publisher that reports its topic, as *job.Publisher does.
type topicPub struct {
	fakePub
	topic string
}

func (p *topicPub) Topic() string { return p.topic }

// TestLogsNameThePublishersTopic is the regression test of the reaper
// logging the default jobs topic whatever the worker publishes to.
func TestLogsNameThePublishersTopic(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	store := &fakeStore{stuck: stuckRows("a")}
	r, err := New(Config{}, store, &topicPub{topic: "tenant-7.jobs"}, logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.Once(t.Context()); n != 1 || err != nil {
		t.Fatalf("Once() = %d, %v", n, err)
	}
	if !strings.Contains(logs.String(), "topic=tenant-7.jobs") || strings.Contains(logs.String(), DefaultJobsTopic) {
		t.Errorf("logs do not name the publisher's topic:\n%s", logs.String())
	}

	// A publish failure names it too.
	logs.Reset()
	pub := &topicPub{topic: "tenant-7.jobs"}
	pub.err = errors.New("broker down")
	r, err = New(Config{JobsTopic: "configured.jobs"}, &fakeStore{stuck: stuckRows("b")}, pub, logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Once(t.Context()); err == nil || !strings.Contains(err.Error(), "tenant-7.jobs") {
		t.Errorf("publish error = %v, want it to name tenant-7.jobs", err)
	}
}

func TestTakeoversCountStuckRowsRepublished(t *testing.T) {
	store := &fakeStore{stuck: stuckRows("a", "b", "c"), lose: map[string]bool{"c": true}, stalled: stuckRows("r1")}
	r, err := New(Config{Batch: 10}, store, &fakePub{}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Once(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Three stuck rows were re-published with their lease expired (one
	// hand-back lost to another reaper); the stalled replay is no takeover.
	if got := testutil.ToFloat64(r.takeovers); got != 3 {
		t.Errorf("takeovers_total = %v, want 3", got)
	}
	if got := testutil.ToFloat64(r.republished); got != 4 {
		t.Errorf("republished_total = %v, want 4", got)
	}
}

// fakeSuppressions holds expired entries PurgeExpired deletes batch at a
// time; turnTaken makes every purge find another's running.
type fakeSuppressions struct {
	expired, batch int
	turnTaken      bool
	err            error
	calls          int
}

func (f *fakeSuppressions) PurgeExpired(context.Context) (int, error) {
	f.calls++
	if f.err != nil {
		return 0, f.err
	}
	if f.turnTaken {
		return 0, nil
	}
	n := min(f.batch, f.expired)
	f.expired -= n
	return n, nil
}

func TestPurgeSuppressions(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name       string
		lists      *fakeSuppressions
		wantPurged int
		wantCalls  int
		wantErr    error
	}{
		{"nothing expired: one statement", &fakeSuppressions{batch: 3}, 0, 1, nil},
		{"a backlog goes in batches until one deletes nothing", &fakeSuppressions{expired: 7, batch: 3}, 7, 4, nil},
		{"another worker's purge holds the turn", &fakeSuppressions{expired: 7, batch: 3, turnTaken: true}, 0, 1, nil},
		{"a failed statement fails the pass", &fakeSuppressions{expired: 7, batch: 3, err: boom}, 0, 1, boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(Config{Retention: testRetention, PurgePause: time.Millisecond}, &fakeStore{}, &fakePub{}, nil,
				prometheus.NewRegistry(), WithSuppressions(tt.lists))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Once(t.Context()); !errors.Is(err, tt.wantErr) {
				t.Fatalf("Once() = %v, want %v", err, tt.wantErr)
			}
			if tt.lists.calls != tt.wantCalls {
				t.Errorf("PurgeExpired called %d times, want %d", tt.lists.calls, tt.wantCalls)
			}
			if got := testutil.ToFloat64(r.suppressionsGone); got != float64(tt.wantPurged) {
				t.Errorf("suppressions_purged_total = %v, want %d", got, tt.wantPurged)
			}
		})
	}
	// Without a suppression store there is nothing to purge.
	r, err := New(Config{}, &fakeStore{}, &fakePub{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.PurgeSuppressions(t.Context()); n != 0 || err != nil {
		t.Errorf("PurgeSuppressions without a store = %d, %v", n, err)
	}
}
