// Package delay owns holding values until a due time: Queue is a min-heap of
// (due, value) pairs with one goroutine, run by its owner, that emits each
// value on a channel once it is due. It knows time, not Kafka or mail.
//
// It exists instead of one time.AfterFunc per value so every waiting value
// has an owner, memory is one heap entry per value, and the queue can be
// abandoned as a whole on shutdown.
package delay

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// idleWait is how long Run sleeps when the queue is empty; Add wakes it.
const idleWait = time.Hour

// Queue holds values until their due time and then hands them, earliest
// first, to the channel given to Run. Add and Len are safe for concurrent
// use; Run is called by one goroutine at a time. Add never blocks, so stages
// that park work here cannot deadlock a pipeline.
type Queue[T any] struct {
	mu      sync.Mutex
	items   itemHeap[T]
	seq     uint64 // insertion order: values with the same due time leave FIFO
	wake    chan struct{}
	nowFunc func() time.Time
}

// New returns an empty Queue whose clock is nowFunc (time.Now when nil).
func New[T any](nowFunc func() time.Time) *Queue[T] {
	if nowFunc == nil {
		nowFunc = time.Now
	}
	return &Queue[T]{wake: make(chan struct{}, 1), nowFunc: nowFunc}
}

// Add schedules v to be emitted at due. A due time in the past means now.
func (q *Queue[T]) Add(due time.Time, v T) {
	q.mu.Lock()
	q.seq++
	heap.Push(&q.items, item[T]{due: due, seq: q.seq, v: v})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Len reports how many values wait.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Next returns the due time of the earliest value, and false when the queue
// is empty.
func (q *Queue[T]) Next() (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return time.Time{}, false
	}
	return q.items[0].due, true
}

// Run emits due values on out, earliest first (ties in the order they were
// added), until ctx is done or stop is closed; values still waiting then
// (including one that could not be handed over) are abandoned and their
// count returned. stop may be nil.
func (q *Queue[T]) Run(ctx context.Context, stop <-chan struct{}, out chan<- T) int {
	timer := time.NewTimer(idleWait)
	defer timer.Stop()
	for {
		q.mu.Lock()
		var (
			next  T
			ready bool
			wait  = idleWait
		)
		if len(q.items) > 0 {
			if d := q.items[0].due.Sub(q.nowFunc()); d <= 0 {
				next, ready = heap.Pop(&q.items).(item[T]).v, true
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

type item[T any] struct {
	due time.Time
	seq uint64
	v   T
}

type itemHeap[T any] []item[T]

func (h itemHeap[T]) Len() int { return len(h) }
func (h itemHeap[T]) Less(i, j int) bool {
	if h[i].due.Equal(h[j].due) {
		return h[i].seq < h[j].seq
	}
	return h[i].due.Before(h[j].due)
}
func (h itemHeap[T]) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *itemHeap[T]) Push(x any)   { *h = append(*h, x.(item[T])) }
func (h *itemHeap[T]) Pop() any {
	old := *h
	n := len(old)
	v := old[n-1]
	old[n-1] = item[T]{} // drop the reference so the value can be collected
	*h = old[:n-1]
	return v
}
