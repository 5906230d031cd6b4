package idempotency

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is a manual clock: Advance moves it and fires the keeper's
// ticker for every Interval boundary crossed.
type fakeClock struct {
	mu       sync.Mutex
	now      time.Time
	interval time.Duration
	next     time.Time
	tick     chan time.Time
}

func newFakeClock(start time.Time) *fakeClock {
	return &fakeClock{now: start, tick: make(chan time.Time)}
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) newTicker(d time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.interval, c.next = d, c.now.Add(d)
	return c.tick, func() {}
}

// Advance moves the clock by d in ticks, handing each due tick to the
// keeper (which blocks until Run takes it) and waiting for its round.
func (c *fakeClock) Advance(d time.Duration, rounds <-chan struct{}) {
	end := c.Now().Add(d)
	for {
		c.mu.Lock()
		if c.interval == 0 || c.next.After(end) {
			c.now = end
			c.mu.Unlock()
			return
		}
		c.now = c.next
		c.next = c.next.Add(c.interval)
		at := c.now
		c.mu.Unlock()
		c.tick <- at
		<-rounds
	}
}

// fakeLeases is an extender keeping leases on the fake clock, with the
// store's rules: an extension wins when the row is ours at that version.
type fakeLeases struct {
	mu      sync.Mutex
	clock   *fakeClock
	lease   time.Duration
	rows    map[string]int64     // id -> version
	expires map[string]time.Time // id -> lease expiry
	calls   [][]string
	fail    int // next calls that fail
}

func (f *fakeLeases) ExtendLease(_ context.Context, ids []string, versions []int64) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, slices.Clone(ids))
	if f.fail > 0 {
		f.fail--
		return nil, errors.New("connection refused")
	}
	var lost []string
	for i, id := range ids {
		if v, ok := f.rows[id]; !ok || v != versions[i] {
			lost = append(lost, id)
			continue
		}
		f.expires[id] = f.clock.Now().Add(f.lease)
	}
	return lost, nil
}

func (f *fakeLeases) claim(id string, version int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rows[id], f.expires[id] = version, f.clock.Now().Add(f.lease)
}

func (f *fakeLeases) expiry(id string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.expires[id]
}

func (f *fakeLeases) lastCall() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[len(f.calls)-1]
}

func (f *fakeLeases) callCount() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.calls) }

func TestLeaseKeeperKeepsHeldLeasesAlive(t *testing.T) {
	const lease = 30 * time.Second
	clock := newFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	ext := &fakeLeases{clock: clock, lease: lease, rows: map[string]int64{}, expires: map[string]time.Time{}}
	k, err := NewLeaseKeeper(KeeperConfig{Lease: lease}, ext, nil)
	if err != nil {
		t.Fatal(err)
	}
	rounds := make(chan struct{})
	k.newTicker = clock.newTicker
	k.onRound = func() { rounds <- struct{}{} }
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- k.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	// Run must have made its ticker before the clock moves.
	var interval time.Duration
	for interval == 0 {
		time.Sleep(time.Millisecond)
		clock.mu.Lock()
		interval = clock.interval
		clock.mu.Unlock()
	}
	if interval != lease/3 {
		t.Fatalf("interval = %v, want lease/3 = %v", interval, lease/3)
	}

	for _, id := range []string{"c", "a", "b"} {
		ext.claim(id, 1)
		k.Hold(id, 1)
	}
	// Six leases' worth of time, one second at a time: a held lease never
	// lapses, and every round is one call for all of them.
	for range 6 * 30 {
		clock.Advance(time.Second, rounds)
		for _, id := range []string{"a", "b", "c"} {
			if !ext.expiry(id).After(clock.Now()) {
				t.Fatalf("lease of %s expired at %v (now %v)", id, ext.expiry(id), clock.Now())
			}
		}
	}
	if n := ext.callCount(); n != 6*3 {
		t.Errorf("ExtendLease calls = %d, want one per interval (18)", n)
	}
	if got := ext.lastCall(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("one round extends %v, want every held lease in ID order", got)
	}

	// Dropped leases are no longer extended; a drop of another version is
	// ignored.
	k.Drop("b", 1)
	k.Drop("c", 7)
	clock.Advance(lease/3, rounds)
	if got := ext.lastCall(); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("after drops a round extends %v, want [a c]", got)
	}

	// A takeover bumps the row's version: the next round loses it, Held
	// turns false and the lease is not tried again.
	ext.mu.Lock()
	ext.rows["c"] = 2
	ext.mu.Unlock()
	clock.Advance(lease/3, rounds)
	if k.Held("c", 1) || !k.Held("a", 1) {
		t.Errorf("Held(c) = %v, Held(a) = %v; want false (lost), true", k.Held("c", 1), k.Held("a", 1))
	}
	clock.Advance(lease/3, rounds)
	if got := ext.lastCall(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("after the loss a round extends %v, want [a]", got)
	}

	// A failed round keeps the holds; the next one extends them again.
	ext.mu.Lock()
	ext.fail = 1
	ext.mu.Unlock()
	before := ext.expiry("a")
	clock.Advance(lease/3, rounds)
	if !ext.expiry("a").Equal(before) || !k.Held("a", 1) {
		t.Errorf("failed round: expiry %v (was %v), held %v", ext.expiry("a"), before, k.Held("a", 1))
	}
	clock.Advance(lease/3, rounds)
	if !ext.expiry("a").After(before) {
		t.Errorf("the round after a failure did not extend: expiry %v", ext.expiry("a"))
	}

	// A re-hold at a new version (claimed again) is extended at it.
	k.Drop("a", 1)
	k.Hold("c", 2)
	if k.Len() != 1 || !k.Held("c", 2) {
		t.Errorf("after re-hold: len %d, Held(c, 2) %v", k.Len(), k.Held("c", 2))
	}
	clock.Advance(lease/3, rounds)
	if got := ext.lastCall(); !slices.Equal(got, []string{"c"}) {
		t.Errorf("a round extends %v, want [c]", got)
	}
}

func TestLeaseKeeperRoundWithoutLeasesMakesNoCall(t *testing.T) {
	ext := &fakeLeases{clock: newFakeClock(time.Now())}
	k, err := NewLeaseKeeper(KeeperConfig{}, ext, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, lost, err := k.Extend(t.Context()); n != 0 || lost != 0 || err != nil || ext.callCount() != 0 {
		t.Errorf("Extend with nothing held = %d, %d, %v and %d calls; want no call", n, lost, err, ext.callCount())
	}
}

func TestKeeperConfig(t *testing.T) {
	if d := (KeeperConfig{}).WithDefaults(); d.Lease != DefaultLease || d.Interval != DefaultLease/3 {
		t.Errorf("defaults = %+v", d)
	}
	if d := (KeeperConfig{Lease: 3 * time.Second}).WithDefaults(); d.Interval != time.Second {
		t.Errorf("interval of a 3s lease = %v, want 1s", d.Interval)
	}
	tests := []struct {
		name string
		cfg  KeeperConfig
		ok   bool
	}{
		{"defaults", KeeperConfig{}.WithDefaults(), true},
		{"interval as long as the lease", KeeperConfig{Lease: time.Second, Interval: time.Second}, false},
		{"negative interval", KeeperConfig{Lease: time.Second, Interval: -time.Second}, false},
		{"tiny lease", KeeperConfig{Lease: time.Microsecond, Interval: time.Nanosecond}, false},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
	if _, err := NewLeaseKeeper(KeeperConfig{}, nil, nil); err == nil {
		t.Error("NewLeaseKeeper accepted a nil extender")
	}
}
