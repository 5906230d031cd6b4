package testenv

import (
	"context"
	"fmt"
	"net/smtp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMailpitCountsAndListsMessages(t *testing.T) {
	m := StartMailpit(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if n, err := m.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count on a fresh mailpit = %d, %v; want 0, nil", n, err)
	}

	want := []string{UniqueName("first") + "@test.postline", UniqueName("second") + "@test.postline"}
	for i, id := range want {
		msg := fmt.Sprintf("From: a@example.test\r\nTo: b@example.test\r\nSubject: %d\r\nMessage-ID: <%s>\r\n\r\nbody %d\r\n", i, id, i)
		if err := smtp.SendMail(m.SMTPAddr(), nil, "a@example.test", []string{"b@example.test"}, []byte(msg)); err != nil {
			t.Fatalf("send message %d: %v", i, err)
		}
	}

	if err := m.WaitCount(ctx, len(want)); err != nil {
		t.Fatal(err)
	}
	n, err := m.Count(ctx)
	if err != nil || n != len(want) {
		t.Fatalf("Count = %d, %v; want %d, nil", n, err, len(want))
	}
	got, err := m.MessageIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("MessageIDs = %q, want %q", got, want)
	}
}

func TestMailpitMessageIDsPages(t *testing.T) {
	m := StartMailpit(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// More than one page of mailpitPageSize, over one SMTP session.
	const total = mailpitPageSize + 7
	c, err := smtp.Dial(m.SMTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range total {
		if err := sendOne(c, fmt.Sprintf("page-%d@test.postline", i)); err != nil {
			t.Fatalf("send message %d: %v", i, err)
		}
	}
	if err := c.Quit(); err != nil {
		t.Fatal(err)
	}

	if err := m.WaitCount(ctx, total); err != nil {
		t.Fatal(err)
	}
	got, err := m.MessageIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	got = slices.Compact(got)
	if len(got) != total {
		t.Fatalf("MessageIDs returned %d distinct IDs, want %d", len(got), total)
	}
}

func TestMailpitWaitCountReportsLastCount(t *testing.T) {
	m := StartMailpit(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()

	err := m.WaitCount(ctx, 1)
	if err == nil {
		t.Fatal("WaitCount on an empty mailbox returned nil")
	}
	if !strings.Contains(err.Error(), "last count 0") {
		t.Fatalf("WaitCount error %q does not name the last count", err)
	}
}

func sendOne(c *smtp.Client, id string) error {
	if err := c.Mail("a@example.test"); err != nil {
		return err
	}
	if err := c.Rcpt("b@example.test"); err != nil {
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "From: a@example.test\r\nTo: b@example.test\r\nSubject: page\r\nMessage-ID: <%s>\r\n\r\nbody\r\n", id); err != nil {
		return err
	}
	return w.Close()
}
