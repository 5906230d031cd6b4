package main

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"golang.org/x/time/rate"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/job"
)

// Params are the simulation's parameters: the relay model and the worker
// model. They are printed with every report.
type Params struct {
	Jobs        int           // burst of jobs published at t=0
	Rate        float64       // relay capacity, mails/s (token bucket); 0 = unlimited
	Burst       int           // relay bucket size
	Conns       int           // relay concurrent connections; above: 421
	Hint        time.Duration // retry hint in the relay's 421/450 replies
	SendTime    time.Duration // an accepted (or permanently rejected) session
	RejectTime  time.Duration // a session refused at MAIL/RCPT for rate (holds a connection)
	ConnectTime time.Duration // a connection refused at the greeting (holds none)
	Transient   float64       // share of sessions dropped transiently
	Permanent   float64       // share of sessions rejected permanently
	Senders     int           // worker send slots
	Tiers       retry.Tiers   // delay tiers; nil = no rounding
	Budgets     bool          // retry budgets (normal priority, 30 + 1/s)
	Seed        uint64
	Gate        bool // adaptive pauses all sends to the provider until its hint has passed
}

// Strategy names.
const (
	StratUniform   = "uniform"
	StratReference = "reference"
	StratAdaptive  = "adaptive"
)

// Result is one strategy's run.
type Result struct {
	Strategy  string
	Makespan  time.Duration
	Delivered int
	Rejected  int // permanent
	Attempts  int
	Wasted    int // throttled or transient
	Latencies []time.Duration
	PeakDepth int
	Timeline  []time.Duration // accept times, ascending
}

// Mean is the mean delivery latency.
func (r Result) Mean() time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	var s time.Duration
	for _, l := range r.Latencies {
		s += l
	}
	return s / time.Duration(len(r.Latencies))
}

// P99 is the 99th percentile delivery latency.
func (r Result) P99() time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	l := slices.Clone(r.Latencies)
	slices.Sort(l)
	return l[min(len(l)-1, int(math.Ceil(0.99*float64(len(l))))-1)]
}

// Deferred is the share of attempts answered with a 4xx.
func (r Result) Deferred() float64 {
	if r.Attempts == 0 {
		return 0
	}
	return float64(r.Wasted) / float64(r.Attempts)
}

// outcome of one attempt at the relay.
type outcome struct {
	class      failure.Class // "" = accepted
	retryAfter time.Duration
	hold       time.Duration // how long the sender is busy
	conn       bool          // the session held a connection
}

// Relay is the modelled relay: a token bucket of Rate/s, Conns connections,
// random transient drops and permanent rejections.
type Relay struct {
	p      Params
	bucket *rate.Limiter
	active int
	rnd    *rand.Rand
}

// NewRelay returns a relay at start.
func NewRelay(p Params, start time.Time, rnd *rand.Rand) *Relay {
	lim := rate.Inf
	if p.Rate > 0 {
		lim = rate.Limit(p.Rate)
	}
	b := rate.NewLimiter(lim, max(p.Burst, 1))
	b.SetBurstAt(start, max(p.Burst, 1))
	return &Relay{p: p, bucket: b, rnd: rnd}
}

// Attempt starts one session at now. The caller calls Release when a
// session that held a connection ends.
func (r *Relay) Attempt(now time.Time) outcome {
	if r.active >= r.p.Conns {
		// 421 4.7.0 Too many connections, try again in N seconds
		return outcome{class: failure.Throttled, retryAfter: r.p.Hint, hold: r.p.ConnectTime}
	}
	r.active++
	if !r.bucket.AllowN(now, 1) {
		// 450 4.7.1 Rate limit exceeded, try again in N seconds
		return outcome{class: failure.Throttled, retryAfter: r.p.Hint, hold: r.p.RejectTime, conn: true}
	}
	switch x := r.rnd.Float64(); {
	case x < r.p.Transient:
		return outcome{class: failure.Transient, hold: r.p.SendTime / 2, conn: true}
	case x < r.p.Transient+r.p.Permanent:
		return outcome{class: failure.Permanent, hold: r.p.SendTime, conn: true}
	}
	return outcome{hold: r.p.SendTime, conn: true}
}

// Release ends a session that held a connection.
func (r *Relay) Release() { r.active-- }

type simJob struct {
	id        int
	attempt   int
	throttles int
}

type event struct {
	at   time.Time
	seq  int
	kind int // evDone, evDue, evWake
	job  simJob
	out  outcome
}

const (
	evDone = iota
	evDue
	evWake
)

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if !e[i].at.Equal(e[j].at) {
		return e[i].at.Before(e[j].at)
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

var simStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const provider = "relay"

// Run simulates one strategy. Uniform and Reference use all senders;
// Adaptive adds AIMD concurrency and honours the provider's cool-down
// before any send, as the worker will.
func Run(p Params, strategy string) Result {
	now := simStart
	rnd := rand.New(rand.NewPCG(p.Seed, 1))  // relay
	prnd := rand.New(rand.NewPCG(p.Seed, 2)) // policy jitter
	relay := NewRelay(p, now, rnd)
	var pol adaptive.Policy
	var aimd *adaptive.AIMD
	switch strategy {
	case StratUniform:
		pol = &adaptive.Uniform{Float64Func: prnd.Float64}
	case StratReference:
		pol = &adaptive.Reference{Float64Func: prnd.Float64}
	default:
		a, err := adaptive.NewAdaptive(adaptive.AdaptiveConfig{Float64Func: prnd.Float64})
		if err != nil {
			panic(err)
		}
		pol = a
		aimd, _ = adaptive.NewAIMD(adaptive.AIMDConfig{Max: p.Senders, Initial: min(adaptive.DefaultAIMDInitial, p.Senders)})
	}
	window, _ := adaptive.NewWindow(adaptive.WindowConfig{})
	budgets, _ := adaptive.NewBudgets(nil, now)

	res := Result{Strategy: strategy}
	queue := make([]simJob, 0, p.Jobs) // mail.jobs, FIFO
	for i := range p.Jobs {
		queue = append(queue, simJob{id: i, attempt: 1})
	}
	head := 0
	var evs events
	seq := 0
	push := func(e event) { seq++; e.seq = seq; heap.Push(&evs, e) }
	inflight, depth := 0, 0
	var cooldown time.Time
	wakeAt := time.Time{}

	dispatch := func() {
		for head < len(queue) && inflight < p.Senders {
			if aimd != nil {
				if inflight >= aimd.Limit() {
					return
				}
				if p.Gate && now.Before(cooldown) {
					if !wakeAt.Equal(cooldown) {
						wakeAt = cooldown
						push(event{at: cooldown, kind: evWake})
					}
					return
				}
			}
			j := queue[head]
			head++
			if head > 4096 && head*2 > len(queue) {
				queue = append(queue[:0], queue[head:]...)
				head = 0
			}
			out := relay.Attempt(now)
			res.Attempts++
			inflight++
			push(event{at: now.Add(out.hold), kind: evDone, job: j, out: out})
		}
	}

	dispatch()
	for evs.Len() > 0 {
		e := heap.Pop(&evs).(event)
		now = e.at
		switch e.kind {
		case evDue:
			depth--
			queue = append(queue, e.job)
		case evDone:
			inflight--
			if e.out.conn {
				relay.Release()
			}
			j := e.job
			window.Observe(now, provider, e.out.class == "")
			switch e.out.class {
			case "":
				res.Delivered++
				res.Latencies = append(res.Latencies, now.Sub(simStart))
				res.Timeline = append(res.Timeline, now.Sub(simStart))
				if aimd != nil {
					aimd.OnSuccess(now)
				}
			default:
				if e.out.class == failure.Permanent {
					res.Rejected++
				} else {
					res.Wasted++
				}
				if e.out.class == failure.Throttled {
					j.throttles++
					if aimd != nil {
						aimd.OnThrottle(now)
						if e.out.retryAfter > 0 {
							cooldown = maxTime(cooldown, now.Add(e.out.retryAfter))
						}
					}
				}
				sr, _ := window.Rate(now, provider)
				d := pol.Decide(adaptive.Inputs{
					Class: e.out.class, Attempt: j.attempt, Throttles: j.throttles,
					RetryAfter: e.out.retryAfter, Lag: int64(len(queue) - head),
					SuccessRate: sr, ProviderCooldownUntil: cooldownFor(aimd, cooldown), Now: now,
				})
				if !d.Retry {
					if e.out.class != failure.Permanent {
						res.Rejected++ // given up on (auth/failover): not delivered
					}
					break
				}
				due := now.Add(d.Delay)
				if p.Budgets {
					if ok, until := budgets.Take(now, job.PriorityNormal); !ok {
						due = maxTime(due, until)
					}
				}
				if p.Tiers != nil {
					due = now.Add(p.Tiers.Pick(due.Sub(now)))
				}
				j.attempt++
				depth++
				res.PeakDepth = max(res.PeakDepth, depth)
				push(event{at: due, kind: evDue, job: j})
			}
		}
		dispatch()
	}
	res.Makespan = now.Sub(simStart)
	return res
}

func cooldownFor(a *adaptive.AIMD, cooldown time.Time) time.Time {
	if a == nil {
		return time.Time{}
	}
	return cooldown
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
