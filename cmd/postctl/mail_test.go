package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/event"
	"github.com/postline/postline/internal/idempotency"
	"github.com/postline/postline/internal/mailquery"
)

func TestMailUsage(t *testing.T) {
	// Nothing listens on port 1: every case must fail before connecting.
	env := map[string]string{"POSTLINE_DATABASE_URL": "postgres://u:p@127.0.0.1:1/db?connect_timeout=2"}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"unknown state", []string{"mail", "find", "--state", "lost"}, exitUsage, `--state: unknown state "lost"`},
		{"bad recipient", []string{"mail", "find", "--recipient", "nobody"}, exitUsage, "--recipient: "},
		{"limit too large", []string{"mail", "find", "--limit", "501"}, exitUsage, "--limit: 501 is out of range"},
		{"limit zero", []string{"mail", "find", "--limit", "-1"}, exitUsage, "--limit: -1"},
		{"bad since", []string{"mail", "find", "--since", "yesterday"}, exitUsage, `--since "yesterday"`},
		{"since after until", []string{"mail", "find", "--since", "1h", "--until", "2h"}, exitUsage, "--since: "},
		{"malformed cursor", []string{"mail", "find", "--cursor", "abc"}, exitUsage, "--cursor: "},
		{"show without ID", []string{"mail", "show"}, exitUsage, "accepts 1 arg"},
		{"show empty ID", []string{"mail", "show", "<>"}, exitUsage, "the Message-ID is empty"},
		{"database down", []string{"mail", "find"}, exitFailure, "--database-url: connect"},
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

func TestEntryDetail(t *testing.T) {
	next := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	tests := []struct {
		e    mailquery.Entry
		want string
	}{
		{mailquery.Entry{Type: "claimed"}, "-"},
		{mailquery.Entry{Type: "deferred", Class: "transient", NextAttemptAt: next}, "class transient; next attempt 2026-12-01T14:00:00Z"},
		{mailquery.Entry{Type: "bounced", BounceType: "hard", Code: 550, Status: "5.1.1", Diagnostic: "no such user",
			Rule: "user_unknown", Source: "dsn"}, "hard; 550 5.1.1; no such user; rule user_unknown; from dsn"},
		{mailquery.Entry{Type: "accepted", DKIMDomain: "shop.example"}, "signed by shop.example"},
		{mailquery.Entry{Type: "complained", FeedbackType: "abuse"}, "feedback abuse"},
		{mailquery.Entry{Type: "redriven", Reason: "max_attempts", Note: "relay fixed", Actor: "postctl:ops"},
			"reason max_attempts; relay fixed; by postctl:ops"},
	}
	for _, tt := range tests {
		if got := entryDetail(tt.e); got != tt.want {
			t.Errorf("entryDetail(%+v) = %q, want %q", tt.e, got, tt.want)
		}
	}
}

// TestMailPostgres finds mail written through the workers' paths and shows
// its life, with events indexed as the console's indexer writes them.
func TestMailPostgres(t *testing.T) {
	s := newOutcomeSeed(t)
	now := time.Now().UTC()
	s.sent("find-1@x", "acme", "transactional", now.Add(time.Hour),
		seedRcpt(0, "Ada@Example.com", idempotency.RecipientAccepted, "relay-a"))
	s.sent("find-2@x", "beta", "bulk", now.Add(time.Hour),
		seedRcpt(0, "bob@example.com", idempotency.RecipientAccepted, "relay-a"))

	out, _, err := postctl(t, nil, "", "--database-url", s.url, "mail", "find", "--recipient", "Ada@EXAMPLE.com")
	if err != nil || !strings.Contains(out, "find-1@x") || strings.Contains(out, "find-2@x") ||
		!strings.Contains(out, "Ada@Example.com accepted") || !strings.HasSuffix(out, "1 mail\n") {
		t.Fatalf("find by address: %q, %v", out, err)
	}
	out, _, err = postctl(t, nil, "", "--database-url", s.url, "-o", "json", "mail", "find", "--recipient", "@example.com", "--since", "1h", "--limit", "1")
	var page mailquery.Page
	if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Mails) != 1 || page.Mails[0].MessageID != "find-2@x" || page.Next == "" {
		t.Fatalf("find by domain, first page: %q, %v", out, err)
	}
	// The same flags for the next page: "--since 1h" is a moment later now.
	out, _, err = postctl(t, nil, "", "--database-url", s.url, "-o", "json", "mail", "find", "--recipient", "@example.com", "--since", "1h", "--limit", "1", "--cursor", page.Next)
	page = mailquery.Page{}
	if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Mails) != 1 || page.Mails[0].MessageID != "find-1@x" || page.Next != "" {
		t.Fatalf("find by domain, second page: %q, %v", out, err)
	}
	out, _, err = postctl(t, nil, "", "--database-url", s.url, "mail", "find", "--tenant", "nobody")
	if err != nil || out != "no mail found\n" {
		t.Fatalf("find nothing: %q, %v", out, err)
	}
	_, _, err = postctl(t, nil, "", "--database-url", s.url, "mail", "find", "--tenant", "acme", "--cursor", page.Next+"x")
	if exitCode(err) != exitUsage {
		t.Errorf("a cursor of another listing: %v, want a usage error", err)
	}

	accepted := event.Event{Schema: event.Schema, ID: event.NewID("find-1@x", 0, event.Accepted, 1), Type: event.Accepted,
		At: time.Now().UTC().Add(time.Millisecond), MessageID: "find-1@x", Tenant: "acme", Stream: event.StreamTransactional, Recipient: "Ada@Example.com",
		Attempt: 1, Provider: "relay-a", DKIMDomain: "shop.example"}
	doc, err := accepted.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// As mailquery's Indexer writes it (its own tests run it on Kafka).
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO postline_mail_events (event_id, message_id, at, type, recipient_index, doc)
		VALUES ($1, $2, $3, $4, 0, $5::jsonb)`, accepted.ID, accepted.MessageID, accepted.At, accepted.Type, string(doc)); err != nil {
		t.Fatal(err)
	}
	out, _, err = postctl(t, nil, "", "--database-url", s.url, "mail", "show", "<find-1@x>")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"find-1@x", "DKIM: signed by shop.example", "claimed", "0 Ada@Example.com  accepted",
		"signed by shop.example", "webhooks: nothing pending or dead"} {
		if !strings.Contains(out, want) {
			t.Errorf("mail show lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "claimed") > strings.Index(out, "accepted  1") {
		t.Errorf("the life is not in time order:\n%s", out)
	}
	out, _, err = postctl(t, nil, "", "--database-url", s.url, "-o", "json", "mail", "show", "find-1@x")
	var life mailquery.Life
	if err != nil || json.Unmarshal([]byte(out), &life) != nil || len(life.Entries) != 2 || life.DKIMDomain != "shop.example" ||
		life.Webhooks == nil {
		t.Fatalf("mail show JSON: %q, %v", out, err)
	}
	_, _, err = postctl(t, nil, "", "--database-url", s.url, "mail", "show", "nobody@x")
	if err == nil || exitCode(err) != exitFailure || !strings.Contains(err.Error(), "no row and no indexed event") {
		t.Errorf("mail show of an unknown ID: %v", err)
	}
}
