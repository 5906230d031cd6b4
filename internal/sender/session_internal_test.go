package sender

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/job"
)

// TestSessionRetiresIdleConnection moves the relay's clock instead of
// waiting: a connection idle past IdleTimeout is closed with QUIT and the
// next Send dials a new one before sending.
func TestSessionRetiresIdleConnection(t *testing.T) {
	srv := smtptest.NewServer(t)
	r, err := New(Config{Host: srv.Host(), Port: srv.Port(), IdleTimeout: time.Minute}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	r.now = func() time.Time { return now }
	s := r.NewSession()
	defer s.Close()

	send := func(i int) {
		t.Helper()
		j := &job.Job{MessageID: "idle" + string(rune('a'+i)) + "@test", From: "a@example.com", To: []string{"b@example.com"}, Text: "x"}
		if err := s.Send(context.Background(), j); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	send(0)
	now = now.Add(59 * time.Second)
	send(1)
	if srv.Connections() != 1 {
		t.Fatalf("Connections = %d after an idle time within IdleTimeout, want 1", srv.Connections())
	}
	now = now.Add(61 * time.Second)
	send(2)
	if srv.Connections() != 2 {
		t.Fatalf("Connections = %d after an idle time past IdleTimeout, want 2", srv.Connections())
	}
	deadline := time.Now().Add(5 * time.Second)
	for srv.Active() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Active = %d, want 1: the idle connection was not closed", srv.Active())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWatchedConnNotesFailedWrites checks the write tracking Ambiguous
// relies on: a failed Write is noted, successful ones are not.
func TestWatchedConnNotesFailedWrites(t *testing.T) {
	client, server := net.Pipe()
	wc := &watchedConn{Conn: client}
	defer wc.Close()
	go func() { _, _ = io.Copy(io.Discard, server) }()
	if _, err := wc.Write([]byte("DATA\r\n")); err != nil {
		t.Fatal(err)
	}
	if wc.writeFailed.Load() {
		t.Fatal("writeFailed after a successful write")
	}
	_ = server.Close()
	if _, err := wc.Write([]byte(".\r\n")); err == nil {
		t.Fatal("write to a closed pipe succeeded")
	}
	if !wc.writeFailed.Load() {
		t.Error("writeFailed not set after a failed write")
	}
}
