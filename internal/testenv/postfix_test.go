package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
)

// Through the stack's Postfix: a recipient the destination refuses with
// 550 5.1.1 comes back to the envelope sender as an RFC 3464 report,
// delivered to the bounce receiver.
func TestPostfixReturnsFailureReport(t *testing.T) {
	p := Postfix(t)
	dest := serveSMTP(t, p.ListenDest(t), false)
	bounces := serveSMTP(t, p.ListenBounce(t), false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	id := UniqueName("dsn")
	sender := "bounce+abc@" + p.BounceDomain
	start := time.Now()
	sendThrough(t, p.Addr, sender, id, "nobody@example.test", smtp.DSNReturnHeaders, nil)

	got, err := bounces.wait(ctx, func(m received) bool { return containsFold(m.to, sender) })
	if err != nil {
		t.Fatalf("no report reached the bounce receiver: %v\nPostfix log:\n%s", err, p.LogSince())
	}
	t.Logf("failure report reached the bounce receiver %s after the mail was accepted", time.Since(start).Round(time.Millisecond))
	if got.from != "" {
		t.Errorf("report's envelope sender = %q, want the null sender", got.from)
	}
	r := parseReport(t, got.data)
	if want := "<" + id + "@postline.test>"; !strings.Contains(r.returned, want) {
		t.Errorf("returned headers do not hold Message-ID %s:\n%s", want, r.returned)
	}
	if v := r.perMessage.Get("Original-Envelope-Id"); v != id {
		t.Errorf("Original-Envelope-Id = %q, want %q", v, id)
	}
	if len(r.recipients) != 1 {
		t.Fatalf("report has %d recipient groups, want 1: %v", len(r.recipients), r.recipients)
	}
	rcpt := r.recipients[0]
	for field, want := range map[string]string{
		"Final-Recipient": "rfc822; nobody@example.test",
		"Action":          "failed",
		"Status":          "5.1.1",
	} {
		if v := rcpt.Get(field); !strings.EqualFold(v, want) {
			t.Errorf("%s = %q, want %q", field, v, want)
		}
	}
	if v := rcpt.Get("Diagnostic-Code"); !strings.Contains(v, "550 5.1.1 no such user") {
		t.Errorf("Diagnostic-Code = %q, want the destination's reply", v)
	}
	if n := dest.count(); n != 0 {
		t.Errorf("destination accepted %d messages, want 0 (its only recipient was refused)", n)
	}
	if err := p.WaitQueueEmpty(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("report as delivered:\n%s", got.data)
}

// Through the stack's Postfix: a recipient the destination accepts is
// delivered, and with NOTIFY=SUCCESS the sender hears of it when, and only
// when, the destination does not offer DSN itself.
func TestPostfixSuccessNotification(t *testing.T) {
	for _, tc := range []struct {
		name       string
		destDSN    bool
		wantAction string // "" when no report is expected
	}{
		{name: "destination without DSN", destDSN: false, wantAction: "relayed"},
		{name: "destination with DSN", destDSN: true, wantAction: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Postfix(t)
			dest := serveSMTP(t, p.ListenDest(t), tc.destDSN)
			bounces := serveSMTP(t, p.ListenBounce(t), false)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			id := UniqueName("ok")
			sender := "bounce+ok@" + p.BounceDomain
			notify := []smtp.DSNNotify{smtp.DSNNotifySuccess, smtp.DSNNotifyFailure}
			start := time.Now()
			sendThrough(t, p.Addr, sender, id, "alice@example.test", smtp.DSNReturnHeaders, notify)

			delivered, err := dest.wait(ctx, func(m received) bool { return m.messageID == id+"@postline.test" })
			if err != nil {
				t.Fatalf("the destination did not receive the mail: %v\nPostfix log:\n%s", err, p.LogSince())
			}
			t.Logf("delivered to the destination %s after the mail was accepted", time.Since(start).Round(time.Millisecond))
			if delivered.from != sender || !containsFold(delivered.to, "alice@example.test") {
				t.Errorf("destination saw MAIL FROM %q RCPT %q, want %q and alice@example.test", delivered.from, delivered.to, sender)
			}
			t.Logf("destination saw RET=%q ENVID=%q NOTIFY=%q ORCPT=%q", delivered.ret, delivered.envid, delivered.notify, delivered.orcpt)
			if tc.destDSN && (delivered.envid != id || delivered.notify != "SUCCESS,FAILURE") {
				t.Errorf("a DSN-capable destination got ENVID=%q NOTIFY=%q, want %q and SUCCESS,FAILURE passed on",
					delivered.envid, delivered.notify, id)
			}

			// Postfix writes a success notice before it removes the mail
			// from its queue, and removes the notice once delivered: with an
			// empty queue every notice has reached the bounce receiver.
			if err := p.WaitQueueEmpty(ctx); err != nil {
				t.Fatalf("%v\nPostfix log:\n%s", err, p.LogSince())
			}
			var reports []received
			for _, m := range bounces.messages() {
				if containsFold(m.to, sender) {
					reports = append(reports, m)
				}
			}
			if tc.wantAction == "" {
				if len(reports) != 0 {
					t.Fatalf("got %d notices, want none:\n%s", len(reports), reports[0].data)
				}
				t.Logf("no notice: Postfix passed NOTIFY on to the DSN-capable destination")
				return
			}
			if len(reports) != 1 {
				t.Fatalf("got %d notices, want 1\nPostfix log:\n%s", len(reports), p.LogSince())
			}
			t.Logf("success notice reached the bounce receiver %s after the mail was accepted", time.Since(start).Round(time.Millisecond))
			r := parseReport(t, reports[0].data)
			if v := r.perMessage.Get("Original-Envelope-Id"); v != id {
				t.Errorf("Original-Envelope-Id = %q, want %q", v, id)
			}
			if len(r.recipients) != 1 {
				t.Fatalf("notice has %d recipient groups, want 1: %v", len(r.recipients), r.recipients)
			}
			rcpt := r.recipients[0]
			if v := rcpt.Get("Action"); v != tc.wantAction {
				t.Errorf("Action = %q, want %q", v, tc.wantAction)
			}
			if v := rcpt.Get("Final-Recipient"); !strings.EqualFold(v, "rfc822; alice@example.test") {
				t.Errorf("Final-Recipient = %q", v)
			}
			if v := rcpt.Get("Status"); !strings.HasPrefix(v, "2.") {
				t.Errorf("Status = %q, want 2.x.x", v)
			}
			t.Logf("notice as delivered:\n%s", reports[0].data)
		})
	}
}

// Through the stack's Postfix: a recipient the destination keeps deferring
// with 451 is retried every few seconds and returned as failed once the mail
// is older than the queue lifetime (30 s), with the last 4.x.x status.
func TestPostfixExpiresDeferredMail(t *testing.T) {
	p := Postfix(t)
	dest := serveSMTP(t, p.ListenDest(t), false)
	bounces := serveSMTP(t, p.ListenBounce(t), false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	id := UniqueName("late")
	sender := "bounce+late@" + p.BounceDomain
	start := time.Now()
	sendThrough(t, p.Addr, sender, id, "busy@example.test", smtp.DSNReturnHeaders, nil)

	got, err := bounces.wait(ctx, func(m received) bool { return containsFold(m.to, sender) })
	if err != nil {
		t.Fatalf("no report reached the bounce receiver: %v\nPostfix log:\n%s", err, p.LogSince())
	}
	elapsed := time.Since(start)
	attempts := dest.refused("busy@example.test")
	t.Logf("failure report after %s and %d delivery attempts", elapsed.Round(time.Millisecond), attempts)
	// Postfix keeps the arrival time and its clock in whole seconds, so a
	// mail that arrived late in one second can expire up to a second before
	// 30 s of wall time have passed (seen in CI at 29.1 s).
	if elapsed < 29*time.Second {
		t.Errorf("report after %s, before the 30 s queue lifetime (less the second of Postfix's clock)", elapsed)
	}
	if attempts < 3 {
		t.Errorf("destination saw %d attempts in %s, want retries every few seconds", attempts, elapsed)
	}
	r := parseReport(t, got.data)
	if len(r.recipients) != 1 {
		t.Fatalf("report has %d recipient groups, want 1: %v", len(r.recipients), r.recipients)
	}
	rcpt := r.recipients[0]
	if v := rcpt.Get("Action"); v != "failed" {
		t.Errorf("Action = %q, want failed", v)
	}
	if v := rcpt.Get("Status"); v != "4.2.1" {
		t.Errorf("Status = %q, want the last deferral's 4.2.1", v)
	}
	if v := rcpt.Get("Diagnostic-Code"); !strings.Contains(v, "451 4.2.1 mailbox busy") {
		t.Errorf("Diagnostic-Code = %q, want the destination's last reply", v)
	}
	if err := p.WaitQueueEmpty(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("delivery-status of the expired mail:\n%v\n%v", r.perMessage, rcpt)
}

func TestPostfixQueueHelpers(t *testing.T) {
	p := Postfix(t)
	if p.ConfigDir == "" {
		t.Skip("POSTLINE_TEST_POSTFIX_CONFIG is unset: run eval \"$(scripts/stack.sh env)\"")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// No destination listens: the mail stays queued, deferred.
	id := UniqueName("queued")
	sender := "bounce+queued@" + p.BounceDomain
	sendThrough(t, p.Addr, sender, id, "carol@example.test", smtp.DSNReturnHeaders, nil)
	var queued []QueuedMessage
	for {
		msgs, err := p.Queue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 1 && msgs[0].QueueName == "deferred" {
			queued = msgs
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("mail not deferred; queue: %s\nPostfix log:\n%s", describeQueue(msgs), p.LogSince())
		case <-time.After(25 * time.Millisecond):
		}
	}
	m := queued[0]
	if m.Sender != sender || len(m.Recipients) != 1 || m.Recipients[0].Address != "carol@example.test" ||
		m.Recipients[0].DelayReason == "" {
		t.Errorf("queued = %+v, want from %s to carol@example.test with a delay reason", m, sender)
	}
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	err := p.WaitQueueEmpty(short)
	cancelShort()
	if err == nil || !strings.Contains(err.Error(), "carol@example.test") {
		t.Errorf("WaitQueueEmpty with a deferred mail = %v, want an error naming its recipient", err)
	}
	if !strings.Contains(p.LogSince(), "carol@example.test") {
		t.Errorf("LogSince does not mention the deferred recipient")
	}
	if err := p.DeleteQueued(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitQueueEmpty(ctx); err != nil {
		t.Fatal(err)
	}
}

// sendThrough submits one small message to Postfix at addr, with DSN
// parameters: RET and ENVID=id on MAIL, NOTIFY (nil for none) and ORCPT on
// RCPT. The Message-ID is <id@postline.test>.
func sendThrough(t *testing.T, addr, from, id, to string, ret smtp.DSNReturn, notify []smtp.DSNNotify) {
	t.Helper()
	c, err := smtp.Dial(addr)
	if err != nil {
		t.Fatalf("dial Postfix at %s: %v", addr, err)
	}
	defer c.Close()
	if err := c.Hello("client.postline.test"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.Extension("DSN"); !ok {
		t.Fatal("Postfix does not offer DSN")
	}
	if err := c.Mail(from, &smtp.MailOptions{Return: ret, EnvelopeID: id}); err != nil {
		t.Fatalf("MAIL FROM:<%s>: %v", from, err)
	}
	if err := c.Rcpt(to, &smtp.RcptOptions{
		Notify: notify, OriginalRecipientType: smtp.DSNAddressTypeRFC822, OriginalRecipient: to,
	}); err != nil {
		t.Fatalf("RCPT TO:<%s>: %v", to, err)
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(w, "From: <%s>\r\nTo: <%s>\r\nSubject: postfix relay test\r\nMessage-ID: <%s@postline.test>\r\n"+
		"Date: %s\r\n\r\nbody\r\n", from, to, id, time.Now().Format(time.RFC1123Z)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("DATA: %v", err)
	}
	if err := c.Quit(); err != nil {
		t.Fatal(err)
	}
}

// report is the part of an RFC 3464 report the tests read.
type report struct {
	perMessage textproto.MIMEHeader
	recipients []textproto.MIMEHeader
	returned   string // the text/rfc822-headers or message/rfc822 part
}

// parseReport checks that data is a multipart/report with report-type
// delivery-status and returns its delivery-status fields.
func parseReport(t *testing.T, data []byte) report {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("parse report: %v", err)
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		t.Fatalf("report Content-Type %q: %v", msg.Header.Get("Content-Type"), err)
	}
	if mt != "multipart/report" || !strings.EqualFold(params["report-type"], "delivery-status") {
		t.Fatalf("report Content-Type = %q, want multipart/report; report-type=delivery-status", msg.Header.Get("Content-Type"))
	}
	var r report
	var sawStatus bool
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("report part: %v", err)
		}
		pt, _, _ := mime.ParseMediaType(part.Header.Get("Content-Type"))
		switch pt {
		case "message/delivery-status":
			sawStatus = true
			tr := textproto.NewReader(bufio.NewReader(part))
			for i := 0; ; i++ {
				h, err := tr.ReadMIMEHeader()
				if len(h) > 0 {
					if i == 0 {
						r.perMessage = h
					} else {
						r.recipients = append(r.recipients, h)
					}
				}
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("delivery-status fields: %v", err)
				}
			}
		case "text/rfc822-headers", "message/rfc822":
			b, err := io.ReadAll(part)
			if err != nil {
				t.Fatal(err)
			}
			r.returned = string(b)
		}
	}
	if !sawStatus {
		t.Fatalf("report has no message/delivery-status part:\n%s", data)
	}
	return r
}

// received is a message one of the test's SMTP servers accepted.
type received struct {
	from, ret, envid string
	to               []string
	notify, orcpt    string // of the first recipient
	messageID        string // without angle brackets
	data             []byte
}

// smtpRecorder is a go-smtp server that accepts every message, except that
// it refuses RCPT TO a local part "nobody" with 550 5.1.1 and defers one
// "busy" with 451 4.2.1, and records what it accepted.
type smtpRecorder struct {
	mu      sync.Mutex
	msgs    []received
	refusal map[string]int // refused RCPT TO commands by address
	changed chan struct{}  // closed and replaced on every new message
}

// serveSMTP serves a recorder on ln until t ends; dsn makes it offer DSN.
func serveSMTP(t *testing.T, ln net.Listener, dsn bool) *smtpRecorder {
	t.Helper()
	r := &smtpRecorder{changed: make(chan struct{}), refusal: make(map[string]int)}
	srv := smtp.NewServer(r)
	srv.Domain = "dest.postline.test"
	srv.EnableDSN = dsn
	srv.ErrorLog = log.New(io.Discard, "", 0)
	srv.ReadTimeout = 30 * time.Second
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-served
	})
	return r
}

func (r *smtpRecorder) NewSession(*smtp.Conn) (smtp.Session, error) {
	return &recorderSession{r: r}, nil
}

func (r *smtpRecorder) add(m received) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *smtpRecorder) messages() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.msgs...)
}

// refused returns how many RCPT TO:<addr> it refused.
func (r *smtpRecorder) refused(addr string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refusal[strings.ToLower(addr)]
}

func (r *smtpRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

// wait returns the first message match accepts, waiting for it until ctx ends.
func (r *smtpRecorder) wait(ctx context.Context, match func(received) bool) (received, error) {
	for {
		r.mu.Lock()
		msgs, changed := r.msgs, r.changed
		r.mu.Unlock()
		for _, m := range msgs {
			if match(m) {
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return received{}, fmt.Errorf("%d messages, none matching: %w", len(msgs), ctx.Err())
		case <-changed:
		}
	}
}

type recorderSession struct {
	r   *smtpRecorder
	cur received
}

func (s *recorderSession) Mail(from string, opts *smtp.MailOptions) error {
	s.cur = received{from: from}
	if opts != nil {
		s.cur.ret, s.cur.envid = string(opts.Return), opts.EnvelopeID
	}
	return nil
}

func (s *recorderSession) Rcpt(to string, opts *smtp.RcptOptions) error {
	var refuse *smtp.SMTPError
	switch local, _, _ := strings.Cut(strings.ToLower(to), "@"); local {
	case "nobody":
		refuse = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"}
	case "busy":
		refuse = &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 2, 1}, Message: "mailbox busy"}
	}
	if refuse != nil {
		s.r.mu.Lock()
		s.r.refusal[strings.ToLower(to)]++
		s.r.mu.Unlock()
		return refuse
	}
	if len(s.cur.to) == 0 && opts != nil {
		notify := make([]string, 0, len(opts.Notify))
		for _, n := range opts.Notify {
			notify = append(notify, string(n))
		}
		s.cur.notify = strings.Join(notify, ",")
		if opts.OriginalRecipient != "" {
			s.cur.orcpt = string(opts.OriginalRecipientType) + ";" + opts.OriginalRecipient
		}
	}
	s.cur.to = append(s.cur.to, to)
	return nil
}

func (s *recorderSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m := s.cur
	m.data = b
	if msg, err := mail.ReadMessage(bytes.NewReader(b)); err == nil {
		m.messageID = strings.Trim(msg.Header.Get("Message-ID"), "<> ")
	}
	s.r.add(m)
	return nil
}

func (s *recorderSession) Reset()        { s.cur = received{} }
func (s *recorderSession) Logout() error { return nil }

func containsFold(s []string, v string) bool {
	for _, x := range s {
		if strings.EqualFold(x, v) {
			return true
		}
	}
	return false
}
