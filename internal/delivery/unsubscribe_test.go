package delivery

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/unsubscribe"
	"github.com/postline/postline/job"
)

// TestUnsubscribeHeaders runs jobs through the pipeline with unsubscribe
// links configured: every recipient of bulk mail, and of a job that asks,
// is sent with URIs whose token names that recipient (its address, its
// index, the mail, its stream, tenant and life); other mail, and bulk mail
// with a List-Unsubscribe of its own, gets none.
func TestUnsubscribeHeaders(t *testing.T) {
	signer, err := unsubscribe.NewSigner([][]byte{[]byte("0123456789abcdef0123")})
	if err != nil {
		t.Fatal(err)
	}
	links, err := unsubscribe.NewLinks(unsubscribe.LinksConfig{Domain: "bounces.test"}, signer)
	if err != nil {
		t.Fatal(err)
	}
	bulk := func(id string, to ...string) job.Job {
		j := multiJob(id, to...)
		j.Priority = job.PriorityBulk
		return j
	}
	asks := multiJob("asks@x", "one@example.com")
	asks.Unsubscribe = true
	own := bulk("own@x", "one@example.com")
	own.Headers = map[string]string{"list-unsubscribe": "<https://shop.example/u/1>"}
	jobs := []job.Job{bulk("bulk@x", "Ada <ada@example.com>", "bob@example.com"), asks, multiJob("plain@x", "one@example.com"), own}
	want := map[string]string{"bulk@x": event.StreamBulk, "asks@x": event.StreamTransactional} // the mails with links, by stream
	lives := map[string]int64{"bulk@x": 7, "asks@x": 9}

	h := newFateHarness(t, func(string) *sender.Error { return nil }, nil)
	p, err := New(Config{Senders: 1, BatchSize: 4, BatchLinger: time.Millisecond, RecheckInterval: 5 * time.Millisecond,
		ConfirmWindow: time.Hour},
		slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), Deps{
			Store:        h.store,
			Relays:       []Relay{{Name: "p1", NewSession: func() Session { return h.session }}},
			DeadLetters:  h.dlq,
			Retries:      h.retries,
			Events:       h.events,
			Suppressions: h.sup,
			ReturnPaths:  fakeReturnPaths{},
			Unsubscribes: links,
		})
	if err != nil {
		t.Fatal(err)
	}
	h.pipeline = p
	var records [][]byte
	for _, j := range jobs {
		records = append(records, mustJSON(t, j))
	}
	h.store.seedLives(lives, records...)
	h.run(t, records)

	if len(h.session.envelopes) != len(jobs) {
		t.Fatalf("%d sends, want %d", len(h.session.envelopes), len(jobs))
	}
	withLinks := 0
	for _, env := range h.session.envelopes {
		for _, r := range env {
			// fakeReturnPaths names the mail in the return path.
			var j job.Job
			for _, jj := range jobs {
				if strings.HasPrefix(r.ReturnPath, "bounce+"+jj.MessageID+"-") {
					j = jj
				}
			}
			stream, wants := want[j.MessageID]
			if !wants {
				if r.ListUnsubscribe != nil {
					t.Errorf("%s to %s got URIs %q, want none", j.MessageID, r.Address, r.ListUnsubscribe)
				}
				continue
			}
			withLinks++
			if len(r.ListUnsubscribe) != 2 || !strings.HasPrefix(r.ListUnsubscribe[1], "mailto:unsubscribe+") {
				t.Fatalf("%s to %s: URIs %q, want a link and a mailto", j.MessageID, r.Address, r.ListUnsubscribe)
			}
			token, ok := strings.CutPrefix(r.ListUnsubscribe[0], "https://bounces.test/unsubscribe/")
			if !ok {
				t.Fatalf("link %q is not under the default base", r.ListUnsubscribe[0])
			}
			got, err := signer.Verify(token)
			idx := indexOf(j.Recipients(), r.Address)
			wantTok := unsubscribe.Token{Tenant: "acme", Stream: stream, Address: r.Address, MessageID: j.MessageID, Recipient: idx, Life: lives[j.MessageID]}
			if err != nil || got != wantTok {
				t.Errorf("%s to %s: token names %+v, %v; want %+v", j.MessageID, r.Address, got, err, wantTok)
			}
		}
	}
	if withLinks != 3 {
		t.Errorf("%d recipients got links, want 3", withLinks)
	}
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}
