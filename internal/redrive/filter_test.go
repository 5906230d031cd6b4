package redrive

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFilterSpecParse(t *testing.T) {
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		spec      FilterSpec
		want      Filter
		wantErr   string
		wantField string
	}{
		{"empty", FilterSpec{}, Filter{}, "", ""},
		{"reasons repeated and comma-separated", FilterSpec{Reasons: []string{"smtp_permanent, expired", "expired", ""}},
			Filter{Reasons: []string{"smtp_permanent", "expired"}}, "", ""},
		{"tenants and classes", FilterSpec{Tenants: []string{"acme,globex", " acme "}, Classes: []string{"permanent", "invalid,permanent"}},
			Filter{Tenants: []string{"acme", "globex"}, Classes: []string{"permanent", "invalid"}}, "", ""},
		{"durations ago", FilterSpec{Since: "7d", Until: "90m", Limit: 5},
			Filter{Since: now.Add(-7 * 24 * time.Hour), Until: now.Add(-90 * time.Minute), Limit: 5}, "", ""},
		{"RFC 3339", FilterSpec{Since: "2026-01-01T00:00:00Z", Until: "2026-01-02T01:00:00+02:00"},
			Filter{Since: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2026, 1, 1, 23, 0, 0, 0, time.UTC)}, "", ""},
		{"negative limit", FilterSpec{Limit: -1}, Filter{}, "--limit -1", FieldLimit},
		{"bad since", FilterSpec{Since: "yesterday"}, Filter{}, `--since "yesterday": want an RFC 3339 time`, FieldSince},
		{"bad days", FilterSpec{Until: "xd"}, Filter{}, `--until "xd"`, FieldUntil},
		{"too many days", FilterSpec{Until: "99999999999d"}, Filter{}, `--until "99999999999d"`, FieldUntil},
		{"negative duration", FilterSpec{Since: "-2h"}, Filter{}, "must not be negative", FieldSince},
		{"since after until", FilterSpec{Since: "1h", Until: "2h"}, Filter{}, "is not before --until", FieldSince},
		{"a trailing line break is trimmed like a space", FilterSpec{Tenants: []string{"acme\n"}}, Filter{Tenants: []string{"acme"}}, "", ""},
		{"control character inside a reason", FilterSpec{Reasons: []string{"a\x00b"}}, Filter{}, `--reason "a\x00b": contains a control character`, FieldReason},
		{"class too long", FilterSpec{Classes: []string{strings.Repeat("c", 300)}}, Filter{}, "--class", FieldClass},
		{"Message-IDs with and without brackets", FilterSpec{MessageIDs: []string{"<a@x>, b@x", "a@x"}},
			Filter{MessageIDs: []string{"a@x", "b@x"}}, "", ""},
		{"Message-ID too long", FilterSpec{MessageIDs: []string{strings.Repeat("m", 999)}}, Filter{}, "--message-id", FieldMessageID},
		{"Message-ID with a control character", FilterSpec{MessageIDs: []string{"a\rb@x"}}, Filter{}, "control character", FieldMessageID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.spec.Parse(now, func(f string) string { return "--" + f })
			if tt.wantErr != "" {
				var fe *FieldError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &fe) || fe.Field != tt.wantField {
					t.Errorf("error %v, want %q naming field %s", err, tt.wantErr, tt.wantField)
				}
				return
			}
			if err != nil || !slices.Equal(got.Reasons, tt.want.Reasons) || !slices.Equal(got.Tenants, tt.want.Tenants) ||
				!slices.Equal(got.Classes, tt.want.Classes) || !slices.Equal(got.MessageIDs, tt.want.MessageIDs) || !got.Since.Equal(tt.want.Since) ||
				!got.Until.Equal(tt.want.Until) || got.Limit != tt.want.Limit {
				t.Errorf("filter = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	// Without a name function the errors use the fields' own names.
	if _, err := (FilterSpec{Since: "soon"}).Parse(now, nil); err == nil || !strings.HasPrefix(err.Error(), `since "soon"`) {
		t.Errorf("unnamed error %v, want it to start with since", err)
	}
}

func TestFilterMatch(t *testing.T) {
	at := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	l := DeadLetter{Time: at, MessageID: "m1@x", Reason: "smtp_permanent", Class: "permanent", Tenant: "acme"}
	noTenant := DeadLetter{Time: at, Reason: "malformed_json", Class: "invalid"}
	tests := []struct {
		name   string
		filter Filter
		l      DeadLetter
		want   bool
	}{
		{"no filter", Filter{}, l, true},
		{"Message-ID listed", Filter{MessageIDs: []string{"other@x", "m1@x"}}, l, true},
		{"Message-ID not listed", Filter{MessageIDs: []string{"other@x"}}, l, false},
		{"reason listed", Filter{Reasons: []string{"expired", "smtp_permanent"}}, l, true},
		{"reason not listed", Filter{Reasons: []string{"expired"}}, l, false},
		{"class listed", Filter{Classes: []string{"permanent"}}, l, true},
		{"class not listed", Filter{Classes: []string{"invalid", "expired"}}, l, false},
		{"tenant listed", Filter{Tenants: []string{"globex", "acme"}}, l, true},
		{"tenant not listed", Filter{Tenants: []string{"globex"}}, l, false},
		{"a tenant filter never takes a letter without one", Filter{Tenants: []string{"acme"}}, noTenant, false},
		{"no tenant filter takes a letter without one", Filter{Classes: []string{"invalid"}}, noTenant, true},
		{"since is inclusive", Filter{Since: at}, l, true},
		{"before since", Filter{Since: at.Add(time.Second)}, l, false},
		{"until is exclusive", Filter{Until: at}, l, false},
		{"before until", Filter{Until: at.Add(time.Second)}, l, true},
		{"inside the window", Filter{Since: at.Add(-time.Hour), Until: at.Add(time.Hour), Reasons: []string{"smtp_permanent"}}, l, true},
		{"every condition", Filter{Since: at, Until: at.Add(time.Hour), Reasons: []string{"smtp_permanent"}, Classes: []string{"permanent"}, Tenants: []string{"acme"}}, l, true},
		{"every condition but one", Filter{Since: at, Until: at.Add(time.Hour), Reasons: []string{"smtp_permanent"}, Classes: []string{"permanent"}, Tenants: []string{"initech"}}, l, false},
		{"the limit is not a condition", Filter{Limit: 1}, l, true},
	}
	for _, tt := range tests {
		if got := tt.filter.Match(tt.l); got != tt.want {
			t.Errorf("%s: Match = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// FuzzFilterSpecParse checks that Parse either names a known field in its
// error or returns a filter of clean, distinct values whose window is not
// empty.
func FuzzFilterSpecParse(f *testing.F) {
	f.Add("2h", "1h", "acme,globex", "smtp_permanent", "permanent", 3)
	f.Add("2026-01-01T00:00:00Z", "", " , ", "a\x00", "", -1)
	f.Add("7d", "9999999999999d", "", "", "x,x,y", 0)
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	fields := []string{FieldSince, FieldUntil, FieldTenant, FieldReason, FieldClass, FieldLimit}
	f.Fuzz(func(t *testing.T, since, until, tenants, reasons, classes string, limit int) {
		spec := FilterSpec{Since: since, Until: until, Tenants: []string{tenants}, Reasons: []string{reasons}, Classes: []string{classes}, Limit: limit}
		got, err := spec.Parse(now, nil)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || !slices.Contains(fields, fe.Field) || !strings.HasPrefix(err.Error(), fe.Field+" ") {
				t.Fatalf("error %q does not name a known field", err)
			}
			return
		}
		for _, list := range [][]string{got.Tenants, got.Reasons, got.Classes} {
			for i, v := range list {
				if v == "" || v != strings.TrimSpace(v) || strings.Contains(v, ",") || slices.Index(list, v) != i {
					t.Fatalf("list %q holds a blank, untrimmed, comma or repeated value", list)
				}
			}
		}
		if got.Limit < 0 || (!got.Since.IsZero() && !got.Until.IsZero() && !got.Since.Before(got.Until)) {
			t.Fatalf("filter %+v: negative limit or empty window", got)
		}
	})
}
