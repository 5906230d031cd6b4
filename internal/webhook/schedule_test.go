package webhook

import (
	"net/http"
	"testing"
	"time"
)

func TestScheduleFollowsTheCommonDelays(t *testing.T) {
	s := Schedule{}.WithDefaults()
	first := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	mid := func() float64 { return 0.5 } // no jitter either way
	want := []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour,
		5 * time.Hour, 10 * time.Hour, 10 * time.Hour, 10 * time.Hour, 10 * time.Hour}
	now := first
	for i, w := range want {
		next, ok := s.Next(i+1, first, now, 0, mid)
		if !ok {
			t.Fatalf("attempt %d at +%s: given up, want a redelivery in %s", i+1, now.Sub(first), w)
		}
		if got := next.Sub(now); got != w {
			t.Errorf("after attempt %d: wait %s, want %s", i+1, got, w)
		}
		now = next
	}
}

func TestScheduleJitterStaysInItsBand(t *testing.T) {
	s := Schedule{}.WithDefaults()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, r := range []float64{0, 0.25, 0.999999} {
		next, _ := s.Next(2, now, now, 0, func() float64 { return r })
		if w := next.Sub(now); w < 270*time.Second || w > 330*time.Second {
			t.Errorf("rand %g: wait %s outside 5m ± 10%%", r, w)
		}
	}
}

func TestScheduleHonoursRetryAfter(t *testing.T) {
	s := Schedule{}.WithDefaults()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	mid := func() float64 { return 0.5 }
	for _, tt := range []struct {
		name       string
		attempts   int
		retryAfter time.Duration
		want       time.Duration
	}{
		{"longer than the schedule", 1, time.Minute, time.Minute},
		{"shorter than the schedule", 3, time.Minute, 30 * time.Minute},
		{"capped at a day", 1, 48 * time.Hour, 24 * time.Hour},
	} {
		next, ok := s.Next(tt.attempts, now, now, tt.retryAfter, mid)
		if !ok || next.Sub(now) != tt.want {
			t.Errorf("%s: wait %s (ok %v), want %s", tt.name, next.Sub(now), ok, tt.want)
		}
	}
}

// Driven by a clock across the whole horizon: 13 attempts over a little
// more than three days, the last made past 72 h, then the event is given
// up on.
func TestScheduleHorizonIsAtLeastThreeDays(t *testing.T) {
	s := Schedule{}.WithDefaults()
	first := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now, attempts := first, 1
	for {
		next, ok := s.Next(attempts, first, now, 0, func() float64 { return 0 }) // shortest waits
		if !ok {
			break
		}
		now, attempts = next, attempts+1
		if attempts > 100 {
			t.Fatal("never gave up")
		}
	}
	if span := now.Sub(first); span < 72*time.Hour {
		t.Errorf("last attempt %s after the first, want at least 72h", span)
	}
	if attempts < 12 {
		t.Errorf("%d attempts, want the common eight and the 10h wait repeated to the horizon", attempts)
	}
}

func TestScheduleValidate(t *testing.T) {
	for _, s := range []Schedule{
		{Delays: []time.Duration{time.Second, 0}, Horizon: time.Hour, Jitter: 0.1},
		{Delays: []time.Duration{time.Second}, Horizon: -1, Jitter: 0.1},
		{Delays: []time.Duration{time.Second}, Horizon: time.Hour, Jitter: 1},
	} {
		if s.Validate() == nil {
			t.Errorf("%+v: valid, want an error", s)
		}
	}
	if err := (Schedule{}).WithDefaults().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
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
