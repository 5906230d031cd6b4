package writertest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/retry"
)

// Recorder is the in-memory stand-in for a Kafka writer: it keeps what it
// is given, refusing a batch as the writer it stands for does. Fail makes
// the next calls fail, as a broker that is down would. Safe for concurrent
// use.
type Recorder[T any] struct {
	key      func(T) string
	validate func(T) error

	mu       sync.Mutex
	items    []T
	calls    int
	failures int // calls left to fail; negative: every call
	failWith error
}

// NewRecorder returns a Recorder whose items' records are keyed by key and
// that refuses a batch with an item validate refuses (nil: none).
func NewRecorder[T any](key func(T) string, validate func(T) error) *Recorder[T] {
	return &Recorder[T]{key: key, validate: validate}
}

// DeadLetters returns the stand-in of deadletter.Writer.
func DeadLetters() *Recorder[deadletter.Letter] {
	return NewRecorder(func(l deadletter.Letter) string { return string(l.Key) }, nil)
}

// Retries returns the stand-in of a retry.Writer for tiers: a copy must
// name one of them, be for attempt 1 or later, and say when it is due.
func Retries(tiers retry.Tiers) *Recorder[retry.Copy] {
	tiers = slices.Clone(tiers)
	return NewRecorder(func(c retry.Copy) string { return string(c.Key) }, func(c retry.Copy) error {
		switch {
		case !slices.Contains(tiers, c.Tier):
			return fmt.Errorf("retry: tier %v is not one of %v", c.Tier, tiers)
		case c.Attempt < 1:
			return fmt.Errorf("retry: attempt %d is below 1", c.Attempt)
		case c.NotBefore.IsZero():
			return fmt.Errorf("retry: NotBefore is not set")
		}
		return nil
	})
}

// Events returns the stand-in of eventstream.Writer: an event must
// validate.
func Events() *Recorder[event.Event] {
	return NewRecorder(func(e event.Event) string { return e.MessageID }, func(e event.Event) error { return e.Validate() })
}

// Publish keeps items, unless the context has ended, an item is refused or
// a failure was asked for; then it keeps none of them.
func (r *Recorder[T]) Publish(ctx context.Context, items ...T) error {
	r.mu.Lock()
	r.calls++
	r.mu.Unlock()
	if len(items) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("publish %d records: %w", len(items), err)
	}
	if r.validate != nil {
		for i, it := range items {
			if err := r.validate(it); err != nil {
				return fmt.Errorf("record %d: %w", i, err)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failures != 0 {
		if r.failures > 0 {
			r.failures--
		}
		return r.failWith
	}
	r.items = append(r.items, items...)
	return nil
}

// Fail makes the next n calls that would keep their items fail with err;
// a negative n makes every call fail, until Fail(0, nil).
func (r *Recorder[T]) Fail(n int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures, r.failWith = n, err
}

// Calls returns how many times Publish was called, failed calls and empty
// batches included.
func (r *Recorder[T]) Calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// All returns the items kept, in order.
func (r *Recorder[T]) All() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.items)
}

// Log returns the log of the recorder's records, for Run.
func (r *Recorder[T]) Log() Log {
	return func(t *testing.T, until string) []string {
		t.Helper()
		var out []string
		for _, it := range r.All() {
			out = append(out, r.key(it))
			if out[len(out)-1] == until {
				return out
			}
		}
		t.Fatalf("no record keyed %q among %v", until, out)
		return nil
	}
}
