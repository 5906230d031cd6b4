package webhook

import (
	"net/http"
	"testing"
	"time"
)

func TestBackoffSchedule(t *testing.T) {
	lowest := backoff{base: time.Second, max: 40 * time.Second, jitter: func(time.Duration) time.Duration { return 0 }}
	highest := backoff{base: time.Second, max: 40 * time.Second, jitter: func(n time.Duration) time.Duration { return n }}
	wantCeiling := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 40 * time.Second, 40 * time.Second}
	for i, want := range wantCeiling {
		n := i + 1
		if got := lowest.ceiling(n); got != want {
			t.Errorf("ceiling(%d) = %s, want %s", n, got, want)
		}
		if got := highest.delay(n, 0); got != want {
			t.Errorf("delay(%d) with the most jitter = %s, want the ceiling %s", n, got, want)
		}
		if got := lowest.delay(n, 0); got != want/2 {
			t.Errorf("delay(%d) with the least jitter = %s, want half the ceiling %s", n, got, want/2)
		}
	}
	// The doubling stops at max, even after many attempts.
	if got := lowest.ceiling(1000); got != 40*time.Second {
		t.Errorf("ceiling(1000) = %s", got)
	}
	// Retry-After is honoured above the schedule, up to max.
	if got := lowest.delay(1, 10*time.Second); got != 10*time.Second {
		t.Errorf("delay with Retry-After 10s = %s", got)
	}
	if got := lowest.delay(1, time.Hour); got != 40*time.Second {
		t.Errorf("delay with Retry-After 1h = %s, want max 40s", got)
	}
	if got := highest.delay(6, time.Second); got != 32*time.Second {
		t.Errorf("a short Retry-After shortened the schedule: %s", got)
	}
}

func TestBackoffRandomJitterInRange(t *testing.T) {
	b := backoff{base: 100 * time.Millisecond, max: 10 * time.Second, jitter: randomJitter}
	for n := 1; n <= 8; n++ {
		c := b.ceiling(n)
		for range 200 {
			if d := b.delay(n, 0); d < c/2 || d > c {
				t.Fatalf("delay(%d) = %s, outside [%s, %s]", n, d, c/2, c)
			}
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-5", 0},
		{"30", 30 * time.Second},
		{"99999999999", 24 * time.Hour},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"soon", 0},
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.v, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", tt.v, got, tt.want)
		}
	}
}
