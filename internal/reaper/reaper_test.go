package reaper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/jobheader"
)

func TestConfig(t *testing.T) {
	d := Config{}.WithDefaults()
	if d.Interval != DefaultInterval || d.Grace != DefaultGrace || d.Batch != DefaultBatch || d.JobsTopic != DefaultJobsTopic ||
		d.Retention != 30*24*time.Hour || d.PurgeBatch != 1000 || d.PurgePause != DefaultPurgePause || d.PurgeInterval != DefaultPurgeInterval {
		t.Fatalf("defaults = %+v", d)
	}
	// with is a valid config changed by mod.
	with := func(mod func(*Config)) Config {
		c := Config{Interval: time.Second, Grace: time.Second, Batch: 1, Retention: 2 * time.Hour, PurgeBatch: 1, PurgeInterval: time.Second}
		mod(&c)
		return c
	}
	tests := []struct {
		name string
		cfg  Config
		want string // "" = valid
	}{
		{"defaults", d, ""},
		{"zero grace", with(func(c *Config) { c.Grace = 0 }), ""},
		{"minimum retention, zero pause", with(func(c *Config) { c.Retention, c.PurgePause = MinRetention, 0 }), ""},
		{"tiny interval", with(func(c *Config) { c.Interval = time.Microsecond }), "Interval 1µs"},
		{"tiny purge interval", with(func(c *Config) { c.PurgeInterval = time.Microsecond }), "PurgeInterval 1µs"},
		{"negative grace", with(func(c *Config) { c.Grace = -time.Second }), "Grace -1s"},
		{"negative batch", with(func(c *Config) { c.Batch = -1 }), "Batch -1"},
		{"retention below the minimum", with(func(c *Config) { c.Retention = time.Minute }), "Retention 1m0s"},
		{"negative purge batch", with(func(c *Config) { c.PurgeBatch = -1 }), "PurgeBatch -1"},
		{"negative purge pause", with(func(c *Config) { c.PurgePause = -time.Second }), "PurgePause -1s"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate() = %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestMessage(t *testing.T) {
	seen := time.Date(2025, 6, 1, 12, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	tests := []struct {
		name        string
		st          idempotency.Stuck
		wantKey     string
		wantHeaders map[string]string
	}{
		{
			name: "everything stored",
			st: idempotency.Stuck{MessageID: "<a@x>", Attempt: 3, Payload: []byte("v"), Key: []byte("k"),
				TraceHeaders: map[string]string{"traceparent": "tp", "tracestate": "ts"}, FirstSeen: seen},
			wantKey: "k",
			wantHeaders: map[string]string{"traceparent": "tp", "tracestate": "ts", jobheader.KeyAttempt: "3",
				jobheader.KeyFirstSeen: "2025-06-01T10:00:00Z"},
		},
		{
			name:        "no key, no trace, no first seen",
			st:          idempotency.Stuck{MessageID: "<b@x>", Attempt: 1, Payload: []byte("v")},
			wantKey:     "<b@x>",
			wantHeaders: map[string]string{jobheader.KeyAttempt: "1"},
		},
		{
			name:        "attempt 0 is sent as 1",
			st:          idempotency.Stuck{MessageID: "<c@x>", Payload: []byte("v")},
			wantKey:     "<c@x>",
			wantHeaders: map[string]string{jobheader.KeyAttempt: "1"},
		},
	}
	for _, tt := range tests {
		m := Message(tt.st)
		got := map[string]string{}
		for _, h := range m.Headers {
			got[h.Key] = string(h.Value)
		}
		if string(m.Key) != tt.wantKey || string(m.Value) != string(tt.st.Payload) || m.Topic != "" || len(m.Headers) != len(got) {
			t.Errorf("%s: message = %+v", tt.name, m)
		}
		for k, v := range tt.wantHeaders {
			if got[k] != v {
				t.Errorf("%s: header %s = %q, want %q", tt.name, k, got[k], v)
			}
		}
		if len(got) != len(tt.wantHeaders) {
			t.Errorf("%s: headers %v, want %v", tt.name, got, tt.wantHeaders)
		}
	}
}

// fakeStore serves stuck rows from a list; HandBack wins for IDs not in lose.
type fakeStore struct {
	stuck       []idempotency.Stuck
	stuckErr    error
	handBackErr error
	lose        map[string]bool
	handedBack  []string
	stalled     []idempotency.Stuck
	touched     []string
	// terminal is how many rows Purge can delete; purges records each
	// call's limit.
	terminal int
	purgeErr error
	purges   []int
}

func (f *fakeStore) Purge(_ context.Context, olderThan time.Duration, limit int) (int, error) {
	if olderThan != DefaultRetention && olderThan != testRetention {
		return 0, errors.New("unexpected retention")
	}
	f.purges = append(f.purges, limit)
	if f.purgeErr != nil {
		return 0, f.purgeErr
	}
	n := min(limit, f.terminal)
	f.terminal -= n
	return n, nil
}

func (f *fakeStore) StalledReplays(_ context.Context, _ time.Duration, limit int) ([]idempotency.Stuck, error) {
	return f.stalled[:min(limit, len(f.stalled))], nil
}

func (f *fakeStore) TouchReplays(_ context.Context, ids []string, _ []int64) ([]string, error) {
	var lost []string
	for _, id := range ids {
		if f.lose[id] {
			lost = append(lost, id)
			continue
		}
		f.touched = append(f.touched, id)
	}
	// Touched or claimed, a row is no longer stalled.
	f.stalled = slices.DeleteFunc(f.stalled, func(st idempotency.Stuck) bool { return slices.Contains(ids, st.MessageID) })
	return lost, nil
}

func (f *fakeStore) Stuck(_ context.Context, _ time.Duration, limit int) ([]idempotency.Stuck, error) {
	if f.stuckErr != nil {
		return nil, f.stuckErr
	}
	return f.stuck[:min(limit, len(f.stuck))], nil
}

func (f *fakeStore) HandBack(_ context.Context, ids []string, _ []int64) ([]string, error) {
	if f.handBackErr != nil {
		return nil, f.handBackErr
	}
	var lost []string
	for _, id := range ids {
		if f.lose[id] {
			lost = append(lost, id)
			continue
		}
		f.handedBack = append(f.handedBack, id)
		f.stuck = slices.DeleteFunc(f.stuck, func(st idempotency.Stuck) bool { return st.MessageID == id })
	}
	return lost, nil
}

type fakePub struct {
	err  error
	msgs []kafka.Message
}

func (f *fakePub) PublishRaw(_ context.Context, msgs []kafka.Message) error {
	if f.err != nil {
		return f.err
	}
	f.msgs = append(f.msgs, msgs...)
	return nil
}

func stuckRows(ids ...string) []idempotency.Stuck {
	out := make([]idempotency.Stuck, len(ids))
	for i, id := range ids {
		out[i] = idempotency.Stuck{MessageID: id, Version: int64(i + 1), Attempt: 1, Payload: []byte(id)}
	}
	return out
}

func TestOnce(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name           string
		store          *fakeStore
		pub            *fakePub
		wantN          int
		wantErr        error
		wantPub        int
		wantHandedBack []string
		wantTouched    []string
	}{
		{"nothing stuck", &fakeStore{}, &fakePub{}, 0, nil, 0, nil, nil},
		{"all handed back over several rounds", &fakeStore{stuck: stuckRows("a", "b", "c", "d", "e")}, &fakePub{},
			5, nil, 5, []string{"a", "b", "c", "d", "e"}, nil},
		{"lost hand-backs are not counted", &fakeStore{stuck: stuckRows("a", "b", "c"), lose: map[string]bool{"c": true}}, &fakePub{},
			2, nil, 3, []string{"a", "b"}, nil},
		{"a full round that hands back nothing ends the pass", &fakeStore{stuck: stuckRows("a", "b"), lose: map[string]bool{"a": true, "b": true}}, &fakePub{},
			0, nil, 2, nil, nil},
		{"stuck fails", &fakeStore{stuckErr: boom}, &fakePub{}, 0, boom, 0, nil, nil},
		{"publish fails: nothing handed back", &fakeStore{stuck: stuckRows("a")}, &fakePub{err: boom}, 0, boom, 0, nil, nil},
		{"hand back fails after publishing", &fakeStore{stuck: stuckRows("a"), handBackErr: boom}, &fakePub{}, 0, boom, 1, nil, nil},
		{"stalled replays are re-published and touched", &fakeStore{stalled: stuckRows("r1", "r2", "r3")}, &fakePub{},
			3, nil, 3, nil, []string{"r1", "r2", "r3"}},
		{"stuck rows first, then stalled replays", &fakeStore{stuck: stuckRows("a"), stalled: stuckRows("r1", "r2"), lose: map[string]bool{"r2": true}}, &fakePub{},
			2, nil, 3, []string{"a"}, []string{"r1"}},
		{"a stuck error skips the replays", &fakeStore{stuckErr: boom, stalled: stuckRows("r1")}, &fakePub{}, 0, boom, 0, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			r, err := New(Config{Batch: 2}, tt.store, tt.pub, nil, reg)
			if err != nil {
				t.Fatal(err)
			}
			n, err := r.Once(t.Context())
			if n != tt.wantN || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Once() = %d, %v; want %d, %v", n, err, tt.wantN, tt.wantErr)
			}
			if len(tt.pub.msgs) != tt.wantPub || !slices.Equal(tt.store.handedBack, tt.wantHandedBack) || !slices.Equal(tt.store.touched, tt.wantTouched) {
				t.Errorf("published %d, handed back %v, touched %v; want %d, %v, %v", len(tt.pub.msgs), tt.store.handedBack, tt.store.touched,
					tt.wantPub, tt.wantHandedBack, tt.wantTouched)
			}
			if got := testutil.ToFloat64(r.republished); got != float64(tt.wantPub) {
				t.Errorf("republished_total = %v, want %d", got, tt.wantPub)
			}
			if got := testutil.ToFloat64(r.handedBack.WithLabelValues("released")); got != float64(len(tt.wantHandedBack)) {
				t.Errorf("releases_total{released} = %v, want %d", got, len(tt.wantHandedBack))
			}
			problems, err := testutil.GatherAndLint(reg)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Errorf("promlint: %s: %s", p.Metric, p.Text)
			}
		})
	}
}

func TestRunStopsWithContextAndCountsErrors(t *testing.T) {
	store := &fakeStore{stuckErr: errors.New("db down")}
	r, err := New(Config{Interval: time.Millisecond}, store, &fakePub{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, r, func() bool { return testutil.ToFloat64(r.errors) >= 2 }, func() string {
		return "Run did not retry failed passes"
	})
}

// runUntil runs r until reached reports true, failing with failure() if that
// takes 10 s, then cancels Run and checks that it returns nil.
func runUntil(t *testing.T, r *Reaper, reached func() bool, failure func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !reached() {
		if time.Now().After(deadline) {
			t.Fatal(failure())
		}
		time.Sleep(time.Millisecond) // polling a counter with a deadline
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run() = %v, want nil after cancel", err)
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New(Config{}, nil, &fakePub{}, nil, nil); err == nil {
		t.Error("New with a nil store succeeded")
	}
	if _, err := New(Config{Batch: -1}, &fakeStore{}, &fakePub{}, nil, nil); err == nil {
		t.Error("New with Batch -1 succeeded")
	}
}

// clockStore counts the purge statements and the recovery rounds that Run
// makes, safely across its goroutines.
type clockStore struct {
	fakeStore
	purges, stuckCalls atomic.Int64
}

func (c *clockStore) Purge(context.Context, time.Duration, int) (int, error) {
	c.purges.Add(1)
	return 0, nil
}

func (c *clockStore) Stuck(context.Context, time.Duration, int) ([]idempotency.Stuck, error) {
	c.stuckCalls.Add(1)
	return nil, nil
}

// TestRunPurgesOnItsOwnClock: the purge passes come every PurgeInterval
// whatever the recovery's Interval, so that rows past the retention are
// deleted about as they come due rather than an interval's worth at once.
func TestRunPurgesOnItsOwnClock(t *testing.T) {
	store := &clockStore{}
	r, err := New(Config{Interval: time.Hour, PurgeInterval: 5 * time.Millisecond, Retention: testRetention}, store, &fakePub{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, r, func() bool { return store.purges.Load() >= 5 }, func() string {
		return fmt.Sprintf("%d purge passes in 10s at a 5ms PurgeInterval", store.purges.Load())
	})
	if n := store.stuckCalls.Load(); n != 1 {
		t.Errorf("%d recovery rounds within the first hourly Interval, want the one at the start", n)
	}
}
