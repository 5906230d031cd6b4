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

// Params are the simulation's parameters: the relay model, the transport
// shared by all strategies (senders, delay tiers) and the knobs of the
// adaptive strategy (budgets, pacing, AIMD). They are printed with every
// report.
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
	Senders     int           // worker send slots, the same for every strategy
	Tiers       retry.Tiers   // delay tiers; nil = no rounding (and no scheduler jitter)
	Seed        uint64

	// The adaptive strategy only; uniform and reference never use them.
	Budgets bool                 // retry budgets (normal priority, 30 + 1/s)
	Control bool                 // the worker's send control (adaptive.SendControl: AIMD and a learned rate)
	Pacer   adaptive.PacerConfig // the pacer's settings (zero = the worker's defaults)
}

// Capacity is the most mails/s the relay can accept: its rate, or its
// connections over the session time when that is lower (or the rate is
// unlimited).
func (p Params) Capacity() float64 {
	c := float64(p.Conns) / p.SendTime.Seconds()
	if p.Rate > 0 {
		c = math.Min(c, p.Rate)
	}
	return c
}

// MeanBound is a lower bound on the mean delivery latency of any strategy:
// with D = Jobs*(1-Permanent) deliverable jobs all offered at t=0, the i-th
// acceptance cannot come before (i-Burst)/Capacity, and each takes
// SendTime, so mean >= (D-Burst)^2/(2*Capacity*D) + SendTime, about
// N/(2R) + SendTime.
func (p Params) MeanBound() time.Duration {
	d := float64(p.Jobs) * (1 - p.Permanent)
	b := 0.0
	if p.Rate > 0 {
		b = float64(p.Burst)
	}
	ex := math.Max(d-b, 0)
	s := ex * ex / (2 * p.Capacity() * d)
	return time.Duration(s*float64(time.Second)) + p.SendTime
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
	Refused   int // of Wasted: 421 at the greeting (connections)
	Slowed    int // of Wasted: 450 at MAIL (rate)
	Latencies []time.Duration
	PeakDepth int
	Timeline  []time.Duration // accept times, ascending

	// Adaptive only: the pacer's rate and the AIMD limit at the end, and
	// how often the pacer cut its rate.
	FinalRate     float64
	RateDecreases int
	FinalLimit    int
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
	greeting   bool          // refused at the greeting (421: too many connections)
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
		return outcome{class: failure.Throttled, retryAfter: r.p.Hint, hold: r.p.ConnectTime, greeting: true}
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
	sent time.Time // when the attempt started (evDone)
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

// control is the adaptive strategy's retry budgets and send control (the
// worker's own adaptive.SendControl), each optional. Uniform and reference
// run with neither.
type control struct {
	budgets *adaptive.Budgets
	send    *adaptive.SendControl
}

// Run simulates one strategy. All three share the transport: the FIFO
// mail.jobs, p.Senders send slots, and retries routed as the worker routes
// them (the delay rounded up to a tier, re-injected by the scheduler with
// its jitter of at most min(1s, tier/10) at the tail of mail.jobs).
// Uniform and reference are the bare policies; adaptive adds the controls
// p enables.
func Run(p Params, strategy string) Result {
	now := simStart
	rnd := rand.New(rand.NewPCG(p.Seed, 1))  // relay
	prnd := rand.New(rand.NewPCG(p.Seed, 2)) // policy jitter
	srnd := rand.New(rand.NewPCG(p.Seed, 3)) // scheduler jitter
	relay := NewRelay(p, now, rnd)
	var pol adaptive.Policy
	var ctl control
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
		if p.Budgets {
			ctl.budgets, _ = adaptive.NewBudgets(nil, now)
		}
		if p.Control {
			// As the worker configures it (delivery.New): AIMD capped at
			// the send slots.
			ctl.send, err = adaptive.NewSendControl(adaptive.SendControlConfig{
				AIMD:  adaptive.AIMDConfig{Max: p.Senders, Initial: min(adaptive.DefaultAIMDInitial, p.Senders)},
				Pacer: p.Pacer,
			}, nil, now)
			if err != nil {
				panic(err)
			}
		}
	}
	window, _ := adaptive.NewWindow(adaptive.WindowConfig{})

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
	var wakeAt time.Time // a pending wake-up for the pacer, if after now

	dispatch := func() {
		for head < len(queue) && inflight < p.Senders {
			if ctl.send != nil {
				ok, at := ctl.send.Admit(now, inflight)
				if !ok {
					if at.IsZero() {
						return // the concurrency limit: a completion dispatches again
					}
					if !wakeAt.After(now) || at.Before(wakeAt) {
						wakeAt = at
						push(event{at: at, kind: evWake})
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
			push(event{at: now.Add(out.hold), kind: evDone, job: j, out: out, sent: now})
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
				if ctl.send != nil {
					ctl.send.Done(now, e.sent, true, "")
				}
			case failure.Permanent:
				// The worker routes a permanent failure to failed before
				// any delay policy is consulted, so no strategy retries
				// one, class-blind or not.
				res.Rejected++
				if ctl.send != nil {
					ctl.send.Done(now, e.sent, false, "")
				}
			default:
				res.Wasted++
				if e.out.class == failure.Throttled {
					j.throttles++
					if e.out.greeting {
						res.Refused++
					} else {
						res.Slowed++
					}
				}
				if ctl.send != nil {
					// The worker's verdict: 421 at the greeting names the
					// connection limit, 450 4.7.1 at MAIL the rate.
					limit := failure.Limit("")
					switch {
					case e.out.greeting:
						limit = failure.LimitConnections
					case e.out.class == failure.Throttled:
						limit = failure.LimitRate
					}
					ctl.send.Done(now, e.sent, false, limit)
				}
				sr, _ := window.Rate(now, provider)
				d := pol.Decide(adaptive.Inputs{
					Class: e.out.class, Attempt: j.attempt, Throttles: j.throttles,
					RetryAfter: e.out.retryAfter, Lag: int64(len(queue) - head),
					SuccessRate: sr, Now: now,
				})
				if !d.Retry {
					res.Rejected++ // given up on: not delivered
					break
				}
				delay := d.Delay
				if ctl.budgets != nil {
					if ok, until := ctl.budgets.Take(now, job.PriorityNormal); !ok {
						delay = max(delay, until.Sub(now))
					}
				}
				if p.Tiers != nil {
					tier := p.Tiers.Pick(delay)
					delay = tier + schedulerJitter(tier, srnd)
				}
				j.attempt++
				depth++
				res.PeakDepth = max(res.PeakDepth, depth)
				push(event{at: now.Add(delay), kind: evDue, job: j})
			}
		}
		dispatch()
	}
	res.Makespan = now.Sub(simStart)
	if ctl.send != nil {
		res.FinalRate, res.RateDecreases = ctl.send.Rate(), ctl.send.Decreases(adaptive.ControllerRate)
		res.FinalLimit = ctl.send.Limit()
	}
	return res
}

// schedulerJitter is retry.Scheduler's spread of a tier's re-injections:
// uniform in [0, min(1s, tier/10)).
func schedulerJitter(tier time.Duration, r *rand.Rand) time.Duration {
	n := min(retry.DefaultMaxJitter, tier/10)
	if n <= 0 {
		return 0
	}
	return time.Duration(r.Int64N(int64(n)))
}
