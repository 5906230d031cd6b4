package delivery

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/delay"
)

// The recorder settles at most one batch per BatchLinger: the first fate
// after a quiet spell at once, the ones that follow within the linger
// together when it has passed.
func TestRecordSettlesAtMostOneBatchPerLinger(t *testing.T) {
	const linger = 200 * time.Millisecond
	p, err := New(Config{Senders: 1, BatchSize: 8, BatchLinger: linger}, slog.New(slog.NewTextHandler(io.Discard, nil)),
		prometheus.NewRegistry(), Deps{Store: newFakeStore(), Relays: []Relay{{Name: "p1", NewSession: func() Session { return (&countingSMTP{}).newSession() }}},
			DeadLetters: newFakeDLQ(), Retries: newFakeRetries()})
	if err != nil {
		t.Fatal(err)
	}
	src := newFakeSource(nil, true)
	in := make(chan decided)
	done := make(chan error, 1)
	go func() { done <- p.record(t.Context(), src, in, delay.New[*item](time.Now)) }()
	fate := func(offset int64) decided {
		return decided{it: &item{msg: consumer.Message{Topic: "t", Offset: offset}, span: noop.Span{}}, fate: fate{kind: fateDuplicate}}
	}
	waitDone := func(n int, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for src.doneCount() < n {
			if time.Since(start) > within {
				t.Fatalf("%d of %d fates settled after %s", src.doneCount(), n, within)
			}
			time.Sleep(time.Millisecond)
		}
		return time.Since(start)
	}

	start := time.Now()
	in <- fate(1)
	waitDone(1, linger/2)
	in <- fate(2)
	in <- fate(3)
	time.Sleep(linger / 4)
	if got := src.doneCount(); got != 1 {
		t.Fatalf("settled %d fates a quarter of the linger after the first batch, want 1", got)
	}
	waitDone(3, 2*linger)
	if took := time.Since(start); took < linger {
		t.Errorf("the second batch settled %s after the first, want at least the linger %s", took, linger)
	}
	close(in)
	if err := <-done; err != nil {
		t.Fatalf("record: %v", err)
	}
}
