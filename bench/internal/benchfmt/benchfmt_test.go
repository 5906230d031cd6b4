package benchfmt

import (
	"testing"
	"time"
)

func TestMillis(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0.0 ms"},
		{1500 * time.Microsecond, "1.5 ms"},
		{2 * time.Second, "2000.0 ms"},
	} {
		if got := Millis(tt.d); got != tt.want {
			t.Errorf("Millis(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestCount(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want string
	}{
		{0, "0"},
		{999, "999"},
		{1000, "1k"},
		{1500, "1500"},
		{10_000, "10k"},
		{1_000_000, "1M"},
		{1_500_000, "1500k"},
		{10_000_000, "10M"},
	} {
		if got := Count(tt.n); got != tt.want {
			t.Errorf("Count(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}
