package delivery

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/consumer"
)

// A partial batch goes to a waiting claimer at once; with no claimer
// waiting, or a batch already queued for one, it lingers.
func TestIntakeLingersOnlyWhenClaimersAreBusy(t *testing.T) {
	tests := []struct {
		name         string
		idleClaimers int32
		queued       int // batches already waiting in the claim queue
		wantAtOnce   bool
	}{
		{name: "a claimer waits", idleClaimers: 1, wantAtOnce: true},
		{name: "both claimers wait", idleClaimers: 2, wantAtOnce: true},
		{name: "claimers busy", idleClaimers: 0, wantAtOnce: false},
		{name: "a batch queued before it", idleClaimers: 1, queued: 1, wantAtOnce: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(Config{Senders: 1, BatchSize: 8, BatchLinger: time.Hour}, slog.New(slog.NewTextHandler(io.Discard, nil)),
				prometheus.NewRegistry(), Deps{Store: newFakeStore(), Relays: []Relay{{Name: "p1", NewSession: func() Session { return (&countingSMTP{}).newSession() }}},
					DeadLetters: newFakeDLQ(), Retries: newFakeRetries()})
			if err != nil {
				t.Fatal(err)
			}
			p.idleClaimers.Store(tt.idleClaimers)
			ctx, cancel := context.WithCancel(context.Background())
			in, out := make(chan consumer.Message), make(chan []*item, 2)
			for range tt.queued {
				out <- nil
			}
			done := make(chan error, 1)
			go func() { done <- p.intake(ctx, in, nil, out) }()
			in <- consumer.Message{Topic: "t", Partition: 0, Offset: 1, Value: []byte(`{}`)}

			got := len(out) > tt.queued
			for deadline := time.Now().Add(time.Second); !got && tt.wantAtOnce && time.Now().Before(deadline); got = len(out) > tt.queued {
				time.Sleep(time.Millisecond)
			}
			if !tt.wantAtOnce {
				time.Sleep(50 * time.Millisecond)
				got = len(out) > tt.queued
			}
			cancel()
			<-done
			if got != tt.wantAtOnce {
				t.Errorf("batch handed over within the linger = %v, want %v", got, tt.wantAtOnce)
			}
		})
	}
}

// A steady trickle is claimed in batches: after a partial batch went to an
// idle claimer, the next one waits out the claim gap (half of
// BatchLinger) even though a claimer waits again, and then goes whole.
func TestIntakeSpacesPartialBatchesByTheClaimGap(t *testing.T) {
	const linger = 200 * time.Millisecond // gap: 100 ms
	p, err := New(Config{Senders: 1, BatchSize: 8, BatchLinger: linger}, slog.New(slog.NewTextHandler(io.Discard, nil)),
		prometheus.NewRegistry(), Deps{Store: newFakeStore(), Relays: []Relay{{Name: "p1", NewSession: func() Session { return (&countingSMTP{}).newSession() }}},
			DeadLetters: newFakeDLQ(), Retries: newFakeRetries()})
	if err != nil {
		t.Fatal(err)
	}
	p.idleClaimers.Store(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in, out := make(chan consumer.Message), make(chan []*item, 4)
	done := make(chan error, 1)
	go func() { done <- p.intake(ctx, in, nil, out) }()
	defer func() { cancel(); <-done }()

	start := time.Now()
	in <- consumer.Message{Topic: "t", Offset: 1, Value: []byte(`{}`)}
	if first := <-out; len(first) != 1 || time.Since(start) > 40*time.Millisecond {
		t.Fatalf("first record: a batch of %d after %s, want 1 at once", len(first), time.Since(start))
	}
	in <- consumer.Message{Topic: "t", Offset: 2, Value: []byte(`{}`)}
	in <- consumer.Message{Topic: "t", Offset: 3, Value: []byte(`{}`)}
	second := <-out
	if took := time.Since(start); len(second) != 2 || took < 95*time.Millisecond || took >= linger {
		t.Errorf("second batch: %d records after %s, want 2 after the 100 ms gap and before the linger", len(second), took)
	}
}
