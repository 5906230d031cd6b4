package main

import (
	"context"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRelayModel(t *testing.T) {
	p := DefaultParams()
	p.Transient = 0
	tests := []struct {
		name     string
		p        func(Params) Params
		bad      bool
		attempts int
		want     answerKind
		reply    Reply
	}{
		{"within capacity accepts", func(p Params) Params { return p }, false, 1, answerAccepted, Reply{}},
		{"connection limit: 421 at the greeting with hint", func(p Params) Params { p.Conns, p.Rate = 3, 0; return p }, false, 4, answerBusy, tooManyConnections(1)},
		{"rate limit: 450 at RCPT with hint", func(p Params) Params { p.Conns, p.Burst = 100, 5; return p }, false, 6, answerRate, rateExceeded(1)},
		{"all transient: 421 4.4.2", func(p Params) Params { p.Transient = 1; return p }, false, 1, answerDrop, replyDrop},
		{"bad recipient: 550 5.1.1", func(p Params) Params { return p }, true, 1, answerBadRecipient, replyBadRecipient},
		{"a drop comes before the recipient check", func(p Params) Params { p.Transient = 1; return p }, true, 1, answerDrop, replyDrop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRelay(tt.p(p), simStart, rand.New(rand.NewPCG(1, 1)))
			var a answer
			for range tt.attempts {
				a = r.Attempt(simStart, tt.bad)
			}
			if a.kind != tt.want || a.reply != tt.reply {
				t.Errorf("last answer %+v, want kind %d reply %q", a, tt.want, tt.reply)
			}
		})
	}
	// The bucket refills at Rate: after a second, Rate more sends pass.
	q := p
	q.Conns, q.Burst, q.Rate = 1000, 10, 10
	r := NewRelay(q, simStart, rand.New(rand.NewPCG(1, 1)))
	ok := 0
	for range 30 {
		if r.Attempt(simStart, false).kind == answerAccepted {
			ok++
		}
	}
	for range 30 {
		if r.Attempt(simStart.Add(time.Second), false).kind == answerAccepted {
			ok++
		}
	}
	if ok != 20 {
		t.Errorf("accepted %d in 1s at burst 10 + 10/s, want 20", ok)
	}
}

func TestRunDeterministic(t *testing.T) {
	p := DefaultParams()
	p.Jobs = 500
	for _, s := range []string{StratUniform, StratReference, StratAdaptive} {
		a, b := Run(p, s), Run(p, s)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: two runs with seed %d differ", s, p.Seed)
		}
		// Every job ends delivered or rejected, exactly once.
		if a.Delivered+a.Rejected != p.Jobs {
			t.Errorf("%s: delivered %d + rejected %d != %d jobs", s, a.Delivered, a.Rejected, p.Jobs)
		}
	}
}

func TestRunCapacityBound(t *testing.T) {
	// No run can beat the relay: makespan >= (jobs-burst)/rate, and the
	// mean latency is at least MeanBound, in both scenarios.
	p := DefaultParams()
	p.Jobs = 2000
	for _, q := range []Params{p, PostfixParams(p)} {
		for _, s := range []string{StratUniform, StratReference, StratAdaptive} {
			r := Run(q, s)
			if min := time.Duration(float64(q.Jobs-q.Burst) / q.Capacity() * float64(time.Second)); q.Rate > 0 && r.Makespan < min*9/10 {
				t.Errorf("%s: makespan %v below the relay's bound %v", s, r.Makespan, min)
			}
			if r.Mean() < q.MeanBound() {
				t.Errorf("%s (rate %v): mean %v below the bound %v", s, q.Rate, r.Mean(), q.MeanBound())
			}
		}
	}
}

func TestBaselinesIgnoreAdaptiveControls(t *testing.T) {
	// Fairness: budgets, pacing and AIMD belong to the adaptive strategy
	// only; switching them must not change a baseline's run at all.
	p := DefaultParams()
	p.Jobs = 1000
	off := p
	off.Budgets, off.Control = false, false
	for _, s := range []string{StratUniform, StratReference} {
		if a, b := Run(p, s), Run(off, s); !reflect.DeepEqual(a, b) {
			t.Errorf("%s: a run with the adaptive controls on differs from one with them off", s)
		}
	}
	if a, b := Run(p, StratAdaptive), Run(off, StratAdaptive); reflect.DeepEqual(a, b) {
		t.Error("adaptive: the controls changed nothing")
	}
}

func TestMeanBound(t *testing.T) {
	tests := []struct {
		name string
		p    Params
		want time.Duration
	}{
		// (1000-10)^2 / (2*10*1000) = 49.005 s, + 100ms
		{"rate binds", Params{Jobs: 1000, Rate: 10, Burst: 10, Conns: 100, SendTime: 100 * time.Millisecond}, 49105 * time.Millisecond},
		// capacity 5/0.1s = 50/s: 1000^2/(2*50*1000) = 10 s, + 100ms
		{"connections bind, no burst credit", Params{Jobs: 1000, Rate: 0, Burst: 10, Conns: 5, SendTime: 100 * time.Millisecond}, 10100 * time.Millisecond},
		// 500 deliverable: 500/(2*50) = 5 s
		{"permanent rejections are not counted", Params{Jobs: 1000, Conns: 5, SendTime: 100 * time.Millisecond, Permanent: 0.5}, 5100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.MeanBound(); (got - tt.want).Abs() > time.Millisecond {
				t.Errorf("MeanBound = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRefillHint(t *testing.T) {
	tests := []struct {
		rate  float64
		burst int
		want  time.Duration
	}{{50, 50, time.Second}, {50, 100, 2 * time.Second}, {10, 25, 3 * time.Second}, {100, 10, time.Second}, {0, 10, time.Second}}
	for _, tt := range tests {
		if got := refillHint(Params{Rate: tt.rate, Burst: tt.burst}); got != tt.want {
			t.Errorf("refillHint(%v/s, burst %d) = %v, want %v", tt.rate, tt.burst, got, tt.want)
		}
	}
}

func TestRunOutput(t *testing.T) {
	var b strings.Builder
	// The main and Postfix scenarios always run; fivexx is one of the
	// harder ones, small enough to be quick.
	if err := run(context.Background(), []string{"-jobs", "300", "-png", "", "-scenario-png", "", "-scenarios", "fivexx", "-real=false"}, &b, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| relay rate R (token bucket) | 50 mails/s, burst 50 |", "Lower bound on mean latency", "| uniform |", "| reference |", "| adaptive |",
		"mean latency >= 70 % below uniform", "### Scenario main:", "### Scenario postfix:", "### Scenario fivexx:", "### Summary", "| fivexx | 5000 |",
		"mean >= mean over i <= D of inf{t: C(t) >= i*", "`550 5.7.1 Message refused, try again in 1 seconds`"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(b.String(), "### Scenario drop:") {
		t.Error("report has the drop scenario, which -scenarios left out")
	}
	// The 6 targets of issue 4, then each scenario's.
	want := 6
	for _, sc := range []string{ScenarioMain, ScenarioPostfix, simFivexx} {
		i := strings.Index(b.String(), "### Scenario "+sc+":")
		section := b.String()[i:]
		section = section[:strings.Index(section[1:], "###")+1]
		n := strings.Count(section, "| PASS |") + strings.Count(section, "| FAIL |") + strings.Count(section, "| UNREACHABLE |")
		if n < 5 {
			t.Errorf("scenario %s has %d target verdicts, want at least 5", sc, n)
		}
		want += n
	}
	// The summary's result column may say PASS too; count before it.
	body := b.String()[:strings.Index(b.String(), "### Summary")]
	if n := strings.Count(body, "| PASS |") + strings.Count(body, "| FAIL |") + strings.Count(body, "| UNREACHABLE |"); n != want {
		t.Errorf("report has %d target verdicts, want %d", n, want)
	}
	if err := run(context.Background(), []string{"-scenarios", "nosuch", "-real=false", "-png", ""}, io.Discard, io.Discard); err == nil {
		t.Error("an unknown scenario was accepted")
	}
}

func TestPermanentNeverRetried(t *testing.T) {
	// The worker fails a permanent rejection before any delay policy is
	// consulted: no strategy, class-blind or not, sends such a job twice.
	p := DefaultParams()
	p.Jobs, p.Transient, p.Permanent = 300, 0, 1
	for _, s := range []string{StratUniform, StratReference, StratAdaptive} {
		t.Run(s, func(t *testing.T) {
			r := Run(p, s)
			if r.Rejected != p.Jobs || r.Delivered != 0 {
				t.Errorf("rejected %d, delivered %d; want %d rejected", r.Rejected, r.Delivered, p.Jobs)
			}
			if r.Attempts-r.Wasted != p.Jobs {
				t.Errorf("%d attempts of which %d throttled: %d reached the rejection, want %d (one per job)",
					r.Attempts, r.Wasted, r.Attempts-r.Wasted, p.Jobs)
			}
		})
	}
}
