package timearg

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{in: "", want: time.Time{}},
		{in: "2026-12-01T10:00:00Z", want: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)},
		{in: "2026-12-01T10:00:00.5+01:00", want: time.Date(2026, 12, 1, 9, 0, 0, 500_000_000, time.UTC)},
		{in: "90m", want: now.Add(-90 * time.Minute)},
		{in: " 7d ", want: now.Add(-7 * 24 * time.Hour)},
		{in: "0d", want: now},
		{in: "-2h", wantErr: true},
		{in: "-1d", wantErr: true},
		{in: "yesterday", wantErr: true},
		{in: "999999999d", wantErr: true},
		{in: "2026-12-01", wantErr: true},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in, now)
		if (err != nil) != tt.wantErr || !got.Equal(tt.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v (error %t)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
