package writertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// Writer is what a caller needs of a Kafka writer: publish a batch and
// return once it is written.
type Writer[T any] interface {
	Publish(ctx context.Context, items ...T) error
}

// Log reads back the record keys a writer wrote, in the order written,
// through the first record keyed until; it fails t if that record does not
// come.
type Log func(t *testing.T, until string) []string

// Subject is a writer under the suite.
type Subject[T any] struct {
	// Open returns a new writer, on a destination of its own, and the log
	// of what it writes.
	Open func(t *testing.T) (Writer[T], Log)
	// Item returns a valid item whose record is keyed key.
	Item func(key string) T
	// Invalid returns an item the writer must refuse, keyed key; nil when
	// it refuses none.
	Invalid func(key string) T
}

// Run checks the writer rules against subject.
func Run[T any](t *testing.T, subject Subject[T]) {
	checks := []struct {
		name string
		run  func(t *testing.T, s Subject[T])
	}{
		{"a batch is written in order", inOrder[T]},
		{"an empty batch writes nothing", emptyBatch[T]},
		{"an invalid item fails the whole batch", invalidBatch[T]},
		{"an ended context fails the call", endedContext[T]},
		{"concurrent calls are all written", concurrent[T]},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, subject)
		})
	}
}

// callTimeout bounds one Publish of the suite.
const callTimeout = 30 * time.Second

func publish[T any](t *testing.T, w Writer[T], items ...T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := w.Publish(ctx, items...); err != nil {
		t.Fatalf("Publish of %d items: %v", len(items), err)
	}
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func items[T any](s Subject[T], keys []string) []T {
	out := make([]T, len(keys))
	for i, k := range keys {
		out[i] = s.Item(k)
	}
	return out
}

func inOrder[T any](t *testing.T, s Subject[T]) {
	w, log := s.Open(t)
	want := keys("ordered", 5)
	publish(t, w, items(s, want)...)
	if got := log(t, want[len(want)-1]); !slices.Equal(got, want) {
		t.Errorf("written %v, want %v", got, want)
	}
	more := keys("more", 3)
	publish(t, w, items(s, more)...)
	if got := log(t, more[len(more)-1]); !slices.Equal(got, append(want, more...)) {
		t.Errorf("after a second batch, written %v, want %v", got, append(want, more...))
	}
}

func emptyBatch[T any](t *testing.T, s Subject[T]) {
	w, log := s.Open(t)
	publish(t, w)
	publish[T](t, w, []T{}...)
	publish(t, w, s.Item("after"))
	if got := log(t, "after"); !slices.Equal(got, []string{"after"}) {
		t.Errorf("written %v, want only the record after the empty batches", got)
	}
}

func invalidBatch[T any](t *testing.T, s Subject[T]) {
	if s.Invalid == nil {
		t.Skip("the writer refuses no item")
	}
	w, log := s.Open(t)
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := w.Publish(ctx, s.Item("before"), s.Invalid("invalid"), s.Item("behind")); err == nil {
		t.Fatal("Publish of a batch with an invalid item succeeded, want an error")
	}
	publish(t, w, s.Item("after"))
	if got := log(t, "after"); !slices.Equal(got, []string{"after"}) {
		t.Errorf("written %v, want nothing of the refused batch", got)
	}
}

func endedContext[T any](t *testing.T, s Subject[T]) {
	w, log := s.Open(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := w.Publish(ctx, s.Item("cancelled")); !errors.Is(err, context.Canceled) {
		t.Errorf("Publish with an ended context = %v, want an error wrapping context.Canceled", err)
	}
	// The writer still works. What the ended call wrote, if anything, is
	// not the caller's to know: it publishes again.
	publish(t, w, s.Item("after"))
	if got := log(t, "after"); len(got) == 0 || got[len(got)-1] != "after" {
		t.Errorf("written %v, want the record after the ended call last", got)
	}
}

func concurrent[T any](t *testing.T, s Subject[T]) {
	w, log := s.Open(t)
	var want []string
	var wg sync.WaitGroup
	for g := range 4 {
		ks := keys(fmt.Sprintf("g%d", g), 5)
		want = append(want, ks...)
		wg.Go(func() { publish(t, w, items(s, ks)...) })
	}
	wg.Wait()
	publish(t, w, s.Item("last"))
	got := log(t, "last")
	if len(got) == 0 {
		t.Fatal("nothing written")
	}
	got = got[:len(got)-1]
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("written %v, want each of %v once", got, want)
	}
}
