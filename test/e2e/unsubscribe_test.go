package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	msgdkim "github.com/emersion/go-msgauth/dkim"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/dkim"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testkit"
	"github.com/postline/postline/internal/unsubscribe"
	"github.com/postline/postline/job"
)

// TestOneClickUnsubscribe runs RFC 8058 one-click unsubscribe through the
// real worker, receiver and webhook dispatcher. Bulk mail goes out
// DKIM-signed with a List-Unsubscribe (a link and a mailto) and
// List-Unsubscribe-Post per recipient, both under the signature, which an
// independent verifier accepts; a mail to two recipients names each in its
// own copy. A GET of the link and a POST of a forged token change nothing
// and are counted; the POST of List-Unsubscribe=One-Click to the link
// suppresses the address on its tenant's bulk stream only (a transactional
// mail to it still goes, the next bulk one does not), publishes an
// unsubscribed event that the webhook endpoint gets signed, and a repeated
// POST makes no second event. A mail to the mailto address does the same
// for its recipient, and for no other.
func TestOneClickUnsubscribe(t *testing.T) {
	s := newStack(t)
	relay := smtptest.NewServer(t)
	const domain = "bounces.e2e.postline.test"
	keys, _ := outcomeKeys(t, domain)
	tokens, err := unsubscribe.NewSigner([][]byte{[]byte(keys)})
	if err != nil {
		t.Fatal(err)
	}
	dkimSetting, lookup := unsubscribeDKIMKey(t, "news.e2e.test")
	addrs := freeAddrs(t, 2)
	smtpAddr, hooksAddr := addrs[0], addrs[1]
	recv := s.startReceiver(t, domain, keys, smtpAddr, map[string]string{"POSTLINE_HOOKS_ADDR": hooksAddr})
	sink := newWebhookSink(t)
	s.startDispatcher(t, sink)
	events := s.readEvents(t)
	// The links point at the receiver's public server: plain HTTP on
	// loopback here, an HTTPS proxy in production.
	w := startWorker(t, s.outcomeWorkerEnv("w1", relay.Addr(), domain, keys, map[string]string{
		"POSTLINE_DKIM_KEYS":       dkimSetting,
		"POSTLINE_UNSUBSCRIBE_URL": "http://" + hooksAddr + "/unsubscribe",
	}))
	w.WaitReady(readyTimeout)

	jobs := newJobs(2, "unsubscribe")
	for i := range jobs {
		jobs[i].From, jobs[i].Priority, jobs[i].Tenant = "News <news@news.e2e.test>", job.PriorityBulk, "acme"
	}
	jobs[0].To = []string{"Reader <reader@example.test>"}
	jobs[1].To = []string{"one@example.test", "Two <two@example.test>"}
	ids := s.publish(jobs...)
	testkit.Eventually(t, 30*time.Second, "three copies at the relay", func(context.Context) (bool, string) {
		return relay.Count() == 3, fmt.Sprintf("%d received", relay.Count())
	})

	// Every copy: signed over both headers, naming its own recipient.
	links := map[string][]string{} // by envelope recipient
	for _, m := range relay.Messages() {
		vs, err := msgdkim.VerifyWithOptions(bytes.NewReader(m.Data), &msgdkim.VerifyOptions{LookupTXT: lookup})
		if err != nil || len(vs) != 1 || vs[0].Err != nil {
			t.Fatalf("copy to %v: verifications %+v, %v; want one valid signature", m.To, vs, err)
		}
		signed := strings.ToLower(strings.Join(vs[0].HeaderKeys, ":"))
		for _, h := range []string{"list-unsubscribe", "list-unsubscribe-post"} {
			if !slices.Contains(strings.Split(signed, ":"), h) {
				t.Errorf("copy to %v: h= %q does not cover %s", m.To, signed, h)
			}
		}
		h, err := m.Header()
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Get("List-Unsubscribe-Post"); got != "List-Unsubscribe=One-Click" {
			t.Errorf("copy to %v: List-Unsubscribe-Post %q", m.To, got)
		}
		uris := listUnsubscribeURIs(h.Get("List-Unsubscribe"))
		if len(uris) != 2 || !strings.HasPrefix(uris[0], "http://"+hooksAddr+"/unsubscribe/") || !strings.HasPrefix(uris[1], "mailto:unsubscribe+") {
			t.Fatalf("copy to %v: List-Unsubscribe URIs %q, want the link and the mailto", m.To, uris)
		}
		tok, err := tokens.Verify(uris[0][strings.LastIndexByte(uris[0], '/')+1:])
		if err != nil || len(m.To) != 1 || tok.Address != m.To[0] || tok.Stream != event.StreamBulk || tok.Tenant != "acme" {
			t.Fatalf("copy to %v: the link's token names %+v, %v", m.To, tok, err)
		}
		if strings.Contains(uris[0], m.To[0]) {
			t.Errorf("copy to %v: the link carries the address in clear", m.To)
		}
		links[m.To[0]] = uris
	}
	link := links["reader@example.test"][0]

	metric := func(channel, result string) float64 {
		return recv.mustMetric("postline_unsubscribe_requests_total", "channel", channel, "result", result)
	}
	// A GET shows the page and changes nothing; a forged token changes
	// nothing.
	status, body := httpDo(t, http.MethodGet, link, "")
	if status != http.StatusOK || !strings.Contains(body, `<form method="post">`) {
		t.Fatalf("GET of the link: %d %s; want 200 and the form", status, body)
	}
	forged := []byte(link)
	forged[len(forged)-5] = map[bool]byte{true: 'a', false: 'b'}[forged[len(forged)-5] != 'a']
	if status, body := httpDo(t, http.MethodPost, string(forged), "List-Unsubscribe=One-Click"); status != http.StatusBadRequest {
		t.Fatalf("POST of a forged token: %d %s; want 400", status, body)
	}
	if metric("get", "ok") != 1 || metric("post", "forged") != 1 {
		t.Errorf("GET ok %v, POST forged %v; want 1 each", metric("get", "ok"), metric("post", "forged"))
	}
	if entries := s.unsubscribeEntries(t, "reader@example.test"); len(entries) != 0 {
		t.Fatalf("after the GET and the forgery: entries %v, want none", entries)
	}

	// The one-click POST.
	if status, body := httpDo(t, http.MethodPost, link, "List-Unsubscribe=One-Click"); status != http.StatusOK {
		t.Fatalf("one-click POST: %d %s; want 200", status, body)
	}
	if entries := s.unsubscribeEntries(t, "reader@example.test"); len(entries) != 1 || entries[0] != "acme/bulk/unsubscribe/one_click" {
		t.Fatalf("entries of reader@ = %v, want one unsubscribe on acme's bulk stream", entries)
	}
	lives, err := s.lives(t.Context(), ids)
	if err != nil {
		t.Fatal(err)
	}
	wantID := event.NewLifeID(ids[0], lives[ids[0]], 0, event.Unsubscribed, 0)
	testkit.Eventually(t, 30*time.Second, "the unsubscribed event on the topic and at the webhook endpoint", func(context.Context) (bool, string) {
		e, ok := events.find(ids[0], 0, event.Unsubscribed)
		return ok && e.ID == wantID && sink.has(wantID), fmt.Sprintf("event %+v (%v); webhooks %v", e, ok, sink.byType())
	})
	if e, _ := events.find(ids[0], 0, event.Unsubscribed); e.Recipient != "reader@example.test" || e.Stream != event.StreamBulk || e.Tenant != "acme" {
		t.Errorf("unsubscribed event = %+v", e)
	}
	if p := sink.problems(); len(p) > 0 {
		t.Errorf("webhook requests that did not verify: %v", p)
	}

	// Again: answered, nothing new.
	if status, _ := httpDo(t, http.MethodPost, link, "List-Unsubscribe=One-Click"); status != http.StatusOK {
		t.Fatalf("repeated POST: %d, want 200", status)
	}
	if metric("post", "ok") != 1 || metric("post", "replayed") != 1 {
		t.Errorf("POST ok %v, replayed %v; want 1 each", metric("post", "ok"), metric("post", "replayed"))
	}

	// By mail, for the second recipient of the two-recipient mail.
	mailto := strings.TrimPrefix(links["two@example.test"][1], "mailto:")
	if err := sendReport(smtpAddr, mailto, []byte("From: two@example.test\r\nSubject: unsubscribe\r\n\r\nunsubscribe\r\n")); err != nil {
		t.Fatalf("mail to the unsubscribe address: %v", err)
	}
	wantMailID := event.NewLifeID(ids[1], lives[ids[1]], 1, event.Unsubscribed, 0)
	testkit.Eventually(t, 30*time.Second, "the mailto's unsubscribed event", func(context.Context) (bool, string) {
		e, ok := events.find(ids[1], 1, event.Unsubscribed)
		return ok && e.ID == wantMailID && e.Recipient == "two@example.test" && sink.has(wantMailID), fmt.Sprintf("event %+v (%v)", e, ok)
	})
	if entries := s.unsubscribeEntries(t, "two@example.test"); len(entries) != 1 || entries[0] != "acme/bulk/unsubscribe/mailto" {
		t.Errorf("entries of two@ = %v, want one unsubscribe by mail on acme's bulk stream", entries)
	}
	if entries := s.unsubscribeEntries(t, "one@example.test"); len(entries) != 0 {
		t.Errorf("entries of one@ = %v: the other recipient of that mail was unsubscribed", entries)
	}
	if metric("mailto", "ok") != 1 {
		t.Errorf("mailto ok = %v, want 1", metric("mailto", "ok"))
	}

	// Bulk mail to reader@ is suppressed now; transactional mail still goes.
	after := newJobs(2, "after-unsubscribe")
	for i := range after {
		after[i].From, after[i].Tenant, after[i].To = "news@news.e2e.test", "acme", []string{"reader@example.test"}
	}
	after[0].Priority, after[1].Priority = job.PriorityBulk, job.PriorityUrgent
	afterIDs := s.publish(after...)
	testkit.Eventually(t, 30*time.Second, "the bulk mail suppressed and the transactional one sent", func(ctx context.Context) (bool, string) {
		st, err := s.statuses(ctx, afterIDs)
		return err == nil && st[afterIDs[0]] == "suppressed" && st[afterIDs[1]] == "sent", fmt.Sprintf("statuses %v %v", st, err)
	})
	if relay.Count() != 4 {
		t.Errorf("the relay got %d copies, want 4 (the transactional mail only after the unsubscribe)", relay.Count())
	}
	last := relay.Messages()[3]
	if h, _ := last.Header(); h.Get("List-Unsubscribe") != "" {
		t.Errorf("transactional mail without unsubscribe: true got List-Unsubscribe %q", h.Get("List-Unsubscribe"))
	}

	// Exactly one event per unsubscribe ever written, none for the rest.
	testkit.Eventually(t, 15*time.Second, "the receiver's published unsubscribed events", func(ctx context.Context) (bool, string) {
		n, err := recv.Metric(ctx, "postline_events_published_total", "type", string(event.Unsubscribed))
		return err == nil && n == 2, fmt.Sprintf("%v %v", n, err)
	})
	if n := sink.byType()[event.Unsubscribed]; n != 2 {
		t.Errorf("the webhook endpoint got %d unsubscribed events, want 2", n)
	}
}

// unsubscribeDKIMKey writes an Ed25519 key for domain and returns the
// POSTLINE_DKIM_KEYS setting and a TXT lookup that publishes it.
func unsubscribeDKIMKey(t *testing.T, domain string) (string, func(string) ([]string, error)) {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dkim.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	setting := domain + "=s1:" + path
	cfg, err := dkim.ParseKeys(setting)
	if err != nil {
		t.Fatal(err)
	}
	kr, err := dkim.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	records := map[string]string{}
	for _, k := range kr.Keys() {
		records[k.RecordName()] = k.TXTRecord()
	}
	return setting, func(name string) ([]string, error) {
		if r, ok := records[name]; ok {
			return []string{r}, nil
		}
		return nil, fmt.Errorf("no TXT record for %s", name)
	}
}

// listUnsubscribeURIs returns the URIs of a List-Unsubscribe value, the
// angle brackets taken off.
func listUnsubscribeURIs(v string) []string {
	var out []string
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if strings.HasPrefix(part, "<") && strings.HasSuffix(part, ">") {
			out = append(out, part[1:len(part)-1])
		}
	}
	return out
}

// httpDo sends a request with a form body (none when body is empty) and
// returns the status and body.
func httpDo(t *testing.T, method, link, body string) (int, string) {
	t.Helper()
	if _, err := url.Parse(link); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, link, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// unsubscribeEntries lists the suppression entries of address, of every
// tenant and stream, as tenant/stream/reason/source.
func (s *stack) unsubscribeEntries(t *testing.T, address string) []string {
	t.Helper()
	rows, err := s.db.Query(t.Context(), `SELECT tenant, stream, reason, source FROM postline_suppressions
		WHERE address = lower($1) ORDER BY tenant, stream`, address)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var tenant, stream, reason, source string
		if err := rows.Scan(&tenant, &stream, &reason, &source); err != nil {
			t.Fatal(err)
		}
		out = append(out, tenant+"/"+stream+"/"+reason+"/"+source)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
