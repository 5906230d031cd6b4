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
