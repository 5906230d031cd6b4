package retry

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
)

func TestParseTiers(t *testing.T) {
	tests := []struct {
		in      string
		want    Tiers
		wantErr string
	}{
		{"5s,30s,2m", Tiers{5 * time.Second, 30 * time.Second, 2 * time.Minute}, ""},
		{" 5s , 1h30m ", Tiers{5 * time.Second, 90 * time.Minute}, ""},
		{"5s,30s,2m,10m,1h,6h", DefaultTiers, ""},
		{"500ms", Tiers{500 * time.Millisecond}, ""},
		{"", nil, "want a comma-separated list"},
		{"5s,,30s", nil, "invalid duration"},
		{"5s,abc", nil, `invalid duration "abc"`},
		{"0s", nil, "tier 0s is not positive"},
		{"-5s", nil, "tier -5s is not positive"},
		{"30s,5s", nil, "tier 5s follows the larger tier 30s"},
		{"5s,5s", nil, "tier 5s is listed twice"},
		{"60s,1m", nil, "tier 1m0s is listed twice"},
		{"1500us", nil, "not a whole number of milliseconds"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTiers(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseTiers(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("ParseTiers(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			if back, err := ParseTiers(got.String()); err != nil || !slices.Equal(back, got) {
				t.Fatalf("ParseTiers(%q.String() = %q) = %v, %v; want a round trip", tt.in, got.String(), back, err)
			}
		})
	}
}

func TestPick(t *testing.T) {
	tiers := Tiers{5 * time.Second, 30 * time.Second, 2 * time.Minute}
	tests := []struct {
		delay, want time.Duration
	}{
		{-time.Second, 5 * time.Second},
		{0, 5 * time.Second},
		{time.Millisecond, 5 * time.Second},
		{5 * time.Second, 5 * time.Second},
		{5*time.Second + 1, 30 * time.Second},
		{92 * time.Second, 2 * time.Minute},
		{2 * time.Minute, 2 * time.Minute},
		{time.Hour, 2 * time.Minute},
	}
	for _, tt := range tests {
		if got := tiers.Pick(tt.delay); got != tt.want {
			t.Errorf("Pick(%v) = %v, want %v", tt.delay, got, tt.want)
		}
	}
	if got := (Tiers{}).Pick(time.Second); got != 0 {
		t.Errorf("empty Tiers: Pick = %v, want 0", got)
	}
}

func TestTopicName(t *testing.T) {
	tests := []struct {
		tier time.Duration
		want string
	}{
		{5 * time.Second, "mail.retry.5s"},
		{30 * time.Second, "mail.retry.30s"},
		{90 * time.Second, "mail.retry.90s"},
		{2 * time.Minute, "mail.retry.2m"},
		{10 * time.Minute, "mail.retry.10m"},
		{time.Hour, "mail.retry.1h"},
		{90 * time.Minute, "mail.retry.90m"},
		{6 * time.Hour, "mail.retry.6h"},
		{48 * time.Hour, "mail.retry.48h"},
		{500 * time.Millisecond, "mail.retry.500ms"},
		{1500 * time.Millisecond, "mail.retry.1500ms"},
	}
	for _, tt := range tests {
		if got := TopicName(DefaultPrefix, tt.tier); got != tt.want {
			t.Errorf("TopicName(%v) = %q, want %q", tt.tier, got, tt.want)
		}
	}
	want := []string{"mail.retry.5s", "mail.retry.30s", "mail.retry.2m", "mail.retry.10m", "mail.retry.1h", "mail.retry.6h"}
	if got := DefaultTiers.Topics(DefaultPrefix); !slices.Equal(got, want) {
		t.Errorf("DefaultTiers.Topics = %v, want %v", got, want)
	}
}

func TestTopicSpecs(t *testing.T) {
	specs := TopicSpecs("x.retry", Tiers{5 * time.Second, 30 * 24 * time.Hour}, 0)
	if len(specs) != 2 {
		t.Fatalf("got %d specs, want 2", len(specs))
	}
	for _, s := range specs {
		if err := s.Validate(); err != nil {
			t.Errorf("spec %s: %v", s.Name, err)
		}
		// A delay topic takes any record of the jobs topic (4 MiB) plus the
		// headers a retry copy adds.
		if s.Partitions != 8 || s.Configs["max.message.bytes"] != "4210765" {
			t.Errorf("spec %s: partitions %d, max.message.bytes %q; want 8, 4210765", s.Name, s.Partitions, s.Configs["max.message.bytes"])
		}
	}
	if specs[0].Name != "x.retry.5s" || specs[0].Configs["retention.ms"] != "604800000" {
		t.Errorf("spec 0 = %s retention %s, want x.retry.5s with 7 days", specs[0].Name, specs[0].Configs["retention.ms"])
	}
	if specs[1].Configs["retention.ms"] != "25920000000" {
		t.Errorf("30-day tier retention = %s, want ten times the tier (25920000000)", specs[1].Configs["retention.ms"])
	}
	if got := TopicSpecs(DefaultPrefix, DefaultTiers, 3)[0].Partitions; got != 3 {
		t.Errorf("partitions = %d, want 3", got)
	}
}

func TestCopyHeaders(t *testing.T) {
	notBefore := time.Date(2026, 11, 29, 12, 0, 5, 123, time.FixedZone("X", 3600))
	firstSeen := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	orig := []kafka.Header{
		{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
		{Key: jobheader.KeyAttempt, Value: []byte("1")},
		{Key: jobheader.KeyFirstSeen, Value: []byte("2026-11-29T09:00:00Z")},
		{Key: jobheader.KeyLastClass, Value: []byte("transient")},
		{Key: jobheader.KeyAttempt, Value: []byte("1")}, // a stray duplicate
	}
	before := slices.Clone(orig)
	tests := []struct {
		name string
		c    Copy
		want map[string][]string
	}{
		{"every field", Copy{Headers: orig, Attempt: 2, NotBefore: notBefore, FirstSeen: firstSeen, LastClass: "throttled", Throttles: 1},
			map[string][]string{
				"traceparent":          {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
				jobheader.KeyAttempt:   {"2"},
				jobheader.KeyNotBefore: {"2026-11-29T11:00:05.000000123Z"},
				jobheader.KeyFirstSeen: {"2026-11-29T10:00:00Z"},
				jobheader.KeyLastClass: {"throttled"},
				jobheader.KeyThrottles: {"1"},
			}},
		{"zero first-seen and empty class keep the originals", Copy{Headers: orig, Attempt: 3, NotBefore: notBefore},
			map[string][]string{
				jobheader.KeyAttempt:   {"3"},
				jobheader.KeyFirstSeen: {"2026-11-29T09:00:00Z"},
				jobheader.KeyLastClass: {"transient"},
				jobheader.KeyThrottles: nil,
			}},
		{"no original headers", Copy{Attempt: 2, NotBefore: notBefore, FirstSeen: firstSeen, LastClass: "unknown"},
			map[string][]string{
				"traceparent":          nil,
				jobheader.KeyAttempt:   {"2"},
				jobheader.KeyFirstSeen: {"2026-11-29T10:00:00Z"},
				jobheader.KeyLastClass: {"unknown"},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := copyHeaders(tt.c)
			for k, want := range tt.want {
				if got := testkit.HeaderValues(h, k); !slices.Equal(got, want) {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
			if got, ok := jobheader.NotBefore(h); !ok || !got.Equal(notBefore) {
				t.Errorf("jobheader.NotBefore = %v, %v; want %v", got, ok, notBefore)
			}
			if got := jobheader.Attempt(h); got != tt.c.Attempt {
				t.Errorf("jobheader.Attempt = %d, want %d", got, tt.c.Attempt)
			}
			if got := jobheader.Throttles(h); got != tt.c.Throttles {
				t.Errorf("jobheader.Throttles = %d, want %d", got, tt.c.Throttles)
			}
		})
	}
	if !slices.EqualFunc(orig, before, func(a, b kafka.Header) bool { return a.Key == b.Key && string(a.Value) == string(b.Value) }) {
		t.Fatal("copyHeaders modified the original headers")
	}
}

func TestWriterConfigAndPublishValidation(t *testing.T) {
	if _, err := NewWriter(WriterConfig{}, nil); err == nil || !strings.Contains(err.Error(), "Kafka") {
		t.Fatalf("NewWriter without a cluster: %v, want an error naming Kafka", err)
	}
	if _, err := NewWriter(WriterConfig{Kafka: testenv.KafkaCluster("b:1"), Tiers: Tiers{time.Minute, time.Second}}, nil); err == nil || !strings.Contains(err.Error(), "Tiers") {
		t.Fatalf("NewWriter with descending tiers: %v, want an error naming Tiers", err)
	}
	reg := prometheus.NewRegistry()
	w, err := NewWriter(WriterConfig{Kafka: testenv.KafkaCluster("127.0.0.1:1")}, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	nb := time.Now()
	tests := []struct {
		name string
		c    Copy
		want string
	}{
		{"unknown tier", Copy{Attempt: 2, NotBefore: nb, Tier: 7 * time.Second}, "tier 7s is not one of"},
		{"attempt 0", Copy{Attempt: 0, NotBefore: nb, Tier: 5 * time.Second}, "attempt 0 is below 1"},
		{"no not-before", Copy{Attempt: 2, Tier: 5 * time.Second}, "NotBefore is not set"},
	}
	for _, tt := range tests {
		if err := w.Publish(context.Background(), tt.c); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Publish = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
	if err := w.Publish(context.Background()); err != nil {
		t.Errorf("Publish of nothing = %v, want nil", err)
	}
	if n := testutil.CollectAndCount(w.records); n != len(DefaultTiers) {
		t.Errorf("records_total has %d series, want one per tier (%d)", n, len(DefaultTiers))
	}
}

func TestMaxJitter(t *testing.T) {
	tests := []struct {
		tier, limit, want time.Duration
	}{
		{5 * time.Second, time.Second, 500 * time.Millisecond},
		{30 * time.Second, time.Second, time.Second},
		{6 * time.Hour, time.Second, time.Second},
		{time.Hour, 5 * time.Minute, 5 * time.Minute},
		{5 * time.Second, -1, 0},
		{5 * time.Millisecond, time.Second, 500 * time.Microsecond},
	}
	for _, tt := range tests {
		if got := maxJitter(tt.tier, tt.limit); got != tt.want {
			t.Errorf("maxJitter(%v, %v) = %v, want %v", tt.tier, tt.limit, got, tt.want)
		}
	}
	for _, n := range []time.Duration{0, -time.Second} {
		if got := randomJitter(n); got != 0 {
			t.Errorf("randomJitter(%v) = %v, want 0", n, got)
		}
	}
	const n = 500 * time.Millisecond
	var lo, hi bool
	for range 10000 {
		j := randomJitter(n)
		if j < 0 || j >= n {
			t.Fatalf("randomJitter(%v) = %v, outside [0, %v)", n, j, n)
		}
		lo = lo || j < n/10
		hi = hi || j > n*9/10
	}
	if !lo || !hi {
		t.Errorf("10,000 jitters of up to %v never reached both ends (low %v, high %v): not spread", n, lo, hi)
	}
}

func TestSchedulerConfigValidate(t *testing.T) {
	valid := SchedulerConfig{Kafka: testenv.KafkaCluster("b:9092"), RejectFunc: func(context.Context, consumer.Message, string, string) error { return nil }}.WithDefaults()
	tests := []struct {
		name   string
		mutate func(*SchedulerConfig)
		want   string
	}{
		{"valid", func(*SchedulerConfig) {}, ""},
		{"no cluster", func(c *SchedulerConfig) { c.Kafka = nil }, "Kafka"},
		{"no reject func", func(c *SchedulerConfig) { c.RejectFunc = nil }, "RejectFunc"},
		{"bad tiers", func(c *SchedulerConfig) { c.Tiers = Tiers{time.Second, time.Second} }, "Tiers = 1s,1s: tier 1s is listed twice"},
		{"jobs is a delay topic", func(c *SchedulerConfig) { c.JobsTopic = "mail.retry.5s" }, "JobsTopic = mail.retry.5s: is one of the delay topics"},
		{"batch size", func(c *SchedulerConfig) { c.BatchSize = -1 }, "BatchSize = -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.mutate(&c)
			err := c.Validate()
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
	if valid.JobsTopic != "mail.jobs" || valid.GroupID != "postline-retry-scheduler" || valid.MaxJitter != time.Second ||
		valid.BatchSize != 256 || valid.BatchLinger != 5*time.Millisecond || valid.Prefix != "mail.retry" {
		t.Errorf("WithDefaults = %+v", valid)
	}
	if _, err := NewScheduler(SchedulerConfig{Kafka: testenv.KafkaCluster("b:1"), RejectFunc: rejectUnexpected(t), SessionTimeout: -1}, slog.New(slog.DiscardHandler), nil); err == nil ||
		!strings.Contains(err.Error(), "SessionTimeout") {
		t.Errorf("NewScheduler with a bad consumer setting: %v, want an error naming SessionTimeout", err)
	}
}

// fakeClock is a settable clock.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// Planning and lateness on an injected clock: a record is planned at its
// not-before plus its jitter (now when the header is missing or invalid),
// and lateness is the ack time minus that plan.
func TestSchedulerPlanAndLateness(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	reg := prometheus.NewRegistry()
	s, err := NewScheduler(SchedulerConfig{Kafka: testenv.KafkaCluster("127.0.0.1:1"), RejectFunc: rejectUnexpected(t), NowFunc: clock.Now}, slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	var bounds []time.Duration
	s.jitterFunc = func(n time.Duration) time.Duration { bounds = append(bounds, n); return n / 2 }

	nb := clock.now.Add(3 * time.Second)
	tests := []struct {
		name    string
		topic   string
		headers []kafka.Header
		bound   time.Duration // jitter bound passed to jitterFunc
		planned time.Time
	}{
		{"5s tier", "mail.retry.5s", []kafka.Header{{Key: jobheader.KeyNotBefore, Value: []byte(jobheader.FormatTime(nb))}}, 500 * time.Millisecond, nb.Add(250 * time.Millisecond)},
		{"1h tier", "mail.retry.1h", []kafka.Header{{Key: jobheader.KeyNotBefore, Value: []byte(jobheader.FormatTime(nb))}}, time.Second, nb.Add(500 * time.Millisecond)},
		{"missing header", "mail.retry.30s", nil, time.Second, clock.now.Add(500 * time.Millisecond)},
		{"invalid header", "mail.retry.30s", []kafka.Header{{Key: jobheader.KeyNotBefore, Value: []byte("soon")}}, time.Second, clock.now.Add(500 * time.Millisecond)},
	}
	for i, tt := range tests {
		s.park(consumer.Message{Topic: tt.topic, Offset: int64(i), Headers: tt.headers})
		if bounds[i] != tt.bound {
			t.Errorf("%s: jitter bound %v, want %v", tt.name, bounds[i], tt.bound)
		}
	}
	if got := testutil.ToFloat64(s.metrics.invalid); got != 2 {
		t.Errorf("invalid_not_before_total = %v, want 2", got)
	}
	if got := testutil.ToFloat64(s.metrics.waiting.WithLabelValues("30s")); got != 2 {
		t.Errorf("waiting{tier=30s} = %v, want 2", got)
	}
	// Drain the queue in due order; the fake clock is past every plan.
	clock.now = clock.now.Add(time.Minute)
	out := make(chan parked)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.queue.Run(ctx, nil, out) }()
	var got []parked
	for range tests {
		got = append(got, <-out)
	}
	cancel()
	<-done
	wantOrder := []int64{2, 3, 0, 1} // plans: now+0.5s (twice, FIFO), nb+0.25s, nb+0.5s
	for i, p := range got {
		if p.msg.Offset != wantOrder[i] || !p.planned.Equal(tests[p.msg.Offset].planned) {
			t.Errorf("due #%d: offset %d planned %v; want offset %d planned %v", i, p.msg.Offset, p.planned, wantOrder[i], tests[wantOrder[i]].planned)
		}
	}

	clock.now = nb.Add(250*time.Millisecond + 42*time.Millisecond)
	s.acked([]parked{s.startReinject(got[2])}) // the 5s record, 42ms late
	clock.now = clock.now.Add(-time.Hour)
	s.acked([]parked{s.startReinject(got[3])}) // acknowledged "before" its plan: lateness 0, not negative
	if n := testutil.CollectAndCount(s.metrics.lateness); n != len(DefaultTiers) {
		t.Errorf("lateness has %d series, want one per tier", n)
	}
	sum := func(tier string) (float64, uint64) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "postline_scheduler_lateness_seconds" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == tier {
					return m.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleCount()
				}
			}
		}
		t.Fatalf("no lateness series for tier %s", tier)
		return 0, 0
	}
	if s5, n := sum("5s"); n != 1 || s5 < 0.0419 || s5 > 0.0421 {
		t.Errorf("lateness{5s}: sum %v count %d, want 0.042 and 1", s5, n)
	}
	if s1, n := sum("1h"); n != 1 || s1 != 0 {
		t.Errorf("lateness{1h}: sum %v count %d, want 0 and 1", s1, n)
	}
	if got := testutil.ToFloat64(s.metrics.reinjected.WithLabelValues("5s")); got != 1 {
		t.Errorf("reinjected_total{5s} = %v, want 1", got)
	}
	if d := lateness(clock.now, clock.now.Add(time.Second)); d != 0 {
		t.Errorf("lateness before the plan = %v, want 0", d)
	}
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewScheduler(SchedulerConfig{Kafka: testenv.KafkaCluster("127.0.0.1:1"), RejectFunc: rejectUnexpected(t)}, slog.New(slog.DiscardHandler), reg); err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(WriterConfig{Kafka: testenv.KafkaCluster("127.0.0.1:1")}, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	names := []string{"postline_retry_records_total", "postline_scheduler_lateness_seconds", "postline_scheduler_reinjected_total",
		"postline_scheduler_waiting", "postline_scheduler_invalid_not_before_total", "postline_scheduler_produce_errors_total",
		"postline_consumer_paused"}
	for _, n := range names {
		if c, err := testutil.GatherAndCount(reg, n); err != nil || c == 0 {
			t.Errorf("metric %s: %d series, %v; want it registered", n, c, err)
		}
	}
}
