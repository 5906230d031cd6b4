package sender_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/testenv"
)

// TestMailpit sends through a real Mailpit on one session and checks that
// every Message-ID arrives.
func TestMailpit(t *testing.T) {
	mp := testenv.StartMailpit(t) // skips under -short
	reg := prometheus.NewRegistry()
	relay, err := sender.New(sender.Config{Name: "mailpit", Host: mp.SMTPHost(), Port: mp.SMTPPort()}, testLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	s := relay.NewSession()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const n = 20
	var want []string
	for i := range n {
		j := testJob(t, i)
		want = append(want, j.MessageID)
		if err := s.Send(ctx, j); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := mp.WaitCount(ctx, n); err != nil {
		t.Fatal(err)
	}
	got, err := mp.MessageIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Mailpit has Message-IDs %q, want %q", got, want)
	}
	if dials := value(t, reg, "postline_sender_dials_total", "result", "ok"); dials != 1 {
		t.Errorf("dials_total{ok} = %v, want 1: the session should reuse its connection", dials)
	}
}
