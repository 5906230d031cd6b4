package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/idempotency"
)

func TestWithRecipients(t *testing.T) {
	by := time.Date(2026, 12, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	row := func(confirmation string, confirmBy time.Time) idempotency.Recipient {
		return idempotency.Recipient{MessageID: "m@x", Index: 0, Address: "a@example.com", State: idempotency.RecipientAccepted,
			Stream: "bulk", ConfirmBy: confirmBy, Confirmation: confirmation}
	}
	tests := []struct {
		name             string
		rows             []idempotency.Recipient
		wantConfirmation string
		wantBy           bool
		wantStream       string
	}{
		{"no rows", nil, "", false, ""},
		{"never taken by a relay", []idempotency.Recipient{row("", time.Time{})}, "", false, "bulk"},
		{"awaiting", []idempotency.Recipient{row("", by)}, "awaiting", true, "bulk"},
		{"confirmed", []idempotency.Recipient{row("confirmed", by)}, "confirmed", true, "bulk"},
		{"cancelled", []idempotency.Recipient{row("cancelled", by)}, "cancelled", true, "bulk"},
		{"unconfirmed", []idempotency.Recipient{row("unconfirmed", by)}, "unconfirmed", true, "bulk"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := messageStatus{MessageID: "m@x"}.withRecipients(tt.rows)
			if s.Recipients == nil || len(s.Recipients) != len(tt.rows) {
				t.Fatalf("recipients %v", s.Recipients)
			}
			if s.Confirmation != tt.wantConfirmation || (s.ConfirmBy != nil) != tt.wantBy || s.Stream != tt.wantStream {
				t.Fatalf("confirmation %q by %v stream %q", s.Confirmation, s.ConfirmBy, s.Stream)
			}
			if s.ConfirmBy != nil && (s.ConfirmBy.Location() != time.UTC || !s.ConfirmBy.Equal(by)) {
				t.Errorf("confirm_by %v, want %v in UTC", s.ConfirmBy, by)
			}
		})
	}
}

func TestConfirmationText(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	later, earlier := at.Add(time.Hour), at.Add(-90*time.Second)
	tests := []struct {
		confirmation string
		by           *time.Time
		want         string
	}{
		{"", nil, "none (no relay has taken the mail)"},
		{"awaiting", &later, "awaiting until 2026-12-01T13:00:00Z"},
		{"awaiting", &earlier, "awaiting until 2026-12-01T11:58:30Z (passed 1m30s ago, not yet marked unconfirmed)"},
		{"confirmed", &earlier, "confirmed (every recipient resolved, one or more delivered)"},
		{"cancelled", &earlier, "cancelled (every recipient resolved, none delivered)"},
		{"unconfirmed", &earlier, "unconfirmed (window ended 2026-12-01T11:58:30Z with recipients unresolved)"},
	}
	for _, tt := range tests {
		if got := confirmationText(messageStatus{Confirmation: tt.confirmation, ConfirmBy: tt.by}, at); got != tt.want {
			t.Errorf("confirmationText(%q, %v) = %q, want %q", tt.confirmation, tt.by, got, tt.want)
		}
	}
	untracked := messageStatus{Recipients: []recipientStatus{{Index: 0, State: "accepted"}}}
	if got := confirmationText(untracked, at); !strings.HasPrefix(got, "not tracked") {
		t.Errorf("confirmationText of a sent mail without a window = %q, want it not tracked", got)
	}
}

func TestRecipientsTable(t *testing.T) {
	updated := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rs := []recipientStatus{
		{Index: 0, Address: "a@example.com", State: "delivered", Source: "dsn", UpdatedAt: updated},
		{Index: 1, Address: "b@example.com", State: "bounced", BounceType: "hard", Status: "5.1.1", Code: 550, Source: "smtp", UpdatedAt: updated},
		{Index: 2, Address: "c@example.com", State: "bounced", BounceType: "soft", Status: "4.2.2", Source: "dsn", UpdatedAt: updated},
		{Index: 3, Address: "d@example.com", State: "complained", Code: 550, UpdatedAt: updated},
	}
	header, rows := recipientsTable(rs)
	want := [][]string{
		{"0", "a@example.com", "delivered", "-", "-", "dsn", "2026-12-01T12:00:00Z"},
		{"1", "b@example.com", "bounced", "hard", "550 5.1.1", "smtp", "2026-12-01T12:00:00Z"},
		{"2", "c@example.com", "bounced", "soft", "4.2.2", "dsn", "2026-12-01T12:00:00Z"},
		{"3", "d@example.com", "complained", "-", "550", "-", "2026-12-01T12:00:00Z"},
	}
	if strings.Join(header, " ") != "IDX ADDRESS STATE BOUNCE STATUS SOURCE UPDATED" || len(rows) != len(want) {
		t.Fatalf("header %v rows %v", header, rows)
	}
	for i := range want {
		if strings.Join(rows[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("row %d = %q, want %q", i, rows[i], want[i])
		}
	}
}

func TestWriteStatusSections(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	by := at.Add(time.Hour)
	rep := statusReport{At: at, Messages: []messageStatus{
		{MessageID: "old@x", Status: "sent", Recipients: []recipientStatus{}},
		{MessageID: "new@x", Status: "sent", Confirmation: "awaiting", ConfirmBy: &by, Recipients: []recipientStatus{
			{Index: 0, Address: "a@example.com", State: "accepted", Source: "smtp", UpdatedAt: at}}},
	}}
	var out bytes.Buffer
	if err := writeStatus(&globals{stdout: &out}, rep); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	// The messages' table (header and two rows), then one section: the
	// message without recipient rows has none.
	if len(lines) != 7 || !strings.HasPrefix(lines[0], "MESSAGE_ID") || lines[3] != "" ||
		lines[4] != "new@x: confirmation awaiting until 2026-12-01T13:00:00Z" || !strings.HasPrefix(lines[5], "IDX") ||
		strings.Join(strings.Fields(lines[6]), " ") != "0 a@example.com accepted - - smtp 2026-12-01T12:00:00Z" {
		t.Fatalf("output:\n%s", out.String())
	}
}

// TestStatusRecipientsPostgres reads messages written through the
// workers' claim, record and resolve paths on the real database.
func TestStatusRecipientsPostgres(t *testing.T) {
	s := newOutcomeSeed(t)
	confirmBy := time.Now().Add(time.Hour).Truncate(time.Second)
	s.sent("open@x", "acme", "transactional", confirmBy,
		seedRcpt(0, "ada@example.com", idempotency.RecipientAccepted, "relay-a"),
		idempotency.RecipientFate{Index: 1, Address: "bob@example.com", State: idempotency.RecipientBounced, Attempt: 1,
			Provider: "relay-a", BounceType: "hard", Status: "5.1.1", Code: 550, Diagnostic: "no such user", Rule: "user-unknown", Source: "smtp"},
		seedRcpt(2, "cy@example.com", idempotency.RecipientSuppressed, ""))
	s.sent("done@x", "", "bulk", confirmBy, seedRcpt(0, "di@example.com", idempotency.RecipientAccepted, "relay-b"))
	if settled := s.resolve(idempotency.Resolution{MessageID: "done@x", Index: 0, From: idempotency.RecipientAccepted,
		To: idempotency.RecipientDelivered, Source: "dsn"}); settled["done@x"] != "confirmed" {
		t.Fatalf("settled %v", settled)
	}
	s.claim("bare@x", "") // sending, no attempt recorded: no recipient rows

	out, _, err := postctl(t, nil, "", "--database-url", s.url, "-o", "json", "status", "<open@x>", "done@x", "bare@x")
	if err != nil {
		t.Fatal(err)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if len(rep.Messages) != 3 || len(rep.NotFound) != 0 {
		t.Fatalf("report %+v", rep)
	}
	byID := map[string]messageStatus{}
	for _, m := range rep.Messages {
		byID[m.MessageID] = m
	}
	open, done, bare := byID["open@x"], byID["done@x"], byID["bare@x"]
	if open.Status != "sent" || open.Provider != "relay-a" || open.Tenant != "acme" || open.Stream != "transactional" ||
		open.Confirmation != "awaiting" || open.ConfirmBy == nil || !open.ConfirmBy.Equal(confirmBy) || len(open.Recipients) != 3 {
		t.Fatalf("open@x: %+v", open)
	}
	ada, bob, cy := open.Recipients[0], open.Recipients[1], open.Recipients[2]
	if ada.Index != 0 || ada.Address != "ada@example.com" || ada.State != "accepted" || ada.Provider != "relay-a" ||
		ada.AcceptedAt == nil || ada.ResolvedAt != nil || ada.UpdatedAt.IsZero() {
		t.Errorf("ada: %+v", ada)
	}
	if bob.Index != 1 || bob.State != "bounced" || bob.BounceType != "hard" || bob.Status != "5.1.1" || bob.Code != 550 ||
		bob.Diagnostic != "no such user" || bob.Rule != "user-unknown" || bob.Source != "smtp" || bob.ResolvedAt == nil || bob.AcceptedAt != nil {
		t.Errorf("bob: %+v", bob)
	}
	if cy.Index != 2 || cy.State != "suppressed" || cy.Provider != "" {
		t.Errorf("cy: %+v", cy)
	}
	if done.Confirmation != "confirmed" || len(done.Recipients) != 1 || done.Recipients[0].State != "delivered" ||
		done.Recipients[0].Source != "dsn" || done.Stream != "bulk" {
		t.Errorf("done@x: %+v", done)
	}
	if bare.Status != "sending" || bare.Confirmation != "" || bare.ConfirmBy != nil || bare.Recipients == nil || len(bare.Recipients) != 0 {
		t.Errorf("bare@x: %+v", bare)
	}
	if !strings.Contains(out, `"recipients":[]`) || strings.Contains(out, "campaign") {
		t.Errorf("JSON output %s", out)
	}

	// Text: the messages' table, then a section per message with
	// recipient rows.
	out, _, err = postctl(t, nil, "", "--database-url", s.url, "status", "open@x", "done@x", "bare@x")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nopen@x: confirmation awaiting until " + confirmBy.UTC().Format(time.RFC3339) + "\nIDX ",
		"\ndone@x: confirmation confirmed (every recipient resolved, one or more delivered)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
	if !strings.HasPrefix(out, "MESSAGE_ID") || strings.Contains(out, "bare@x: confirmation") {
		t.Errorf("text output:\n%s", out)
	}
	fields := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		// The last field is the time the row changed.
		if f := strings.Fields(l); len(f) >= 7 && strings.HasSuffix(f[1], "@example.com") {
			fields[f[1]] = strings.Join(f[:len(f)-1], " ")
		}
	}
	for addr, want := range map[string]string{
		"ada@example.com": "0 ada@example.com accepted - - smtp",
		"bob@example.com": "1 bob@example.com bounced hard 550 5.1.1 smtp",
		"cy@example.com":  "2 cy@example.com suppressed - - smtp",
		"di@example.com":  "0 di@example.com delivered - - dsn",
	} {
		if fields[addr] != want {
			t.Errorf("row of %s = %q, want %q\n%s", addr, fields[addr], want, out)
		}
	}
}
