package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/job"
)

// BenchmarkPipelinePerMail runs the worker's pipeline over b.N records, as
// Publisher encodes bench/e2e's jobs (1 KiB text body), sending each
// through a real go-mail session to the stack's smtp-sink: decode, hash,
// claim, build, render, SMTP, record. Kafka and PostgreSQL are the
// package's fakes, whose own bookkeeping (maps per record) is counted in
// B/op and allocs/op too; the sink runs in another process, so what it
// allocates is not. ns/op is wall time with 4 senders and depends on the
// machine's load; B/op and allocs/op do not, and cpu-ns/op (the process's
// CPU time per mail, GC included) much less.
func BenchmarkPipelinePerMail(b *testing.B) {
	if testing.Short() {
		b.Skip("-short: needs the stack's smtp-sink")
	}
	addr := testenv.SMTPSink()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		b.Skipf("no smtp-sink at %s (scripts/stack.sh up --with-sink): %v", addr, err)
	}
	_ = conn.Close()
	host, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	relay, err := sender.New(sender.Config{Host: host, Port: port}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}

	body := strings.Repeat("The quick brown fox jumps over the lazy dog, again and again and again.\n", 15)[:1024]
	run := time.Now().UnixNano()
	records := make([][]byte, b.N)
	for i := range records {
		j := job.Job{
			Version:   job.SchemaVersion,
			MessageID: fmt.Sprintf("bench%d.%d@postline.test", i, run),
			From:      "Postline Bench <bench@postline.test>",
			To:        []string{fmt.Sprintf("rcpt%d@sink.postline.test", i)},
			Subject:   fmt.Sprintf("bench mail %d", i),
			Text:      body,
			Priority:  job.PriorityNormal,
		}
		if records[i], err = json.Marshal(j); err != nil {
			b.Fatal(err)
		}
	}
	store := newFakeStore()
	p, err := New(Config{
		Senders:     4,
		BatchSize:   64,
		BatchLinger: time.Millisecond,
		RetryLimits: map[job.Priority]RetryLimit{
			job.PriorityUrgent: {MaxAttempts: 3, MaxAge: time.Hour},
			job.PriorityNormal: {MaxAttempts: 3, MaxAge: time.Hour},
			job.PriorityBulk:   {MaxAttempts: 3, MaxAge: time.Hour},
		},
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), Deps{
		Store:       store,
		Relays:      []Relay{{Name: "sink", NewSession: func() Session { return relay.NewSession() }}},
		DeadLetters: newFakeDLQ(),
		Retries:     newFakeRetries(),
	})
	if err != nil {
		b.Fatal(err)
	}
	src := newFakeSource(records, true)
	src.store = store
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()

	b.ReportAllocs()
	b.SetBytes(int64(len(records[0])))
	b.ResetTimer()
	cpu := processCPU()
	if err := p.Run(ctx, src); err != nil {
		b.Fatalf("Run: %v", err)
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	b.StopTimer()
	for i := range records {
		id := fmt.Sprintf("bench%d.%d@postline.test", i, run)
		if st := store.status(id); st != idempotency.StatusSent {
			b.Fatalf("%s is %s, want sent", id, st)
		}
	}
}

// processCPU is the CPU time the process has used, user and system, in
// nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
