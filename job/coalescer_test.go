package job

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// fakeWrites records each shared write's size and holds it until released.
type fakeWrites struct {
	started chan int
	release chan error
}

func (f *fakeWrites) write(_ context.Context, msgs []kafka.Message) error {
	f.started <- len(msgs)
	return <-f.release
}

func msgs(n int) []kafka.Message { return make([]kafka.Message, n) }

// A lone call is written at once; the calls made while that write is in
// flight go together in the next write, and each learns its outcome.
func TestCoalescerGathersCallsMadeDuringAWrite(t *testing.T) {
	f := &fakeWrites{started: make(chan int, 4), release: make(chan error)}
	c := newCoalescer(f.write)
	errs := make(chan error, 3)
	go func() { errs <- c.write(t.Context(), msgs(1)) }()
	select {
	case n := <-f.started:
		if n != 1 {
			t.Fatalf("first write carried %d records, want 1", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a lone call was not written at once")
	}
	go func() { errs <- c.write(t.Context(), msgs(2)) }()
	go func() { errs <- c.write(t.Context(), msgs(3)) }()
	for deadline := time.Now().Add(5 * time.Second); ; {
		c.mu.Lock()
		gathered := 0
		if c.next != nil {
			gathered = len(c.next.msgs)
		}
		c.mu.Unlock()
		if gathered == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gathered %d records behind the write in flight, want 5", gathered)
		}
		time.Sleep(time.Millisecond)
	}
	f.release <- nil
	if err := <-errs; err != nil {
		t.Fatalf("first call: %v", err)
	}
	if n := <-f.started; n != 5 {
		t.Fatalf("second write carried %d records, want the 5 of both calls", n)
	}
	broken := errors.New("broker gone")
	f.release <- broken
	for range 2 {
		if err := <-errs; !errors.Is(err, broken) {
			t.Errorf("a call of the failed write returned %v, want %v", err, broken)
		}
	}
	c.wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flushing || c.next != nil {
		t.Errorf("after the writes: flushing %v, next %v; want idle", c.flushing, c.next)
	}
}

// A caller whose context ends stops waiting; the write goes on for the
// others, and Close (wait) waits for it.
func TestCoalescerCallerGivesUp(t *testing.T) {
	f := &fakeWrites{started: make(chan int, 1), release: make(chan error)}
	c := newCoalescer(f.write)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- c.write(ctx, msgs(1)) }()
	<-f.started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("write after cancel = %v, want context.Canceled", err)
	}
	waited := make(chan struct{})
	go func() { c.wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("wait returned while a write was in flight")
	case <-time.After(20 * time.Millisecond):
	}
	f.release <- nil
	<-waited
}
