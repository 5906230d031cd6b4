package sender

import (
	"bytes"
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/job"
)

// TestPipeliningSendThroughPostfix sends a mail with three recipients, one
// of them with its own return path, through the stack's Postfix, which
// advertises PIPELINING: the session sends its envelopes with pipelining, Postfix takes
// them, and every recipient reaches the destination Postfix relays to.
// Postfix, unlike go-smtp, checks a client's pipelining against RFC 2920:
// it logs "improper command pipelining" (and refuses it with
// reject_unauth_pipelining), which must not show in its log. The same
// mail goes through a second session with pipelining turned off in its
// relay's config (NoPipelining), which sends one command per round trip.
func TestPipeliningSendThroughPostfix(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run("NoPipelining="+strconv.FormatBool(off), func(t *testing.T) { sendThroughPostfix(t, off) })
	}
}

func sendThroughPostfix(t *testing.T, noPipelining bool) {
	p, dest, r := postfixRelay(t, Config{NoPipelining: noPipelining})
	s := r.NewSession()
	defer s.Close()

	j := &job.Job{
		Version:   job.SchemaVersion,
		MessageID: testenv.UniqueName("pipelining") + "@test.postline",
		From:      "sender@example.com",
		To:        []string{"ada@example.test", "grace@example.test"},
		Cc:        []string{"edsger@example.test"},
		Subject:   "pipelining",
		Text:      "hello\r\n.leading dot, stuffed on the wire\r\n",
	}
	rcpts := Recipients(j, "")
	rcpts[2].ReturnPath = "bounce+edsger@example.com"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := s.SendTo(ctx, j, rcpts)
	if err != nil || len(res.Refused) != 0 || !slices.Equal(res.Accepted, []int{0, 1, 2}) {
		t.Fatalf("SendTo: %+v, %v; want all three accepted", res, err)
	}
	if s.sc == nil {
		t.Fatal("the session dropped its connection")
	}
	if offered, _ := s.sc.Extension("PIPELINING"); !offered {
		t.Fatal("Postfix did not offer PIPELINING")
	}
	if s.pipelining() == noPipelining {
		t.Fatalf("the session uses pipelining: %v, with NoPipelining %v", s.pipelining(), noPipelining)
	}

	want := []string{"ada@example.test", "edsger@example.test", "grace@example.test"}
	for {
		var got []string
		for _, m := range dest.Messages() {
			if m.MessageID != j.MessageID {
				continue
			}
			got = append(got, m.To...)
			if !bytes.Contains(m.Data, []byte("\r\n.leading dot, stuffed on the wire\r\n")) {
				t.Errorf("the message lost its leading-dot line (dot-stuffing):\n%s", m.Data)
			}
		}
		slices.Sort(got)
		if slices.Equal(got, want) {
			if log := p.LogSince(); strings.Contains(log, "improper command pipelining") {
				t.Errorf("Postfix saw improper pipelining:\n%s", log)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the destination got %q, want %q\nPostfix log:\n%s", got, want, p.LogSince())
		}
		time.Sleep(50 * time.Millisecond) // Postfix relays on its own schedule; nothing to wait on
	}
}

// TestChainedSendsThroughPostfix sends three mails through the stack's
// Postfix with SendToThen, each offering the next: the second and third
// envelopes go out in the same write as the message before them. Postfix
// checks a client's pipelining against RFC 2920 and logs what it finds
// improper; it must take all three, on one connection, and log nothing of
// the kind.
func TestChainedSendsThroughPostfix(t *testing.T) {
	p, dest, r := postfixRelay(t, Config{})
	s := r.NewSession()
	defer s.Close()

	var jobs []*job.Job
	for i := range 3 {
		jobs = append(jobs, &job.Job{
			Version:   job.SchemaVersion,
			MessageID: testenv.UniqueName("chained"+strconv.Itoa(i)) + "@test.postline",
			From:      "sender@example.com",
			To:        []string{"ada@example.test"},
			Subject:   "chained",
			Text:      "hello\r\n",
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, j := range jobs {
		then := func() (*job.Job, []Recipient, bool) {
			if i+1 == len(jobs) {
				return nil, nil, false
			}
			return jobs[i+1], Recipients(jobs[i+1], ""), true
		}
		res, chained, err := s.SendToThen(ctx, j, Recipients(j, ""), then)
		if err != nil || !slices.Equal(res.Accepted, []int{0}) {
			t.Fatalf("mail %d: %+v, %v", i, res, err)
		}
		if want := i+1 < len(jobs); chained != want {
			t.Fatalf("mail %d: chained %v, want %v", i, chained, want)
		}
		if i > 0 && s.sent != i+1 {
			t.Fatalf("mail %d went on connection transaction %d: the chain redialled", i, s.sent)
		}
	}

	for {
		got := map[string]bool{}
		for _, m := range dest.Messages() {
			got[m.MessageID] = true
		}
		if got[jobs[0].MessageID] && got[jobs[1].MessageID] && got[jobs[2].MessageID] {
			if log := p.LogSince(); strings.Contains(log, "improper command pipelining") {
				t.Errorf("Postfix saw improper pipelining:\n%s", log)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the destination got %v, want all three\nPostfix log:\n%s", got, p.LogSince())
		}
		time.Sleep(50 * time.Millisecond) // Postfix relays on its own schedule; nothing to wait on
	}
}

// postfixRelay returns the stack's Postfix, the destination it relays to,
// and a Relay named "postfix" on it with cfg's other settings.
func postfixRelay(t *testing.T, cfg Config) (testenv.PostfixEnv, *smtptest.Server, *Relay) {
	t.Helper()
	p := testenv.Postfix(t)
	dest := smtptest.NewServer(t, smtptest.WithListener(p.ListenDest(t)))
	host, portText, err := net.SplitHostPort(p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name, cfg.Host, cfg.Port = "postfix", host, port
	r, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, dest, r
}
