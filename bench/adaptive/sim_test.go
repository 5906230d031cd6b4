package main

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/postline/postline/internal/failure"
)

func TestRelayModel(t *testing.T) {
	p := DefaultParams()
	p.Transient, p.Permanent = 0, 0
	tests := []struct {
		name     string
		p        func(Params) Params
		attempts int
		want     failure.Class
		hint     time.Duration
	}{
		{"within capacity accepts", func(p Params) Params { return p }, 1, "", 0},
		{"connection limit: 421 with hint", func(p Params) Params { p.Conns, p.Rate = 3, 0; return p }, 4, failure.Throttled, p.Hint},
		{"rate limit: 450 with hint", func(p Params) Params { p.Conns, p.Burst = 100, 5; return p }, 6, failure.Throttled, p.Hint},
		{"all transient", func(p Params) Params { p.Transient = 1; return p }, 1, failure.Transient, 0},
		{"all permanent", func(p Params) Params { p.Permanent = 1; return p }, 1, failure.Permanent, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRelay(tt.p(p), simStart, rand.New(rand.NewPCG(1, 1)))
			var o outcome
			for range tt.attempts {
				o = r.Attempt(simStart)
			}
			if o.class != tt.want || o.retryAfter != tt.hint {
				t.Errorf("last outcome %+v, want class %q hint %v", o, tt.want, tt.hint)
			}
		})
	}
	// The bucket refills at Rate: after a second, Rate more sends pass.
	q := p
	q.Conns, q.Burst, q.Rate = 1000, 10, 10
	r := NewRelay(q, simStart, rand.New(rand.NewPCG(1, 1)))
	ok := 0
	for range 30 {
		if r.Attempt(simStart).class == "" {
			ok++
		}
	}
	for range 30 {
		if r.Attempt(simStart.Add(time.Second)).class == "" {
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
		// Permanent rejections are drawn per session, so the class-blind
		// uniform policy can retry one into an acceptance: at least every
		// job ends delivered or rejected.
		if a.Delivered+a.Rejected < p.Jobs || a.Delivered > p.Jobs {
			t.Errorf("%s: delivered %d + rejected %d do not cover %d jobs", s, a.Delivered, a.Rejected, p.Jobs)
		}
	}
}

func TestRunCapacityBound(t *testing.T) {
	// No run can beat the relay: makespan >= (jobs-burst)/rate.
	p := DefaultParams()
	p.Jobs, p.Budgets = 2000, false
	for _, s := range []string{StratUniform, StratAdaptive} {
		r := Run(p, s)
		if min := time.Duration(float64(p.Jobs-p.Burst) / p.Rate * float64(time.Second)); r.Makespan < min*9/10 {
			t.Errorf("%s: makespan %v below the relay's bound %v", s, r.Makespan, min)
		}
	}
}
