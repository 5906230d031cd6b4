package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/idempotency"
)

func unconfirmedRow(id string, idx int, addr, provider, confirmation string, by time.Time) idempotency.Recipient {
	return idempotency.Recipient{MessageID: id, Index: idx, Address: addr, State: idempotency.RecipientAccepted,
		Attempt: 1, Provider: provider, Tenant: "acme", Stream: "bulk", ConfirmBy: by, Confirmation: confirmation,
		AcceptedAt: by.Add(-time.Hour)}
}

func TestNewUnconfirmedReport(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rows := []idempotency.Recipient{
		unconfirmedRow("a@x", 0, "one@example.com", "relay-a", "", at.Add(-2*time.Hour)),
		unconfirmedRow("a@x", 2, "three@example.com", "relay-b", "", at.Add(-2*time.Hour)),
		unconfirmedRow("a@x", 3, "four@example.com", "relay-a", "", at.Add(-2*time.Hour)),
		unconfirmedRow("b@x", 0, "b@example.com", "", "unconfirmed", at.Add(-90*time.Second)),
		unconfirmedRow("c@x", 1, "c@example.com", "relay-c", "unconfirmed", at.Add(-time.Second)),
	}
	tests := []struct {
		name     string
		rows     []idempotency.Recipient
		limit    int
		wantIDs  []string
		wantMore bool
	}{
		{"none", nil, 10, []string{}, false},
		{"all under the limit", rows, 10, []string{"a@x", "b@x", "c@x"}, false},
		{"exactly the limit", rows, 3, []string{"a@x", "b@x", "c@x"}, false},
		{"more than the limit", rows, 2, []string{"a@x", "b@x"}, true},
		{"limit one", rows, 1, []string{"a@x"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := newUnconfirmedReport(tt.rows, at, tt.limit)
			var ids []string
			for _, m := range rep.Mail {
				ids = append(ids, m.MessageID)
			}
			if ids == nil {
				ids = []string{}
			}
			if !slices.Equal(ids, tt.wantIDs) || rep.More != tt.wantMore || rep.Limit != tt.limit || !rep.At.Equal(at) {
				t.Fatalf("mail %v more %v limit %d at %v; want %v more %v", ids, rep.More, rep.Limit, rep.At, tt.wantIDs, tt.wantMore)
			}
			if rep.Mail == nil {
				t.Fatal("Mail is nil: JSON would print null")
			}
		})
	}

	rep := newUnconfirmedReport(rows, at, 10)
	a, b := rep.Mail[0], rep.Mail[1]
	if a.State != "due" || a.OverdueSeconds != 7200 || a.Tenant != "acme" || a.Stream != "bulk" ||
		!slices.Equal(a.Providers, []string{"relay-a", "relay-b"}) || len(a.Open) != 3 ||
		a.Open[1] != (openRecipient{Index: 2, Address: "three@example.com", Attempt: 1, Provider: "relay-b", AcceptedAt: a.Open[1].AcceptedAt}) ||
		a.Open[1].AcceptedAt == nil || !a.Open[1].AcceptedAt.Equal(at.Add(-3*time.Hour)) {
		t.Errorf("first mail %+v", a)
	}
	if b.State != "unconfirmed" || b.OverdueSeconds != 90 || len(b.Providers) != 0 || b.Providers == nil || len(b.Open) != 1 {
		t.Errorf("second mail %+v", b)
	}
}

func TestWriteUnconfirmed(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		rows  []idempotency.Recipient
		limit int
		want  []string // lines, fields split on whitespace
	}{
		{"none", nil, 5, []string{"no unconfirmed mail"}},
		{"two mails", []idempotency.Recipient{
			unconfirmedRow("a@x", 0, "one@example.com", "relay-a", "", at.Add(-2*time.Hour)),
			unconfirmedRow("a@x", 2, "three@example.com", "relay-a", "", at.Add(-2*time.Hour)),
			unconfirmedRow("b@x", 0, "b@example.com", "relay-b", "unconfirmed", at.Add(-90*time.Second)),
		}, 5, []string{
			"MESSAGE_ID TENANT STREAM CONFIRM_BY OVERDUE STATE PROVIDER OPEN",
			"a@x acme bulk 2026-12-01T10:00:00Z 2h0m due relay-a 0 one@example.com, 2 three@example.com",
			"b@x acme bulk 2026-12-01T11:58:30Z 1m30s unconfirmed relay-b 0 b@example.com",
			"2 mails, 3 open recipients",
		}},
		{"more than the limit", []idempotency.Recipient{
			unconfirmedRow("a@x", 0, "one@example.com", "", "", at.Add(-time.Hour)),
			unconfirmedRow("b@x", 0, "b@example.com", "", "", at.Add(-time.Minute)),
		}, 1, []string{
			"MESSAGE_ID TENANT STREAM CONFIRM_BY OVERDUE STATE PROVIDER OPEN",
			"a@x acme bulk 2026-12-01T11:00:00Z 1h0m due - 0 one@example.com",
			"1 mail, 1 open recipient; more unconfirmed mail follows (the oldest 1 are shown: raise --limit)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := writeUnconfirmed(&globals{stdout: &out}, newUnconfirmedReport(tt.rows, at, tt.limit)); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("output:\n%s", out.String())
			}
			for i, l := range lines {
				if got := strings.Join(strings.Fields(l), " "); got != tt.want[i] {
					t.Errorf("line %d = %q, want %q", i, got, tt.want[i])
				}
			}
		})
	}
}

func TestUnconfirmedUsage(t *testing.T) {
	// Nothing listens on port 1: every case must fail before connecting.
	env := map[string]string{"POSTLINE_DATABASE_URL": "postgres://u:p@127.0.0.1:1/db?connect_timeout=2"}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"zero limit", []string{"unconfirmed", "--limit", "0"}, exitUsage, "--limit 0: want 1 to 1000"},
		{"limit too large", []string{"unconfirmed", "--limit", "1001"}, exitUsage, "--limit 1001"},
		{"arguments", []string{"unconfirmed", "a@x"}, exitUsage, "unknown command"},
		{"database down", []string{"unconfirmed"}, exitFailure, "--database-url: connect"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := postctl(t, env, "", tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) || exitCode(err) != tt.wantCode {
				t.Fatalf("got %v, want exit %d with %q", err, tt.wantCode, tt.want)
			}
			if strings.Contains(err.Error(), "u:p@") {
				t.Errorf("error %q shows the database password", err)
			}
		})
	}
}

// TestUnconfirmedPostgres lists mail written through the workers' paths
// on the real database: only mail past its window with an accepted
// recipient is listed, oldest first, with its open recipients.
func TestUnconfirmedPostgres(t *testing.T) {
	s := newOutcomeSeed(t)
	now := time.Now()

	// Nothing yet.
	out, _, err := postctl(t, nil, "", "--database-url", s.url, "unconfirmed")
	if err != nil || out != "no unconfirmed mail\n" {
		t.Fatalf("empty: %q, %v", out, err)
	}
	out, _, err = postctl(t, nil, "", "--database-url", s.url, "-o", "json", "unconfirmed")
	var rep unconfirmedReport
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || rep.Mail == nil || len(rep.Mail) != 0 || rep.More {
		t.Fatalf("empty JSON: %q, %v", out, err)
	}

	// late@x: two accepted, a report delivered one. later@x: one accepted,
	// marked unconfirmed by the sweep. future@x: its window is open.
	// settled@x: past its window, every recipient refused at RCPT.
	s.sent("late@x", "acme", "transactional", now.Add(-2*time.Hour),
		seedRcpt(0, "ada@example.com", idempotency.RecipientAccepted, "relay-a"),
		seedRcpt(1, "bob@example.com", idempotency.RecipientAccepted, "relay-a"))
	s.resolve(idempotency.Resolution{MessageID: "late@x", Index: 1, From: idempotency.RecipientAccepted,
		To: idempotency.RecipientDelivered, Source: "dsn"})
	s.sent("later@x", "", "bulk", now.Add(-time.Hour),
		seedRcpt(0, "cy@example.com", idempotency.RecipientAccepted, "relay-b"),
		seedRcpt(1, "di@example.com", idempotency.RecipientSuppressed, ""),
		seedRcpt(2, "ed@example.com", idempotency.RecipientAccepted, "relay-b"))
	if n, err := s.store.MarkUnconfirmed(t.Context(), []string{"later@x"}); err != nil || n != 1 {
		t.Fatalf("MarkUnconfirmed = %d, %v", n, err)
	}
	s.sent("future@x", "acme", "transactional", now.Add(time.Hour),
		seedRcpt(0, "fay@example.com", idempotency.RecipientAccepted, "relay-a"))
	s.sent("settled@x", "acme", "transactional", now.Add(-3*time.Hour),
		idempotency.RecipientFate{Index: 0, Address: "gus@example.com", State: idempotency.RecipientBounced, Attempt: 1,
			Provider: "relay-a", BounceType: "hard", Status: "5.1.1", Code: 550, Source: "smtp"})

	out, _, err = postctl(t, nil, "", "--database-url", s.url, "-o", "json", "unconfirmed")
	if err != nil {
		t.Fatal(err)
	}
	rep = unconfirmedReport{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if len(rep.Mail) != 2 || rep.More || rep.Limit != defaultUnconfirmedLimit || rep.At.IsZero() {
		t.Fatalf("report %+v", rep)
	}
	late, later := rep.Mail[0], rep.Mail[1]
	if late.MessageID != "late@x" || late.Tenant != "acme" || late.Stream != "transactional" || late.State != "due" ||
		late.OverdueSeconds < 7100 || late.OverdueSeconds > 7300 || !slices.Equal(late.Providers, []string{"relay-a"}) ||
		len(late.Open) != 1 || late.Open[0].Index != 0 || late.Open[0].Address != "ada@example.com" || late.Open[0].AcceptedAt == nil {
		t.Errorf("late@x: %+v", late)
	}
	if later.MessageID != "later@x" || later.Tenant != "" || later.Stream != "bulk" || later.State != "unconfirmed" ||
		len(later.Open) != 2 || later.Open[0].Address != "cy@example.com" || later.Open[1].Index != 2 ||
		!slices.Equal(later.Providers, []string{"relay-b"}) {
		t.Errorf("later@x: %+v", later)
	}
	if strings.Contains(out, "campaign") {
		t.Errorf("output shows the mail's metadata: %s", out)
	}

	// Text, one mail of two.
	out, _, err = postctl(t, nil, "", "--database-url", s.url, "unconfirmed", "--limit", "1")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "MESSAGE_ID") {
		t.Fatalf("text output:\n%s", out)
	}
	if f := strings.Fields(lines[1]); len(f) != 9 || f[0] != "late@x" || f[1] != "acme" || f[2] != "transactional" ||
		!strings.HasPrefix(f[4], "1h") && !strings.HasPrefix(f[4], "2h") || f[5] != "due" || f[6] != "relay-a" ||
		f[7] != "0" || f[8] != "ada@example.com" {
		t.Errorf("row %q", lines[1])
	}
	if lines[2] != "1 mail, 1 open recipient; more unconfirmed mail follows (the oldest 1 are shown: raise --limit)" {
		t.Errorf("summary %q", lines[2])
	}
}
