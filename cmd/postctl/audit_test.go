package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/idempotency"
)

func TestParsePublished(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
		wantErr  string
	}{
		{"strings", "\"a@x\"\n\n\"<b@x>\"\n", []string{"a@x", "b@x"}, ""},
		{"jobs", `{"message_id":"<c@x>","from":"f@x","to":["t@x"],"text":"hi"}` + "\n", []string{"c@x"}, ""},
		{"publish output", `{"published":2,"seconds":0.1,"per_second":20,"message_ids":["d@x","e@x"]}`, []string{"d@x", "e@x"}, ""},
		{"mixed, CRLF", "\"a@x\"\r\n{\"message_id\":\"b@x\"}\r\n", []string{"a@x", "b@x"}, ""},
		{"empty", "", nil, ""},
		{"job without an ID", "\"a@x\"\n" + `{"from":"f@x"}`, nil, `line 2: no "message_id"`},
		{"empty ID", `"<>"`, nil, "line 1: empty Message-ID"},
		{"empty ID in a list", `{"message_ids":["a@x",""]}`, nil, "line 1: empty Message-ID"},
		{"number", "42", nil, "line 1: want a JSON string or an object"},
		{"not JSON", "\n\nhello", nil, "line 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePublished(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("parsePublished = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestAuditProblems(t *testing.T) {
	two, none := 2, 0
	tests := []struct {
		name string
		rep  auditReport
		want []string
	}{
		{"clean", auditReport{MissingCount: &none}, nil},
		{"without --published", auditReport{}, nil},
		{"missing", auditReport{MissingCount: &two}, []string{"2 published Message-IDs have no row"}},
		{"stuck and too old", auditReport{StuckCount: 1, LeaseGraceSeconds: 60, TooOldCount: 3, MaxAgeSeconds: 3600},
			[]string{"1 row in sending past the lease by more than 1m0s (--lease-grace)", "3 rows in flight for longer than 1h0m (--max-age)"}},
	}
	for _, tt := range tests {
		if got := tt.rep.problems(); !slices.Equal(got, tt.want) {
			t.Errorf("%s: problems = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestNewMessageStatus(t *testing.T) {
	at := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name          string
		row           idempotency.Row
		wantAge       float64
		wantLeaseLeft *float64
		wantLease     string // the LEASE cell of the text table
	}{
		{"sending, lease live",
			idempotency.Row{MessageID: "a@x", Status: idempotency.StatusSending, LeaseOwner: "w1", LeaseExpiresAt: at.Add(20 * time.Second),
				FirstSeen: at.Add(-time.Minute), CreatedAt: at.Add(-30 * time.Second), UpdatedAt: at.Add(-10 * time.Second)},
			60, ptr(20.0), "w1, 20s left"},
		{"sending, lease expired",
			idempotency.Row{MessageID: "a@x", Status: idempotency.StatusSending, LeaseOwner: "w1", LeaseExpiresAt: at.Add(-90 * time.Second),
				CreatedAt: at.Add(-2 * time.Minute), UpdatedAt: at.Add(-2 * time.Minute)},
			120, ptr(-90.0), "w1, EXPIRED 1m30s ago"},
		{"sent: no lease shown",
			idempotency.Row{MessageID: "a@x", Status: idempotency.StatusSent, FirstSeen: at.Add(-time.Hour), CreatedAt: at, UpdatedAt: at},
			3600, nil, "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newMessageStatus(tt.row, at)
			if s.AgeSeconds != tt.wantAge || s.Terminal != tt.row.Status.Terminal() {
				t.Errorf("age %v terminal %v, want %v %v", s.AgeSeconds, s.Terminal, tt.wantAge, tt.row.Status.Terminal())
			}
			switch {
			case tt.wantLeaseLeft == nil && s.LeaseRemainingSeconds != nil,
				tt.wantLeaseLeft != nil && (s.LeaseRemainingSeconds == nil || *s.LeaseRemainingSeconds != *tt.wantLeaseLeft):
				t.Errorf("lease remaining %v, want %v", s.LeaseRemainingSeconds, tt.wantLeaseLeft)
			}
			_, rows := statusTable(statusReport{Messages: []messageStatus{s}})
			if got := rows[0][7]; got != tt.wantLease {
				t.Errorf("LEASE cell %q, want %q", got, tt.wantLease)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
