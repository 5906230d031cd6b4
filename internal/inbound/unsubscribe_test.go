package inbound_test

import (
	"context"
	"errors"
	"net/smtp"
	"strings"
	"sync"
	"testing"

	"github.com/postline/postline/internal/inbound"
)

// unsubs is an Unsubscribes that takes unsubscribe+<token>@domain and
// records the tokens it is given, or fails.
type unsubs struct {
	mu   sync.Mutex
	got  []string
	fail error
}

func (u *unsubs) TokenOf(addr string) (string, bool) {
	local, d, ok := strings.Cut(strings.ToLower(addr), "@")
	token, prefixed := strings.CutPrefix(local, "unsubscribe+")
	return token, ok && prefixed && token != "" && d == domain
}

func (u *unsubs) Unsubscribe(_ context.Context, token string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.fail != nil {
		return u.fail
	}
	u.got = append(u.got, token)
	return nil
}

func (u *unsubs) tokens() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.got...)
}

// TestUnsubscribeByMail: a message to an unsubscribe address, whatever it
// says, hands its token on and is not read as a report; a failure answers
// 451; without Unsubscribes the address is refused.
func TestUnsubscribeByMail(t *testing.T) {
	u := &unsubs{}
	h := start(t, inbound.Config{Unsubscribes: u})
	msg := []byte("From: reader@example.org\r\nSubject: unsubscribe\r\n\r\nunsubscribe\r\n")
	if err := send(t, h.addr, "Unsubscribe+TOKEN1@"+strings.ToUpper(domain), msg); err != nil {
		t.Fatalf("unsubscribe mail: %v", err)
	}
	// A DSN sent there is still an unsubscribe, not a report.
	if err := send(t, h.addr, "unsubscribe+token2@"+domain, fixture(t, "postfix-hard.eml")); err != nil {
		t.Fatalf("a DSN to an unsubscribe address: %v", err)
	}
	if got := u.tokens(); len(got) != 2 || got[0] != "token1" || got[1] != "token2" {
		t.Fatalf("tokens %q, want token1 and token2", got)
	}
	if got := h.rec.all(); len(got) != 0 {
		t.Fatalf("reports applied %v, want none", got)
	}
	if n := counter(t, h.reg, "postline_inbound_messages_total", "result", inbound.ResultUnsubscribe); n != 2 {
		t.Errorf("messages{result=unsubscribe} = %v, want 2", n)
	}
	if n := counter(t, h.reg, "postline_inbound_recipients_total", "result", "unsubscribe"); n != 2 {
		t.Errorf("recipients{result=unsubscribe} = %v, want 2", n)
	}

	// One message to a return path and an unsubscribe address: both.
	c, err := smtp.Dial(h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, cmd := range []func() error{
		func() error { return c.Mail("") },
		func() error { return c.Rcpt("unsubscribe+token3@" + domain) },
		func() error { return c.Rcpt("bounce+tok-postfix-hard@" + domain) },
	} {
		if err := cmd(); err != nil {
			t.Fatal(err)
		}
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(fixture(t, "postfix-hard.eml")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := u.tokens(); len(got) != 3 || got[2] != "token3" {
		t.Errorf("tokens %q, want token3 last", got)
	}
	if got := h.rec.all(); len(got) != 1 || got[0][0].Token != "tok-postfix-hard" {
		t.Errorf("reports %v, want the DSN's", got)
	}

	u.mu.Lock()
	u.fail = errors.New("database down")
	u.mu.Unlock()
	if err := send(t, h.addr, "unsubscribe+token4@"+domain, msg); code(err) != 451 {
		t.Errorf("unsubscribe with a failing applier: %v, want 451", err)
	}
}

func TestUnsubscribeAddressesRefusedWithoutUnsubscribes(t *testing.T) {
	h := start(t, inbound.Config{})
	if err := send(t, h.addr, "unsubscribe+token1@"+domain, []byte("Subject: x\r\n\r\nx\r\n")); code(err) != 550 {
		t.Errorf("unsubscribe address without Unsubscribes: %v, want 550", err)
	}
}
