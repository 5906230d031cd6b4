package delivery

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/jobheader"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/job"
)

// closeCounter counts the sessions a pool closes.
type closeCounter struct{ closed *int }

func (s closeCounter) SendTo(_ context.Context, _ *job.Job, rcpts []sender.Recipient) (sender.Result, error) {
	return acceptAll(rcpts), nil
}
func (s closeCounter) Close() error { *s.closed++; return nil }

func TestRelayPoolFollowsItsSendControl(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel() // acquire with a cancelled context returns false exactly when it would wait
	tests := []struct {
		name       string
		maxConns   int
		control    *adaptive.SendControlConfig
		refuse     failure.Limit // what the relay answers the first send, "" = accepts it
		wantBefore int           // sessions acquired before acquire would wait
		wantClosed int           // sessions closed when all of them come back
		wantAfter  int           // sessions acquired afterwards before acquire would wait
	}{
		{name: "no control: the pool's size", maxConns: 6, wantBefore: 6, wantClosed: 0, wantAfter: 6},
		{name: "control starts at its initial limit", maxConns: 6,
			control: &adaptive.SendControlConfig{AIMD: adaptive.AIMDConfig{Initial: 4, Max: 6}}, wantBefore: 4, wantClosed: 0, wantAfter: 4},
		{name: "a connection refusal halves the limit and closes the sessions past it", maxConns: 6,
			control: &adaptive.SendControlConfig{AIMD: adaptive.AIMDConfig{Initial: 4, Max: 6}}, refuse: failure.LimitConnections,
			wantBefore: 4, wantClosed: 2, wantAfter: 2},
		{name: "a rate refusal keeps the connections and paces: one token, then a wait", maxConns: 6,
			control: &adaptive.SendControlConfig{AIMD: adaptive.AIMDConfig{Initial: 4, Max: 6}}, refuse: failure.LimitRate,
			wantBefore: 4, wantClosed: 0, wantAfter: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			closed := 0
			now := t0
			relay := Relay{Name: "r", MaxConns: tt.maxConns, NewSession: func() Session { return closeCounter{&closed} }}
			var sc *adaptive.SendControl
			if tt.control != nil {
				var err error
				if sc, err = adaptive.NewSendControl(*tt.control, nil, now); err != nil {
					t.Fatal(err)
				}
			}
			rp := newRelayPool(relay, 16, sc, func() time.Time { return now })
			drain := func() []Session {
				var got []Session
				for {
					s, ok := rp.acquire(cancelled)
					if !ok {
						return got
					}
					got = append(got, s)
				}
			}
			held := drain()
			if len(held) != tt.wantBefore {
				t.Fatalf("acquired %d sessions, want %d", len(held), tt.wantBefore)
			}
			if sc != nil && tt.refuse != "" {
				for range 10 * boolInt(tt.refuse == failure.LimitRate) { // enough traffic for a rate refusal to start the pacer
					sc.Done(now, now, true, "")
				}
				sc.Done(now, now, false, tt.refuse)
			}
			for _, s := range held {
				rp.putBack(s)
			}
			if closed != tt.wantClosed {
				t.Errorf("closed %d sessions, want %d", closed, tt.wantClosed)
			}
			if got := len(drain()); got != tt.wantAfter {
				t.Errorf("then acquired %d sessions, want %d", got, tt.wantAfter)
			}
		})
	}
}

// recordingPolicy decides a fixed delay and keeps what it was asked.
type recordingPolicy struct {
	mu     sync.Mutex
	delay  time.Duration
	inputs []adaptive.Inputs
}

func (r *recordingPolicy) Decide(in adaptive.Inputs) adaptive.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inputs = append(r.inputs, in)
	return adaptive.Decision{Retry: true, Delay: r.delay, NotBefore: in.Now.Add(r.delay), Reason: "recorded"}
}

type fakeGroup struct{ lag int64 }

func (g fakeGroup) Lag() (int64, map[int]int64, time.Time) { return g.lag, nil, time.Time{} }
func (g fakeGroup) SendingMembers() int                    { return 2 }

// adaptiveHarness is a pipeline with one relay whose sends fail with
// sendErr, the given policy and budgets, a group with a lag of 42 and a
// pressure guard.
func adaptiveHarness(t *testing.T, sendErr func(*job.Job, int) error, policy adaptive.Policy,
	budgets map[job.Priority]adaptive.Bucket) (*harness, *prometheus.Registry) {
	t.Helper()
	h := &harness{store: newFakeStore(), smtp: newFakeSMTP(sendErr), dlq: newFakeDLQ(), retries: newFakeRetries()}
	guard, err := adaptive.NewPressureGuard(adaptive.PressureConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	p, err := New(Config{
		Senders: 2, BatchSize: 4, BatchLinger: time.Millisecond, Resends: -1,
		Policy: policy, Budgets: budgets, SendControl: &adaptive.SendControlConfig{},
	}, slog.New(slog.NewTextHandler(io.Discard, nil)), reg, Deps{
		Store:       h.store,
		Relays:      []Relay{{Name: "p1", NewSession: func() Session { return h.smtp }, FleetRate: 50}},
		DeadLetters: h.dlq,
		Retries:     h.retries,
		Group:       fakeGroup{lag: 42},
		Pressure:    guard,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.pipeline = p
	return h, reg
}

func TestPipelineFeedsThePolicyItsInputs(t *testing.T) {
	throttled := func(*job.Job, int) error { return smtpErr(450, "4.7.1", "rate limit exceeded, try again in 7 seconds") }
	policy := &recordingPolicy{delay: 5 * time.Second} // the shortest tier: not waited out in the worker
	h, reg := adaptiveHarness(t, throttled, policy, nil)
	rec := mustJSON(t, testJob("a@x", "hello"))
	h.store.seed("a@x", rec, 3)
	h.src = newFakeSource([][]byte{rec}, true)
	h.src.store = h.store
	// The record is the third attempt; one of the two before was throttled.
	m := <-h.src.ch
	m.Headers = []kafka.Header{{Key: jobheader.KeyAttempt, Value: []byte("3")}, {Key: jobheader.KeyThrottles, Value: []byte("1")}}
	h.src.ch <- m
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := h.pipeline.Run(ctx, h.src); err != nil {
		t.Fatalf("Run: %v", err)
	}

	if len(policy.inputs) != 1 {
		t.Fatalf("policy asked %d times, want 1", len(policy.inputs))
	}
	in := policy.inputs[0]
	if in.Class != failure.Throttled || in.Attempt != 3 || in.Throttles != 2 || in.RetryAfter != 7*time.Second || in.Lag != 42 {
		t.Errorf("inputs = class %s attempt %d throttles %d retry-after %v lag %d; want throttled 3 2 7s 42",
			in.Class, in.Attempt, in.Throttles, in.RetryAfter, in.Lag)
	}
	if want := in.Now.Add(7 * time.Second); !in.RelayCooldownUntil.Equal(want) && in.RelayCooldownUntil.Sub(want).Abs() > time.Second {
		t.Errorf("RelayCooldownUntil = %v, want about %v (the relay's hint)", in.RelayCooldownUntil, want)
	}
	copies := h.retries.all()
	if len(copies) != 1 || copies[0].Throttles != 2 || copies[0].Attempt != 4 || copies[0].Tier != 5*time.Second {
		t.Fatalf("retry copies = %+v, want one for attempt 4 with 2 throttles in the 5s tier", copies)
	}
	if got := gaugeValue(t, reg, "postline_adaptive_send_rate", map[string]string{"provider": "p1"}); got != 0 {
		t.Errorf("send rate = %v, want 0: one refusal in a trickle of sends does not start pacing", got)
	}
	if got := histogramCount(t, reg, "postline_delivery_backoff_delay_seconds", map[string]string{"class": "throttled", "reason": "recorded"}); got != 1 {
		t.Errorf("backoff delay observations = %v, want 1", got)
	}
}

func TestPipelineWaitsOutShortThrottlesInPlace(t *testing.T) {
	var sends atomic.Int32
	throttled := func(*job.Job, int) error {
		sends.Add(1)
		return smtpErr(450, "4.7.1", "rate limit exceeded, try again in 1 seconds")
	}
	policy := &recordingPolicy{delay: 50 * time.Millisecond} // shorter than the 5s tier
	h, reg := adaptiveHarness(t, throttled, policy, nil)
	h.run(t, [][]byte{mustJSON(t, testJob("a@x", "a"))})

	// Three short throttles are waited out in the worker without an
	// attempt charged; the fourth goes to the delay tier as attempt 2.
	if got := sends.Load(); got != 1+maxThrottleHolds {
		t.Errorf("sends = %d, want %d", got, 1+maxThrottleHolds)
	}
	if got := counterValue(t, reg, "postline_delivery_reentries_total", map[string]string{"cause": "throttled"}); got != maxThrottleHolds {
		t.Errorf("throttled re-entries = %v, want %d", got, maxThrottleHolds)
	}
	for i, in := range policy.inputs {
		if in.Attempt != 1 || in.Throttles != i+1 {
			t.Errorf("policy input %d: attempt %d, throttles %d; want attempt 1, throttles %d", i, in.Attempt, in.Throttles, i+1)
		}
	}
	copies := h.retries.all()
	if len(copies) != 1 || copies[0].Attempt != 2 || copies[0].Throttles != 1+maxThrottleHolds || copies[0].Tier != 5*time.Second {
		t.Fatalf("retry copies = %+v, want one for attempt 2 with %d throttles in the 5s tier", copies, 1+maxThrottleHolds)
	}
}

func TestPipelineRetryBudgetsDeferRetries(t *testing.T) {
	mailboxFull := func(*job.Job, int) error { return smtpErr(452, "4.2.2", "mailbox full") }
	policy := &recordingPolicy{delay: time.Second}
	budgets := map[job.Priority]adaptive.Bucket{
		job.PriorityUrgent: {Burst: 1, PerSecond: 1},
		job.PriorityNormal: {Burst: 1, PerSecond: 0.001}, // the second retry waits 1000s for a token
		job.PriorityBulk:   {Burst: 1, PerSecond: 1},
	}
	h, reg := adaptiveHarness(t, mailboxFull, policy, budgets)
	h.run(t, [][]byte{mustJSON(t, testJob("a@x", "a")), mustJSON(t, testJob("b@x", "b"))})

	tiers := map[time.Duration]int{}
	for _, c := range h.retries.all() {
		tiers[c.Tier]++
	}
	if tiers[5*time.Second] != 1 || tiers[time.Hour] != 1 {
		t.Errorf("retry tiers = %v, want one in 5s (budget token) and one in 1h (waits ~1000s for the refill)", tiers)
	}
	if got := counterValue(t, reg, "postline_adaptive_budget_waits_total", map[string]string{"priority": "normal"}); got != 1 {
		t.Errorf("budget waits = %v, want 1", got)
	}
}

func TestPipelineExportsAdaptiveMetrics(t *testing.T) {
	h, reg := adaptiveHarness(t, nil, nil, adaptive.DefaultBudgets)
	h.run(t, [][]byte{mustJSON(t, testJob("a@x", "a"))})
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"postline_adaptive_lag", nil, 42},
		{"postline_adaptive_success_ratio", map[string]string{"provider": "p1"}, 1},
		{"postline_adaptive_success_ratio_overall", nil, 1},
		{"postline_adaptive_concurrency_limit", map[string]string{"provider": "p1"}, 2}, // capped by the 2 senders
		{"postline_adaptive_send_rate", map[string]string{"provider": "p1"}, 0},         // unpaced: never refused for rate
		{"postline_adaptive_fleet_rate", map[string]string{"provider": "p1"}, 25},       // 50/s over 2 members
		{"postline_adaptive_budget_tokens", map[string]string{"priority": "urgent"}, 100},
		{"postline_adaptive_budget_tokens", map[string]string{"priority": "normal"}, 30},
		{"postline_adaptive_budget_tokens", map[string]string{"priority": "bulk"}, 5},
		{"postline_adaptive_pressure_factor", nil, 1},
	}
	for _, tt := range tests {
		if got := gaugeValue(t, reg, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}

// metric finds the series of name whose labels include labels.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			return m
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return nil
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	return metric(t, reg, name, labels).GetGauge().GetValue()
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	return metric(t, reg, name, labels).GetCounter().GetValue()
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) uint64 {
	return metric(t, reg, name, labels).GetHistogram().GetSampleCount()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
