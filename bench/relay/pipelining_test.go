package relay_test

import (
	"context"
	"fmt"
	"net"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/bench/relay"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/job"
)

// rawConn dials the relay and reads its greeting, for tests that write
// commands the way a client library would not.
func rawConn(t *testing.T, r *relay.Relay) *textproto.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c := textproto.NewConn(nc)
	t.Cleanup(func() { _ = c.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := c.ReadResponse(220); err != nil {
		t.Fatalf("greeting: %v", err)
	}
	return c
}

// TestRelayAdvertisesPipelining checks that PIPELINING is in the EHLO reply
// exactly when Config.Pipelining says so.
func TestRelayAdvertisesPipelining(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelining=%v", on), func(t *testing.T) {
			r := start(t, relay.Config{Pipelining: on})
			c := rawConn(t, r)
			if err := c.PrintfLine("EHLO client.test"); err != nil {
				t.Fatal(err)
			}
			_, msg, err := c.ReadResponse(250)
			if err != nil {
				t.Fatalf("EHLO: %v", err)
			}
			lines := strings.Split(msg, "\n")
			got := false
			for _, l := range lines {
				got = got || l == "PIPELINING"
			}
			if got != on {
				t.Errorf("EHLO reply %q: PIPELINING listed %v, want %v", lines, got, on)
			}
			if !strings.Contains(msg, "8BITMIME") {
				t.Errorf("EHLO reply %q lost the other extensions", lines)
			}
		})
	}
}

// TestRelayAnswersPipelinedCommands writes whole envelopes in one write,
// as RFC 2920 allows, and checks that the replies come in order, in one
// write per group, each group paying RoundTripDelay once.
func TestRelayAnswersPipelinedCommands(t *testing.T) {
	const delay = 30 * time.Millisecond
	cfg := relay.Config{Pipelining: true, PermanentReject: 0.5, Seed: 7, RoundTripDelay: delay}
	var ok, rejected string
	for i := 0; ok == "" || rejected == ""; i++ {
		if cfg.Rejects(rcpt(i)) {
			rejected = rcpt(i)
		} else {
			ok = rcpt(i)
		}
	}
	tests := []struct {
		name      string
		rcpts     []string
		want      []int // reply codes after MAIL's, in order: each RCPT, then DATA
		delivered bool
	}{
		{"accepted", []string{ok}, []int{250, 354}, true},
		{"one of two refused", []string{rejected, ok}, []int{550, 250, 354}, true},
		{"every recipient refused", []string{rejected}, []int{550, 502}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := start(t, cfg)
			c := rawConn(t, r)
			if err := c.PrintfLine("EHLO client.test"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.ReadResponse(250); err != nil {
				t.Fatal(err)
			}
			before := r.Stats()

			var group strings.Builder
			group.WriteString("MAIL FROM:<sender@example.com>\r\n")
			for _, to := range tt.rcpts {
				group.WriteString("RCPT TO:<" + to + ">\r\n")
			}
			group.WriteString("DATA\r\n")
			start := time.Now()
			if _, err := c.W.WriteString(group.String()); err != nil {
				t.Fatal(err)
			}
			if err := c.W.Flush(); err != nil {
				t.Fatal(err)
			}
			if code, _, err := c.ReadCodeLine(250); err != nil {
				t.Fatalf("MAIL: %d %v", code, err)
			}
			for i, want := range tt.want {
				code, msg, _ := c.ReadResponse(0)
				if code != want {
					t.Errorf("reply %d after MAIL: %d %s, want %d", i+1, code, msg, want)
				}
			}
			if elapsed := time.Since(start); elapsed < delay {
				t.Errorf("group answered after %s, want at least the round trip delay %s", elapsed, delay)
			}
			if got := r.Stats().ReplyWrites - before.ReplyWrites; got != 1 {
				t.Errorf("%d reply writes for one pipelined group, want 1", got)
			}
			if !tt.delivered {
				return
			}
			w := c.DotWriter()
			if _, err := w.Write([]byte("Subject: pipelined\r\n\r\nhello\r\n")); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.ReadResponse(250); err != nil {
				t.Fatalf("final dot: %v", err)
			}
			if st := r.Stats(); st.Accepted != 1 || st.Transactions != 1 || st.EnvelopeCommands != int64(len(tt.rcpts)+2) {
				t.Errorf("Stats accepted %d transactions %d envelope commands %d, want 1, 1 and %d",
					st.Accepted, st.Transactions, st.EnvelopeCommands, len(tt.rcpts)+2)
			}
		})
	}
}

// TestSenderRoundTrips counts what the project's sender costs per mail:
// with PIPELINING it waits for two replies per single-recipient mail (the
// envelope, the final dot), without it for four (MAIL, RCPT, DATA, the
// final dot), and with each mail chained behind the one before
// (SendToThen) for one (the final dot and the next envelope share a write
// and the relay answers both in one), plus one for the first envelope; the
// connection adds three (greeting, EHLO, QUIT). With a round trip delay,
// time follows the count.
func TestSenderRoundTrips(t *testing.T) {
	const (
		mails = 10
		delay = 10 * time.Millisecond
	)
	tests := []struct {
		name       string
		pipelining bool
		chained    bool
		perMail    int64
		once       int64 // for the first mail
	}{
		{"pipelining=false", false, false, 4, 0},
		{"pipelining=true", true, false, 2, 0},
		{"pipelining=true/chained", true, true, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := start(t, relay.Config{Pipelining: tt.pipelining, RoundTripDelay: delay})
			sess := newSender(t, r).NewSession()
			begin := time.Now()
			for i := range mails {
				j := mailJob(i)
				then := func() (*job.Job, []sender.Recipient, bool) {
					if !tt.chained || i+1 == mails {
						return nil, nil, false
					}
					next := mailJob(i + 1)
					return next, sender.Recipients(next, ""), true
				}
				if _, _, err := sess.SendToThen(context.Background(), j, sender.Recipients(j, ""), then); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
			}
			if err := sess.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			elapsed := time.Since(begin)
			st := r.Stats()
			wantWrites := 3 + tt.once + tt.perMail*mails
			if st.Accepted != mails || st.Transactions != mails || st.ReplyWrites != wantWrites {
				t.Errorf("accepted %d transactions %d reply writes %d, want %d, %d and %d",
					st.Accepted, st.Transactions, st.ReplyWrites, mails, mails, wantWrites)
			}
			// The client writes once per reply it waits for, bar the
			// greeting: EHLO, QUIT and perMail writes per mail.
			if wantReads := 2 + tt.once + tt.perMail*mails; st.Reads != wantReads {
				t.Errorf("reads %d, want %d", st.Reads, wantReads)
			}
			// Every reply write waits the delay but the last, QUIT's 221,
			// which the relay writes as it closes.
			if min := time.Duration(wantWrites-1) * delay; elapsed < min {
				t.Errorf("took %s, want at least %d round trips of %s", elapsed, wantWrites-1, delay)
			}
			t.Logf("%d mails: %.2f reply writes and %.2f reads per transaction, %s",
				mails, st.PerTransaction(st.ReplyWrites), st.PerTransaction(st.Reads), elapsed.Round(time.Millisecond))
		})
	}
}

// BenchmarkSenderPipelining measures one sender session against a relay
// whose replies cost 5 ms, with and without PIPELINING and with each mail
// chained behind the one before (SendToThen), in the two latency models:
// per round trip (RoundTripDelay: the network) and per command (ReplyDelay:
// the relay's own work on MAIL, RCPT and the final dot); and without any
// delay, where ns/op is the CPU of the sender and the in-process relay
// together. It reports mails/s, the round trips (reply writes) per mail and
// the client's writes per mail:
//
//	go test -run '^$' -bench SenderPipelining -benchtime 200x ./bench/relay
func BenchmarkSenderPipelining(b *testing.B) {
	const delay = 5 * time.Millisecond
	for _, model := range []struct {
		name string
		cfg  relay.Config
	}{
		{"round-trip-delay=5ms", relay.Config{RoundTripDelay: delay}},
		{"reply-delay=5ms", relay.Config{ReplyDelay: delay}},
		{"no-delay", relay.Config{}},
	} {
		for _, mode := range []struct {
			name                string
			pipelining, chained bool
		}{
			{"pipelining=false", false, false},
			{"pipelining=true", true, false},
			{"pipelining=true/chained", true, true},
		} {
			b.Run(model.name+"/"+mode.name, func(b *testing.B) {
				cfg := model.cfg
				cfg.Pipelining = mode.pipelining
				r := start(b, cfg)
				sess := newSender(b, r).NewSession()
				defer func() { _ = sess.Close() }()
				if err := sess.Send(context.Background(), mailJob(-1)); err != nil { // dial outside the timing
					b.Fatal(err)
				}
				r.Reset()
				b.ResetTimer()
				for i := range b.N {
					j := mailJob(i)
					then := func() (*job.Job, []sender.Recipient, bool) {
						if !mode.chained || i+1 == b.N {
							return nil, nil, false
						}
						next := mailJob(i + 1)
						return next, sender.Recipients(next, ""), true
					}
					if _, _, err := sess.SendToThen(context.Background(), j, sender.Recipients(j, ""), then); err != nil {
						b.Fatalf("send %d: %v", i, err)
					}
				}
				b.StopTimer()
				st := r.Stats()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "mails/s")
				b.ReportMetric(st.PerTransaction(st.ReplyWrites), "round-trips/mail")
				b.ReportMetric(st.PerTransaction(st.Reads), "client-writes/mail")
			})
		}
	}
}
