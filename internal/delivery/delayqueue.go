package delivery

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// delayQueue holds items until their due time and then hands them to out.
// Add never blocks, so stages that park work here cannot deadlock the
// pipeline. It exists instead of time.AfterFunc so every waiting goroutine
// has an owner and the queue can be abandoned as a whole on shutdown.
type delayQueue[T any] struct {
	mu      sync.Mutex
	items   delayHeap[T]
	wake    chan struct{}
	nowFunc func() time.Time
}

func newDelayQueue[T any](nowFunc func() time.Time) *delayQueue[T] {
	return &delayQueue[T]{wake: make(chan struct{}, 1), nowFunc: nowFunc}
}

// Add schedules v to be emitted at due.
func (q *delayQueue[T]) Add(due time.Time, v T) {
	q.mu.Lock()
	heap.Push(&q.items, delayed[T]{due: due, v: v})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Len reports how many items wait.
func (q *delayQueue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Run emits due items on out until ctx is done or stop is closed; items
// still waiting then are abandoned and their count returned.
func (q *delayQueue[T]) Run(ctx context.Context, stop <-chan struct{}, out chan<- T) int {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		q.mu.Lock()
		var (
			next  T
			ready bool
			wait  = time.Hour
		)
		if len(q.items) > 0 {
			if d := q.items[0].due.Sub(q.nowFunc()); d <= 0 {
				next, ready = heap.Pop(&q.items).(delayed[T]).v, true
			} else {
				wait = d
			}
		}
		q.mu.Unlock()

		if ready {
			select {
			case out <- next:
				continue
			case <-ctx.Done():
			case <-stop:
			}
			return q.Len() + 1
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-q.wake:
			// Go 1.23+ timers: the next Reset discards any stale tick.
		case <-ctx.Done():
			return q.Len()
		case <-stop:
			return q.Len()
		}
	}
}

type delayed[T any] struct {
	due time.Time
	v   T
}

type delayHeap[T any] []delayed[T]

func (h delayHeap[T]) Len() int           { return len(h) }
func (h delayHeap[T]) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h delayHeap[T]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *delayHeap[T]) Push(x any)        { *h = append(*h, x.(delayed[T])) }
func (h *delayHeap[T]) Pop() any {
	old := *h
	n := len(old)
	v := old[n-1]
	*h = old[:n-1]
	return v
}
