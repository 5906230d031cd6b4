package job

import (
	"context"
	"sync"

	"github.com/segmentio/kafka-go"
)

// coalescer gathers the records of concurrent Publish calls into shared
// writes, the way a database gathers commits: a call made while no write
// is in flight starts one at once, and the calls made while it is in
// flight go together in the next. A lone publish is never held for a batch
// that is not coming, and a steady stream of small calls costs the broker
// one request per partition per round trip rather than per call.
type coalescer struct {
	writeFn func(context.Context, []kafka.Message) error

	mu       sync.Mutex
	next     *writeGroup // gathering; nil when none
	flushing bool
	running  sync.WaitGroup
}

// writeGroup is one shared write: the records of the calls it gathered,
// and its outcome, set before done is closed.
type writeGroup struct {
	msgs []kafka.Message
	done chan struct{}
	err  error
}

func newCoalescer(writeFn func(context.Context, []kafka.Message) error) *coalescer {
	return &coalescer{writeFn: writeFn}
}

// write adds msgs to the next shared write and waits for its outcome, or
// for ctx: a call that gives up may still have its records written, as a
// failed write may have written some (Publish says what to do then).
func (c *coalescer) write(ctx context.Context, msgs []kafka.Message) error {
	c.mu.Lock()
	g := c.next
	if g == nil {
		g = &writeGroup{done: make(chan struct{})}
		c.next = g
	}
	g.msgs = append(g.msgs, msgs...)
	if !c.flushing {
		c.flushing = true
		c.running.Add(1)
		go c.flush()
	}
	c.mu.Unlock()
	select {
	case <-g.done:
		return g.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flush writes the gathered groups one after another until none is left.
// A write is not bound to any one caller's context: it carries several
// callers' records, and the writer's own timeout bounds it.
func (c *coalescer) flush() {
	defer c.running.Done()
	for {
		c.mu.Lock()
		g := c.next
		c.next = nil
		if g == nil {
			c.flushing = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		g.err = c.writeFn(context.Background(), g.msgs)
		close(g.done)
	}
}

// wait returns once no write is in flight.
func (c *coalescer) wait() { c.running.Wait() }
