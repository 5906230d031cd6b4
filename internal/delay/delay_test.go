package delay

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// runQueue runs q in the background until the test ends.
func runQueue[T any](t *testing.T, q *Queue[T]) <-chan T {
	t.Helper()
	out := make(chan T)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); q.Run(ctx, nil, out) }()
	t.Cleanup(func() { cancel(); <-done })
	return out
}

func receive[T any](t *testing.T, out <-chan T) T {
	t.Helper()
	select {
	case v := <-out:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("no value within 5s")
		panic("unreachable")
	}
}

func TestQueueOrder(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		adds []time.Duration // due offsets from base, added in this order; values are their index
		want []int
	}{
		{"sorted", []time.Duration{1, 2, 3}, []int{0, 1, 2}},
		{"reversed", []time.Duration{3, 2, 1}, []int{2, 1, 0}},
		{"ties leave in insertion order", []time.Duration{5, 1, 5, 5, 1}, []int{1, 4, 0, 2, 3}},
		{"one", []time.Duration{0}, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &fakeClock{now: base.Add(time.Hour)} // everything is due
			q := New[int](clock.Now)
			for i, d := range tt.adds {
				q.Add(base.Add(d), i)
			}
			if q.Len() != len(tt.adds) {
				t.Fatalf("Len() = %d, want %d", q.Len(), len(tt.adds))
			}
			if next, ok := q.Next(); !ok || !next.Equal(base.Add(minDur(tt.adds))) {
				t.Fatalf("Next() = %v, %v; want %v", next, ok, base.Add(minDur(tt.adds)))
			}
			out := runQueue(t, q)
			for i, want := range tt.want {
				if got := receive(t, out); got != want {
					t.Fatalf("value %d = %d, want %d", i, got, want)
				}
			}
			if _, ok := q.Next(); ok || q.Len() != 0 {
				t.Fatalf("after draining: Len() = %d, Next ok = %v", q.Len(), ok)
			}
		})
	}
}

func minDur(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = min(m, d)
	}
	return m
}

func TestQueueWaitsUntilDue(t *testing.T) {
	q := New[time.Time](nil)
	out := runQueue(t, q)
	start := time.Now()
	dues := []time.Time{start.Add(80 * time.Millisecond), start.Add(20 * time.Millisecond), start.Add(50 * time.Millisecond)}
	for _, d := range dues {
		q.Add(d, d)
	}
	var prev time.Time
	for range dues {
		due := receive(t, out)
		if got := time.Now(); got.Before(due) {
			t.Fatalf("value due at +%v emitted early at +%v", due.Sub(start), got.Sub(start))
		}
		if due.Before(prev) {
			t.Fatalf("value due at +%v emitted after one due at +%v", due.Sub(start), prev.Sub(start))
		}
		prev = due
	}
}

// An Add to an idle queue wakes Run at once instead of after its idle wait.
func TestQueueAddWakesIdleRun(t *testing.T) {
	q := New[string](nil)
	out := runQueue(t, q)
	// Absence cannot be polled for: give Run a moment to go idle first.
	select {
	case v := <-out:
		t.Fatalf("empty queue emitted %q", v)
	case <-time.After(20 * time.Millisecond):
	}
	q.Add(time.Now(), "now")
	select {
	case v := <-out:
		if v != "now" {
			t.Fatalf("got %q, want now", v)
		}
	case <-time.After(time.Second):
		t.Fatal("Add did not wake the idle queue within 1s")
	}
}

func TestQueueRunReturnsAbandoned(t *testing.T) {
	tests := []struct {
		name   string
		useCtx bool
	}{{"stop channel", false}, {"context", true}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New[int](nil)
			q.Add(time.Now().Add(time.Hour), 1)
			q.Add(time.Now().Add(-time.Second), 2) // due, but nobody reads out
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stop := make(chan struct{})
			res := make(chan int, 1)
			go func() { res <- q.Run(ctx, stop, make(chan int)) }()
			if tt.useCtx {
				cancel()
			} else {
				close(stop)
			}
			select {
			case n := <-res:
				if n != 2 {
					t.Fatalf("Run returned %d abandoned, want 2", n)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return within 5s")
			}
		})
	}
}
