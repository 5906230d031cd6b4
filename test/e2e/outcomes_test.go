package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/bounce"
	"github.com/postline/postline/internal/report"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
)

// freeAddr returns a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeAddrs(t, 1)[0]
}

// freeAddrs returns n distinct loopback addresses nothing listens on. It
// holds all n ports open until it has them: the kernel may hand a port just
// closed straight back to the next bind to port 0, so two freeAddr calls in
// a row can return the same address.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}

// outcomeWorkerEnv points a worker at relay (no TLS, no AUTH) with
// per-recipient return paths of domain.
func (s *stack) outcomeWorkerEnv(name, relay, domain, keys string, overrides map[string]string) map[string]string {
	host, port, _ := net.SplitHostPort(relay)
	env := s.workerEnv(name, map[string]string{
		"POSTLINE_SMTP_HOST":        host,
		"POSTLINE_SMTP_PORT":        port,
		"POSTLINE_SMTP_TLS":         "none",
		"POSTLINE_SMTP_USERNAME":    "",
		"POSTLINE_SMTP_PASSWORD":    "",
		"POSTLINE_BOUNCE_DOMAIN":    domain,
		"POSTLINE_RETURN_PATH_KEYS": keys,
	})
	for k, v := range overrides {
		env[k] = v
	}
	return env
}

// TestPostfixBounceSuppressesTheAddress is the outcome loop with an MTA
// nobody here wrote: Postline hands two mails to a real Postfix, whose
// destination refuses one recipient with 550 5.1.1 after Postfix accepted
// the mail. Postfix returns an RFC 3464 report to that recipient's return
// path, and a success notice (action relayed) for the other. The receiver
// takes both: one recipient is bounced (hard) and suppressed, the other
// delivered; events and signed webhooks go out; the next mail to the
// bounced address is not sent.
func TestPostfixBounceSuppressesTheAddress(t *testing.T) {
	s := newStack(t)
	pf := testenv.Postfix(t)
	dest := smtptest.NewServer(t, smtptest.WithListener(pf.ListenDest(t)), smtptest.WithScript(func(c smtptest.Command) *smtptest.Reply {
		if c.Verb == smtptest.VerbRcpt && strings.HasPrefix(c.Arg, "gone@") {
			return &smtptest.Reply{Code: 550, Enhanced: "5.1.1", Text: "no such user here"}
		}
		return nil
	}))
	keys, _ := outcomeKeys(t, pf.BounceDomain)
	recv := s.startReceiver(t, pf.BounceDomain, keys, pf.BounceAddr, nil)
	sink := newWebhookSink(t)
	s.startDispatcher(t, sink)
	events := s.readEvents(t)
	w := startWorker(t, s.outcomeWorkerEnv("w1", pf.Addr, pf.BounceDomain, keys, nil))
	w.WaitReady(readyTimeout)

	jobs := newJobs(2, "postfix-dsn")
	jobs[0].To = []string{"Gone <gone@example.test>"}
	jobs[1].To = []string{"ok@example.test"}
	ids := s.publish(jobs...)
	gone, ok := rcptKey{ids[0], 0}, rcptKey{ids[1], 0}

	testkit.Eventually(t, 90*time.Second, "the bounce and the success notice applied", func(ctx context.Context) (bool, string) {
		rows, err := s.recipients(ctx, ids)
		if err != nil {
			return false, err.Error()
		}
		return rows[gone].state == "bounced" && rows[ok].state == "delivered", fmt.Sprintf("recipients %v; %s", rows, queueState(ctx, pf))
	})
	rows, _ := s.recipients(t.Context(), ids)
	if r := rows[gone]; r.bounceType != "hard" || r.status != "5.1.1" || r.source != report.SourceDSN {
		t.Errorf("bounced recipient = %+v, want hard 5.1.1 from a DSN", r)
	}
	if dest.Count() != 1 || !slices.Equal(dest.Messages()[0].To, []string{"ok@example.test"}) {
		t.Errorf("the destination got %d messages, want only the one to ok@", dest.Count())
	}
	conf, err := s.confirmations(t.Context(), ids)
	if err != nil || conf[ids[0]] != "cancelled" || conf[ids[1]] != "confirmed" {
		t.Errorf("confirmations = %v, %v; want the bounced mail cancelled and the delivered one confirmed", conf, err)
	}

	// The events, through the consumer helper, and the signed webhooks.
	lives, err := s.lives(t.Context(), ids)
	if err != nil || lives[ids[0]] == 0 {
		t.Fatalf("lives = %v, %v; want one for %s", lives, err, ids[0])
	}
	testkit.Eventually(t, 30*time.Second, "events and webhooks of both recipients", func(context.Context) (bool, string) {
		got := events.transitions(map[string]bool{ids[0]: true, ids[1]: true})
		want := map[rcptKey][]event.Type{gone: {event.Accepted, event.Bounced}, ok: {event.Accepted, event.Delivered}}
		bounced := event.NewLifeID(ids[0], lives[ids[0]], 0, event.Bounced, 0)
		return equalTransitions(got, want) && sink.has(bounced), fmt.Sprintf("events %v; webhooks %v", got, sink.byType())
	})
	if e, _ := events.find(ids[0], 0, event.Bounced); e.Bounce == nil || e.Bounce.Type != event.BounceHard || e.Bounce.Status != "5.1.1" ||
		e.Recipient != "gone@example.test" {
		t.Errorf("bounced event = %+v, want a hard 5.1.1 bounce of gone@example.test", e)
	}
	if p := sink.problems(); len(p) > 0 {
		t.Errorf("webhook requests that did not verify: %v", p)
	}
	if reason, found, err := s.suppressed(t.Context(), "gone@example.test", "transactional"); err != nil || !found || reason != "hard_bounce" {
		t.Fatalf("suppression of gone@ = %q, %v, %v; want hard_bounce", reason, found, err)
	}
	if n := recv.mustMetric("postline_outcome_reports_total", "source", "dsn", "result", "applied"); n < 2 {
		t.Errorf("receiver applied %v DSNs, want 2", n)
	}

	// The next mail to the bounced address is suppressed, not sent.
	again := newJobs(1, "postfix-dsn-again")
	again[0].To = []string{"gone@example.test"}
	id := s.publish(again...)[0]
	testkit.Eventually(t, 30*time.Second, "the next mail to gone@ suppressed", func(ctx context.Context) (bool, string) {
		st, err := s.statuses(ctx, []string{id})
		return err == nil && st[id] == "suppressed", fmt.Sprintf("status %v %v", st, err)
	})
	testkit.Eventually(t, 15*time.Second, "its suppressed event", func(context.Context) (bool, string) {
		got := events.transitions(map[string]bool{id: true})
		return equalTransitions(got, map[rcptKey][]event.Type{{id, 0}: {event.Suppressed}}), fmt.Sprint(got)
	})
	if dest.Count() != 1 {
		t.Errorf("the destination got %d messages after the suppressed one, want still 1", dest.Count())
	}
}

// queueState describes Postfix's queue for a failure message.
func queueState(ctx context.Context, pf testenv.PostfixEnv) string {
	q, err := pf.Queue(ctx)
	if err != nil {
		return "queue: " + err.Error()
	}
	return fmt.Sprintf("%d messages in Postfix's queue", len(q))
}

func equalTransitions(got, want map[rcptKey][]event.Type) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			return false
		}
	}
	return true
}

// TestComplaintSoftBounceAndForgery sends three mails through a scripted
// relay, then reports on them as mailbox services would, over SMTP to the
// receiver: a complaint (ARF) to the feedback address, a soft bounce (a
// DSN after the remote gave up on a full mailbox) to the return path, and
// a bounce to a return path whose token was made with another key. The
// complaint suppresses its address on its stream, the soft bounce
// suppresses nothing, and the forgery changes nothing and is counted.
func TestComplaintSoftBounceAndForgery(t *testing.T) {
	s := newStack(t)
	const domain = "bounces.e2e.postline.test"
	relay := smtptest.NewServer(t)
	keys, _ := outcomeKeys(t, domain)
	_, forger := outcomeKeys(t, domain)
	smtpAddr := freeAddr(t)
	recv := s.startReceiver(t, domain, keys, smtpAddr, nil)
	events := s.readEvents(t)
	w := startWorker(t, s.outcomeWorkerEnv("w1", relay.Addr(), domain, keys, nil))
	w.WaitReady(readyTimeout)

	jobs := newJobs(3, "reports")
	for i, local := range []string{"complains", "full", "forged"} {
		jobs[i].To = []string{local + "@example.test"}
	}
	ids := s.publish(jobs...)
	testkit.Eventually(t, 30*time.Second, "three mails at the relay", func(context.Context) (bool, string) {
		return relay.Count() == 3, fmt.Sprintf("%d received", relay.Count())
	})
	// A report that comes before the worker recorded the send is refused
	// for now (451) and offered again by a real MTA; this test sends each
	// report once, after the sends are recorded.
	testkit.Eventually(t, 30*time.Second, "the three sends recorded", func(ctx context.Context) (bool, string) {
		rows, err := s.recipients(ctx, ids)
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, r := range rows {
			if r.state == "accepted" {
				n++
			}
		}
		return n == 3, fmt.Sprintf("recipients %v", rows)
	})
	returnPath := map[string]string{}
	for _, m := range relay.Messages() {
		returnPath[m.MessageID] = m.From
		if !strings.HasPrefix(m.From, "bounce+") || !strings.HasSuffix(m.From, "@"+domain) {
			t.Fatalf("mail %s went out with return path %q, want its recipient's own", m.MessageID, m.From)
		}
	}

	now := time.Now()
	arf, err := bounce.BuildARF(bounce.ARF{To: "fbl@" + domain, Date: now, Recipients: []string{"complains@example.test"},
		ReturnPath: returnPath[ids[0]], MessageID: ids[0], OriginalTo: "complains@example.test", Subject: "reports 0"})
	if err != nil {
		t.Fatal(err)
	}
	soft, err := bounce.BuildDSN(bounce.DSN{Date: now, ReturnPath: returnPath[ids[1]], MessageID: ids[1], OriginalTo: "full@example.test",
		Recipients: []report.Report{{Kind: report.Bounced, Recipient: "full@example.test", Status: "4.2.2", Code: 452,
			Diagnostic: "452 4.2.2 mailbox full, giving up after 5 days"}}})
	if err != nil {
		t.Fatal(err)
	}
	forgedPath := "bounce+" + forger.Token(ids[2], 0) + "@" + domain
	forged, err := bounce.BuildDSN(bounce.DSN{Date: now, ReturnPath: forgedPath, MessageID: ids[2], OriginalTo: "forged@example.test",
		Recipients: []report.Report{{Kind: report.Bounced, Recipient: "forged@example.test", Status: "5.1.1", Code: 550,
			Diagnostic: "550 5.1.1 no such user"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		rcpt string
		raw  []byte
	}{{"fbl@" + domain, arf}, {returnPath[ids[1]], soft}, {forgedPath, forged}} {
		if err := sendReport(smtpAddr, r.rcpt, r.raw); err != nil {
			t.Fatalf("report to %s: %v", r.rcpt, err)
		}
	}

	testkit.Eventually(t, 30*time.Second, "the complaint and the soft bounce applied", func(ctx context.Context) (bool, string) {
		rows, err := s.recipients(ctx, ids)
		if err != nil {
			return false, err.Error()
		}
		return rows[rcptKey{ids[0], 0}].state == "complained" && rows[rcptKey{ids[1], 0}].state == "bounced",
			fmt.Sprintf("recipients %v", rows)
	})
	testkit.Eventually(t, 15*time.Second, "the forgery counted", func(ctx context.Context) (bool, string) {
		n, err := recv.Metric(ctx, "postline_outcome_reports_total", "result", "forged")
		return err == nil && n == 1, fmt.Sprintf("forged reports %v %v", n, err)
	})
	rows, _ := s.recipients(t.Context(), ids)
	if r := rows[rcptKey{ids[1], 0}]; r.bounceType != "soft" || r.status != "4.2.2" {
		t.Errorf("soft-bounced recipient = %+v, want soft 4.2.2", r)
	}
	if r := rows[rcptKey{ids[2], 0}]; r.state != "accepted" {
		t.Errorf("the recipient of the forged report is %q, want still accepted", r.state)
	}
	ctx := t.Context()
	if reason, found, _ := s.suppressed(ctx, "complains@example.test", "transactional"); !found || reason != "complaint" {
		t.Errorf("complaint suppression = %q, %v; want complaint", reason, found)
	}
	if _, found, _ := s.suppressed(ctx, "complains@example.test", "bulk"); found {
		t.Error("a complaint on transactional mail suppressed the address on the bulk stream")
	}
	for _, addr := range []string{"full@example.test", "forged@example.test"} {
		if _, found, _ := s.suppressed(ctx, addr, "transactional"); found {
			t.Errorf("%s is suppressed; a soft bounce or a forged report must not suppress", addr)
		}
	}
	testkit.Eventually(t, 15*time.Second, "exactly the transitions on the events topic", func(context.Context) (bool, string) {
		got := events.transitions(map[string]bool{ids[0]: true, ids[1]: true, ids[2]: true})
		want := map[rcptKey][]event.Type{
			{ids[0], 0}: {event.Accepted, event.Complained},
			{ids[1], 0}: {event.Accepted, event.Bounced},
			{ids[2], 0}: {event.Accepted},
		}
		return equalTransitions(got, want), fmt.Sprint(got)
	})
	if e, _ := events.find(ids[0], 0, event.Complained); e.FeedbackType != "abuse" {
		t.Errorf("complained event = %+v, want feedback type abuse", e)
	}

}
