package mailquery

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseRecipient(t *testing.T) {
	tests := []struct {
		in         string
		wantLocal  string
		wantDomain string
		wantErr    string
	}{
		{in: "ada@example.com", wantLocal: "ada", wantDomain: "example.com"},
		{in: "Ada@Example.COM", wantLocal: "Ada", wantDomain: "example.com"},
		{in: "  <Ada@Example.COM> ", wantLocal: "Ada", wantDomain: "example.com"},
		{in: "@Example.COM", wantLocal: "", wantDomain: "example.com"},
		{in: `"odd@local"@example.com`, wantLocal: `"odd@local"`, wantDomain: "example.com"},
		{in: "ada.lovelace+tag@mail.example.org", wantLocal: "ada.lovelace+tag", wantDomain: "mail.example.org"},
		{in: "example.com", wantErr: "has no @"},
		{in: "", wantErr: "has no @"},
		{in: "ada@", wantErr: "no domain"},
		{in: "ada@exa mple.com", wantErr: "is not a domain"},
		{in: "ada\r\n@example.com", wantErr: "line break"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseRecipient(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseRecipient(%q) = %+v, %v; want an error with %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Local != tt.wantLocal || got.Domain != tt.wantDomain {
				t.Fatalf("ParseRecipient(%q) = %+v, %v; want local %q domain %q", tt.in, got, err, tt.wantLocal, tt.wantDomain)
			}
		})
	}
}

func TestFilterValidate(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	valid := cursor{createdAt: now, messageID: "a@x"}.encode()
	tests := []struct {
		name      string
		f         Filter
		wantField string // "" for valid
	}{
		{name: "zero selects everything", f: Filter{}},
		{name: "everything set", f: Filter{MessageID: "a@x", Recipient: "@example.com", Tenant: "acme",
			State: "bounced", Reason: "hard", Since: now.Add(-time.Hour), Until: now, Cursor: valid, Limit: MaxLimit}},
		{name: "mail status", f: Filter{State: "retrying"}},
		{name: "recipient state", f: Filter{State: "complained"}},
		{name: "unknown state", f: Filter{State: "lost"}, wantField: "State"},
		{name: "state case matters", f: Filter{State: "Sent"}, wantField: "State"},
		{name: "bad recipient", f: Filter{Recipient: "nobody"}, wantField: "Recipient"},
		{name: "since equals until", f: Filter{Since: now, Until: now}, wantField: "Since"},
		{name: "since after until", f: Filter{Since: now, Until: now.Add(-time.Second)}, wantField: "Since"},
		{name: "only since", f: Filter{Since: now}},
		{name: "only until", f: Filter{Until: now}},
		{name: "negative limit", f: Filter{Limit: -1}, wantField: "Limit"},
		{name: "limit over max", f: Filter{Limit: MaxLimit + 1}, wantField: "Limit"},
		{name: "malformed cursor", f: Filter{Cursor: "not-a-cursor"}, wantField: "Cursor"},
		{name: "cut cursor", f: Filter{Cursor: valid[:len(valid)-2]}, wantField: "Cursor"},
		{name: "long tenant", f: Filter{Tenant: strings.Repeat("t", maxFieldBytes+1)}, wantField: "Tenant"},
		{name: "NUL in message ID", f: Filter{MessageID: "a\x00b"}, wantField: "MessageID"},
		{name: "invalid UTF-8 reason", f: Filter{Reason: "\xff"}, wantField: "Reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.f.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var fe *FilterError
			if !errors.Is(err, ErrInvalidFilter) || !errors.As(err, &fe) || fe.Field != tt.wantField ||
				!strings.Contains(err.Error(), ": "+tt.wantField+": ") {
				t.Fatalf("Validate() = %v, want an ErrInvalidFilter naming %s", err, tt.wantField)
			}
		})
	}
}

func TestStatesCoverMailAndRecipientStates(t *testing.T) {
	for _, s := range []string{"pending", "sending", "retrying", "sent", "failed", "dead", "suppressed",
		"accepted", "delivered", "bounced", "complained"} {
		if !isMailStatus(s) && !isRecipientState(s) {
			t.Errorf("%s is neither a mail status nor a recipient state", s)
		}
		if err := (Filter{State: s}).Validate(); err != nil {
			t.Errorf("state %s: %v", s, err)
		}
	}
	if len(States) != 11 {
		t.Errorf("States = %v, want the 7 mail statuses and 4 recipient-only states", States)
	}
}

func TestFindSQLMatchesRecipientsThroughTheIndexExpression(t *testing.T) {
	exact, _ := ParseRecipient("Ada@Example.com")
	domain, _ := ParseRecipient("@Example.com")
	tests := []struct {
		name     string
		match    RecipientMatch
		want     []string
		wantArgs []any
	}{
		{"address", exact, []string{"lower(r.address) = lower($1::text)"}, []any{"Ada@example.com"}},
		{"domain", domain, []string{"lower(split_part(r.address, '@', -1)) = $1::text"}, []any{"example.com"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sql, args := findSQL(Filter{}, &tt.match, nil, 10)
			for _, w := range append(tt.want, "ORDER BY r.created_at DESC") {
				if !strings.Contains(sql, w) {
					t.Errorf("SQL lacks %q:\n%s", w, sql)
				}
			}
			for i, a := range tt.wantArgs {
				if args[i] != a {
					t.Errorf("arg %d = %v, want %v", i+1, args[i], a)
				}
			}
			if last := args[len(args)-1]; last != 22 {
				t.Errorf("LIMIT arg = %v, want 22 (twice the page and the mail after it)", last)
			}
		})
	}
}

func TestLocalPartMatches(t *testing.T) {
	ada, _ := ParseRecipient("Ada@Example.com")
	quoted, _ := ParseRecipient(`"a@b"@example.com`)
	domain, _ := ParseRecipient("@example.com")
	tests := []struct {
		match   RecipientMatch
		address string
		want    bool
	}{
		{ada, "Ada@example.com", true},
		{ada, "Ada@EXAMPLE.COM", true},
		{ada, "ada@example.com", false},
		{ada, "ADA@example.com", false},
		{quoted, `"a@b"@Example.com`, true},
		{quoted, `"A@b"@example.com`, false},
		{domain, "anyone@Example.com", true},
		{ada, "no at sign", false},
	}
	for _, tt := range tests {
		if got := localPartMatches(tt.match, tt.address); got != tt.want {
			t.Errorf("localPartMatches(%q, %q) = %t, want %t", tt.match.Address(), tt.address, got, tt.want)
		}
	}
}

func TestFindSQLWithUntilIsASemiJoin(t *testing.T) {
	exact, _ := ParseRecipient("Ada@Example.com")
	until := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	sql, args := findSQL(Filter{Until: until}, &exact, nil, 10)
	for _, w := range []string{"FROM postline_messages m", "EXISTS (SELECT 1 FROM postline_recipients r",
		"lower(r.address) = lower($2::text)", "left(r.address, char_length($3::text)) = $3::text",
		"ORDER BY m.created_at DESC, m.message_id DESC"} {
		if !strings.Contains(sql, w) {
			t.Errorf("SQL lacks %q:\n%s", w, sql)
		}
	}
	if args[0] != until || args[1] != "Ada@example.com" || args[2] != "Ada" || args[len(args)-1] != 11 {
		t.Errorf("args = %v", args)
	}
}
