package idempotency

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

func TestAuditOptions(t *testing.T) {
	tests := []struct {
		name    string
		opts    AuditOptions
		want    AuditOptions
		wantErr string
	}{
		{"defaults", AuditOptions{}, AuditOptions{LeaseGrace: DefaultAuditLeaseGrace, MaxAge: DefaultAuditMaxAge, Limit: DefaultAuditLimit}, ""},
		{"explicit", AuditOptions{LeaseGrace: time.Second, MaxAge: time.Hour, Limit: 5}, AuditOptions{LeaseGrace: time.Second, MaxAge: time.Hour, Limit: 5}, ""},
		{"negative grace", AuditOptions{LeaseGrace: -time.Second}, AuditOptions{}, "LeaseGrace -1s"},
		{"negative max age", AuditOptions{MaxAge: -time.Hour}, AuditOptions{}, "MaxAge -1h0m0s"},
		{"negative limit", AuditOptions{Limit: -1}, AuditOptions{}, "Limit -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.opts.WithDefaults()
			err := got.Validate()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Validate() = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("WithDefaults() = %+v, Validate() = %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestDurationOf(t *testing.T) {
	tests := []struct {
		name string
		iv   pgtype.Interval
		want time.Duration
	}{
		{"null", pgtype.Interval{}, 0},
		{"microseconds", pgtype.Interval{Microseconds: 1_500_000, Valid: true}, 1500 * time.Millisecond},
		{"days", pgtype.Interval{Days: 3, Microseconds: 60_000_000, Valid: true}, 72*time.Hour + time.Minute},
		{"months count 30 days", pgtype.Interval{Months: 1, Valid: true}, 30 * 24 * time.Hour},
		{"negative", pgtype.Interval{Microseconds: -2_000_000, Valid: true}, -2 * time.Second},
	}
	for _, tt := range tests {
		if got := durationOf(tt.iv); got != tt.want {
			t.Errorf("%s: durationOf = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestUniqueIDs(t *testing.T) {
	tests := []struct {
		in, want []string
	}{
		{nil, []string{}},
		{[]string{"a", "", "b", "a", "c", "b"}, []string{"a", "b", "c"}},
	}
	for _, tt := range tests {
		if got := uniqueIDs(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("uniqueIDs(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
