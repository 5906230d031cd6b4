package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/fleet"
	"github.com/postline/postline/internal/testenv"
)

func TestDLQStatsArgumentErrors(t *testing.T) {
	env := map[string]string{"POSTLINE_KAFKA_BROKERS": "127.0.0.1:1"}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "stats", "--bucket", "0s"}, "--bucket 0s: must be positive"},
		{[]string{"dlq", "stats", "--since", ""}, "--since is empty"},
		{[]string{"dlq", "stats", "--since", "last week"}, `--since "last week"`},
		{[]string{"dlq", "stats", "--since", "1h", "--until", "2h"}, "is not before"},
		{[]string{"dlq", "stats", "--since", "7d", "--bucket", "1s"}, "buckets of 1s: at most 5000"},
		{[]string{"dlq", "stats", "--since", "1h", "--until", "10m", "--bucket", "1m", "extra"}, "unknown command"},
	}
	for _, tt := range tests {
		_, _, err := postctl(t, env, "", tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) || exitCode(err) != exitUsage {
			t.Errorf("%v: got %v, want a usage error containing %q", tt.args, err, tt.want)
		}
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{time.Hour: "1h", 10 * time.Minute: "10m", 90 * time.Minute: "1h30m",
		24 * time.Hour: "24h", 90 * time.Second: "1m30s", 30 * time.Second: "30s", 1500 * time.Millisecond: "1.5s"} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestDLQStatsText(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC)
	tests := []struct {
		name string
		h    fleet.Histogram
		want string
	}{
		{
			name: "two reasons, an empty bucket, a letter without a reason",
			h: fleet.Histogram{Since: t0, Until: t0.Add(2 * time.Hour), Bucket: time.Hour, Total: 5,
				Reasons: []fleet.ReasonCount{{Reason: "smtp_permanent", Count: 3}, {Reason: "", Count: 1}, {Reason: "max_age", Count: 1}},
				Buckets: []fleet.Bucket{
					{Start: t0, End: t0.Add(30 * time.Minute), Total: 4, ByReason: map[string]int{"smtp_permanent": 3, "": 1}},
					{Start: t0.Add(30 * time.Minute), End: t0.Add(90 * time.Minute), Total: 0, ByReason: map[string]int{}},
					{Start: t0.Add(90 * time.Minute), End: t0.Add(2 * time.Hour), Total: 1, ByReason: map[string]int{"max_age": 1}},
				}},
			want: `5 dead letters in mail.dlq from 2026-12-01T10:30:00Z to 2026-12-01T12:30:00Z, by 1h
START                 TOTAL  smtp_permanent  -  max_age
2026-12-01T10:30:00Z  4      3               1  0
2026-12-01T11:00:00Z  0      0               0  0
2026-12-01T12:00:00Z  1      0               0  1
TOTAL                 5      3               1  1
`,
		},
		{
			name: "none",
			h: fleet.Histogram{Since: t0, Until: t0.Add(10 * time.Minute), Bucket: 10 * time.Minute, Reasons: []fleet.ReasonCount{},
				Buckets: []fleet.Bucket{{Start: t0, End: t0.Add(10 * time.Minute), ByReason: map[string]int{}}}},
			want: `0 dead letters in mail.dlq from 2026-12-01T10:30:00Z to 2026-12-01T10:40:00Z, by 10m
START                 TOTAL
2026-12-01T10:30:00Z  0
TOTAL                 0
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			g := &globals{stdout: &out, output: "text", dlqTopic: "mail.dlq"}
			if err := printReport(g, tt.h, func() error { return writeHistogram(g, tt.h) }); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestDLQStatsKafka counts dead letters written by package deadletter,
// as a table and as JSON.
func TestDLQStatsKafka(t *testing.T) {
	testenv.Integration(t, "Kafka")
	dlqTopic := testenv.NewTopic(t, 2)
	w, err := deadletter.New(deadletter.Config{Kafka: testenv.Kafka(), Topic: dlqTopic}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	letter := func(key, reason string) deadletter.Letter {
		return deadletter.Letter{Key: []byte(key), Value: []byte("{}"), Topic: "mail.jobs", Reason: reason, Class: "permanent", Error: "550"}
	}
	if err := w.Publish(t.Context(), letter("a@x", deadletter.ReasonSMTPPermanent), letter("b@x", deadletter.ReasonSMTPPermanent),
		letter("c@x", deadletter.ReasonMaxAttempts)); err != nil {
		t.Fatal(err)
	}
	args := []string{"--brokers", strings.Join(testenv.KafkaBrokers(), ","), "--dlq-topic", dlqTopic}

	out, _, err := postctl(t, nil, "", append(args, "dlq", "stats", "--since", "2h", "--bucket", "1h")...)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(out, "3 dead letters in "+dlqTopic+" from ") || len(lines) < 4 ||
		strings.Join(strings.Fields(lines[1]), " ") != "START TOTAL smtp_permanent max_attempts" ||
		strings.Join(strings.Fields(lines[len(lines)-1]), " ") != "TOTAL 3 2 1" {
		t.Errorf("text output:\n%s", out)
	}

	out, _, err = postctl(t, nil, "", append(args, "-o", "json", "dlq", "stats", "--since", "30m", "--bucket", "10m")...)
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Since, Until  time.Time
		BucketSeconds float64 `json:"bucket_seconds"`
		Total         int
		Reasons       []fleet.ReasonCount
		Buckets       []struct {
			Start, End time.Time
			Total      int
			ByReason   map[string]int `json:"by_reason"`
		}
	}
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	last := h.Buckets[len(h.Buckets)-1]
	if h.Total != 3 || h.BucketSeconds != 600 || len(h.Buckets) < 3 || len(h.Buckets) > 4 || last.Total+h.Buckets[len(h.Buckets)-2].Total != 3 ||
		h.Until.Sub(h.Since) != 30*time.Minute || len(h.Reasons) != 2 || h.Reasons[0] != (fleet.ReasonCount{Reason: "smtp_permanent", Count: 2}) {
		t.Errorf("json output %s", out)
	}
}
