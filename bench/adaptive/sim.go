package main

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"golang.org/x/time/rate"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/delivery"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/job"
)

// Params are the simulation's parameters: the relay model of the main and
// Postfix scenarios, the transport shared by all strategies (senders, delay
// tiers) and the knobs of the adaptive strategy (budgets, pacing, AIMD).
// They are printed with every report. The harder scenarios (Scenario) take
// the transport and the adaptive knobs from here and bring their own relays.
type Params struct {
	Jobs        int           // burst of jobs published at t=0
	Rate        float64       // relay capacity, mails/s (token bucket); 0 = unlimited
	Burst       int           // relay bucket size
	Conns       int           // relay concurrent connections; above: 421
	Hint        time.Duration // retry hint in the relay's 421/450 replies; 0 = the bucket's refill time at the refusal
	SendTime    time.Duration // an accepted (or permanently rejected) session
	RejectTime  time.Duration // a session refused at MAIL/RCPT for rate (holds a connection)
	ConnectTime time.Duration // a connection refused at the greeting (holds none)
	Transient   float64       // share of sessions dropped transiently
	Permanent   float64       // share of recipients rejected permanently (drawn once per job)
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

// MeanBound is a lower bound on the mean delivery latency of any strategy
// for one relay of constant capacity: with D = Jobs*(1-Permanent)
// deliverable jobs all offered at t=0, the i-th acceptance cannot come
// before (i-Burst)/Capacity, and each takes SendTime, so mean >=
// (D-Burst)^2/(2*Capacity*D) + SendTime, about N/(2R) + SendTime. It
// leaves out the transient drops; Bounds (scenario.go) is the general
// form, which counts them.
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
	Strategy    string
	Makespan    time.Duration
	Delivered   int
	Rejected    int // permanent, or given up on
	Lost        int // of Rejected: deliverable jobs (a good recipient) that were not delivered
	Attempts    int
	Wasted      int // answered throttled or transient, by the relay's reply (not by its classification)
	Refused     int // of Wasted: 421 at the greeting (connections)
	Slowed      int // of Wasted: refused for rate (450 4.7.1, or the 5xx of a relay that refuses so)
	Drops       int // of Wasted: transient drops the relay injected
	Latencies   []time.Duration
	PeakDepth   int
	Held        int             // short throttles waited out in the worker, not through a delay tier
	FastRetries int             // fast retries of relay blips, in the sender
	Timeline    []time.Duration // accept times, ascending
	// Sessions are the start times of the sessions that took one of the
	// relays' rate tokens (accepted, rejected recipients and drops), in
	// order; ThrottledAt the times of the throttled answers.
	Sessions    []time.Duration
	ThrottledAt []time.Duration
	PerRelay    []int // delivered per relay, in the scenario's order

	// Adaptive only: the pacer's rate and the AIMD limit at the end (the
	// first worker's first relay), and how often the pacer cut its rate
	// (every worker and relay).
	FinalRate     float64
	RateDecreases int
	FinalLimit    int
	// Seeded says a joining worker's control was seeded with the fleet's
	// learned rate.
	Seeded bool
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

// ----- the relay model -----

// RatePhase changes a relay's rate from At (since the burst) on.
type RatePhase struct {
	At   time.Duration
	Rate float64
}

// RelaySpec is one modelled relay: a token bucket, a connection cap, random
// transient drops, and the replies it gives.
type RelaySpec struct {
	Name   string
	Rate   float64 // mails/s at t=0; 0 = unlimited
	Burst  int
	Conns  int
	Phases []RatePhase // later rates, in time order
	// Hint is the retry hint of its refusals; 0 = the bucket's refill
	// time at the refusal (at least 1s).
	Hint time.Duration
	// Refuse5xx makes an over-rate send a "throttle dressed as
	// permanent": 550 5.7.1 Message refused, try again in N seconds.
	Refuse5xx bool
	Transient float64 // share of sessions dropped transiently
	// Drop is the reply of a transient drop; zero = 421 4.4.2.
	Drop Reply
}

// rateAt is the relay's rate at d since the burst (0 = unlimited).
func (s RelaySpec) rateAt(d time.Duration) float64 {
	r := s.Rate
	for _, ph := range s.Phases {
		if ph.At <= d {
			r = ph.Rate
		}
	}
	return r
}

// Reply is an SMTP reply.
type Reply struct {
	Code     int
	Enhanced string
	Text     string
}

func (r Reply) String() string { return fmt.Sprintf("%d %s %s", r.Code, r.Enhanced, r.Text) }

// The relay's replies.
var (
	replyDrop         = Reply{421, "4.4.2", "Connection dropped, closing transmission channel"}
	replyBadRecipient = Reply{550, "5.1.1", "Mailbox unavailable: no such user"}
	replyTempFailure  = Reply{451, "4.3.0", "Temporary server error"}
)

func tooManyConnections(n int) Reply {
	return Reply{421, "4.7.0", fmt.Sprintf("Too many connections, try again in %d seconds", n)}
}

func rateExceeded(n int) Reply {
	return Reply{450, "4.7.1", fmt.Sprintf("rate limit exceeded, try again in %d seconds", n)}
}

func refused5xx(n int) Reply {
	return Reply{550, "5.7.1", fmt.Sprintf("Message refused, try again in %d seconds", n)}
}

// answerKind is what the relay did with a session, whatever its reply says.
type answerKind int

const (
	answerAccepted     answerKind = iota
	answerBusy                    // refused at the greeting: too many connections
	answerRate                    // refused for the rate
	answerDrop                    // dropped transiently
	answerBadRecipient            // the recipient does not exist
)

// answer is the relay's answer to one session.
type answer struct {
	kind  answerKind
	reply Reply         // zero when accepted
	hold  time.Duration // how long the sender is busy
	conn  bool          // the session held a connection
}

// Relay is one modelled relay at run time.
type Relay struct {
	spec   RelaySpec
	p      Params // session times
	start  time.Time
	phase  int // phases applied
	bucket *rate.Limiter
	active int
	rnd    *rand.Rand
}

// NewRelay returns the relay of the main scenario (p's rate, burst,
// connections, hint and drops) at start.
func NewRelay(p Params, start time.Time, rnd *rand.Rand) *Relay {
	return newRelay(p.relay(), p, start, rnd)
}

func newRelay(s RelaySpec, p Params, start time.Time, rnd *rand.Rand) *Relay {
	lim := rate.Inf
	if s.Rate > 0 {
		lim = rate.Limit(s.Rate)
	}
	b := rate.NewLimiter(lim, max(s.Burst, 1))
	b.SetBurstAt(start, max(s.Burst, 1))
	return &Relay{spec: s, p: p, start: start, bucket: b, rnd: rnd}
}

// advance applies the rate phases that began by now, each at its own time,
// so the bucket fills at the old rate up to the change.
func (r *Relay) advance(now time.Time) {
	for r.phase < len(r.spec.Phases) {
		ph := r.spec.Phases[r.phase]
		at := r.start.Add(ph.At)
		if at.After(now) {
			return
		}
		lim := rate.Inf
		if ph.Rate > 0 {
			lim = rate.Limit(ph.Rate)
		}
		r.bucket.SetLimitAt(at, lim)
		r.phase++
	}
}

// hint is the retry hint of a refusal at now, in whole seconds.
func (r *Relay) hint(now time.Time) int {
	if r.spec.Hint > 0 {
		return max(1, int(math.Ceil(r.spec.Hint.Seconds())))
	}
	lim := float64(r.bucket.Limit())
	if math.IsInf(lim, 1) || lim <= 0 {
		return 1
	}
	missing := float64(r.bucket.Burst()) - r.bucket.TokensAt(now)
	return max(1, int(math.Ceil(missing/lim)))
}

// Attempt starts one session at now for a recipient that exists or not.
// The caller calls Release when a session that held a connection ends.
func (r *Relay) Attempt(now time.Time, badRecipient bool) answer {
	r.advance(now)
	if r.active >= r.spec.Conns {
		return answer{kind: answerBusy, reply: tooManyConnections(r.hint(now)), hold: r.p.ConnectTime}
	}
	r.active++
	if !r.bucket.AllowN(now, 1) {
		reply := rateExceeded(r.hint(now))
		if r.spec.Refuse5xx {
			reply = refused5xx(r.hint(now))
		}
		return answer{kind: answerRate, reply: reply, hold: r.p.RejectTime, conn: true}
	}
	if r.rnd.Float64() < r.spec.Transient {
		drop := r.spec.Drop
		if drop.Code == 0 {
			drop = replyDrop
		}
		return answer{kind: answerDrop, reply: drop, hold: r.p.SendTime / 2, conn: true}
	}
	if badRecipient {
		return answer{kind: answerBadRecipient, reply: replyBadRecipient, hold: r.p.SendTime, conn: true}
	}
	return answer{kind: answerAccepted, hold: r.p.SendTime, conn: true}
}

// Release ends a session that held a connection.
func (r *Relay) Release() { r.active-- }

// classify is the worker's verdict on an answer: failure.ClassifyReply on
// the relay's reply, as the worker classifies every SMTP reply.
func classify(a answer) failure.Verdict {
	if a.kind == answerAccepted {
		return failure.Verdict{}
	}
	return failure.ClassifyReply(a.reply.Code, a.reply.Enhanced, a.reply.Text)
}

// ----- the simulation -----

type simJob struct {
	id        int
	attempt   int
	throttles int
	holds     int // short throttles waited out in the worker in a row
	// fast retries of this attempt, and when the attempt began (zero until
	// a sender takes the job)
	fast      int
	fastStart time.Time
}

type event struct {
	at     time.Time
	seq    int
	kind   int // evDone, evDue, evWake, evJoin, evHeld, evFast
	job    simJob
	worker int
	relay  int
	ans    answer
	sent   time.Time // when the attempt started (evDone)
}

const (
	evDone = iota
	evDue
	evWake
	evJoin
	evHeld
	evFast
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

// pool is one worker's view of one relay, as delivery's relayPool: its
// sessions in flight, its send control (adaptive only) and the cool-down
// the relay last asked for.
type pool struct {
	name     string
	size     int // sessions: one per sender, as a provider without MaxConns
	inFlight int
	control  *adaptive.SendControl // nil: no send control
	cooldown time.Time
}

// headroom is how many more sends the pool would take now.
func (pl *pool) headroom() int {
	l := pl.size
	if pl.control != nil {
		l = min(l, pl.control.Limit())
	}
	return l - pl.inFlight
}

// worker is one worker of the consumer group: its senders, its pools (one
// per relay of the group), its policy, retry budgets and success window.
type worker struct {
	active  bool
	busy    int // senders with a send in flight
	pools   []*pool
	policy  adaptive.Policy
	budgets *adaptive.Budgets // nil: none
	window  *adaptive.Window
	wakeAt  time.Time // a pending wake-up for the send controls, if after now
	held    []simJob  // jobs back from a short throttle, sent before new ones
	// waiting are jobs whose sender, after a fast retry's wait, waits for
	// a relay to admit the send; they hold their senders (busy).
	waiting []simJob
	frnd    *rand.Rand // fast-retry jitter
}

func newWorker(sc Scenario, strategy string, id int, now time.Time) *worker {
	p := sc.Params
	prnd := rand.New(rand.NewPCG(p.Seed, 2+10*uint64(id))) // policy jitter; worker 0 keeps stream 2
	w := &worker{frnd: rand.New(rand.NewPCG(p.Seed, 5+10*uint64(id)))}
	w.window, _ = adaptive.NewWindow(adaptive.WindowConfig{})
	adaptiveOn := strategy != StratUniform && strategy != StratReference
	switch strategy {
	case StratUniform:
		w.policy = &adaptive.Uniform{Float64Func: prnd.Float64}
	case StratReference:
		w.policy = &adaptive.Reference{Float64Func: prnd.Float64}
	default:
		a, err := adaptive.NewAdaptive(adaptive.AdaptiveConfig{Float64Func: prnd.Float64})
		if err != nil {
			panic(err)
		}
		w.policy = a
		if p.Budgets {
			w.budgets, _ = adaptive.NewBudgets(nil, now)
		}
	}
	for _, r := range sc.Relays {
		pl := &pool{name: r.Name, size: p.Senders}
		if adaptiveOn && p.Control {
			// As the worker configures it (delivery.New): AIMD capped at
			// the pool, one session per sender.
			c, err := adaptive.NewSendControl(adaptive.SendControlConfig{
				AIMD:  adaptive.AIMDConfig{Max: pl.size, Initial: min(adaptive.DefaultAIMDInitial, pl.size)},
				Pacer: p.Pacer,
			}, nil, now)
			if err != nil {
				panic(err)
			}
			pl.control = c
		}
		w.pools = append(w.pools, pl)
	}
	return w
}

// pick is the worker's choice of relay in the group for a send at now:
// the pools in order of headroom (ties in the group's order), the first
// whose sessions and send control admit the send. When none does, retryAt
// is the earliest time a control named, zero when only completions can
// free a send.
func (w *worker) pick(now time.Time) (relay int, retryAt time.Time) {
	order := make([]int, len(w.pools))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return w.pools[b].headroom() - w.pools[a].headroom() })
	for _, i := range order {
		pl := w.pools[i]
		if pl.inFlight >= pl.size {
			continue
		}
		if pl.control == nil {
			return i, time.Time{}
		}
		ok, at := pl.control.Admit(now, pl.inFlight)
		if ok {
			return i, time.Time{}
		}
		if !at.IsZero() && (retryAt.IsZero() || at.Before(retryAt)) {
			retryAt = at
		}
	}
	return -1, retryAt
}

// Run simulates one strategy on the main scenario's relay (p's relay
// fields) with one worker.
func Run(p Params, strategy string) Result {
	return RunScenario(p.asScenario(ScenarioMain), strategy)
}

// RunScenario simulates one strategy on sc. Every strategy shares the
// transport: the FIFO mail.jobs consumed by the group's workers, each with
// p.Senders send slots, and retries routed as the worker routes them (the
// delay rounded up to a tier, re-injected by the scheduler with its jitter
// of at most min(1s, tier/10) at the tail of mail.jobs; a relay throttle
// shorter than the first tier waits in the worker instead, at most three in
// a row, as delivery does; a relay's blip gets up to three fast retries
// in its sender first). Uniform and reference are the bare policies;
// adaptive adds the controls p enables.
// A worker sends to the relay of the group whose control admits the send,
// preferring the most headroom. There is no circuit breaker.
func RunScenario(sc Scenario, strategy string) Result {
	s := newSimulation(sc, strategy)
	s.dispatch()
	for s.evs.Len() > 0 {
		e := heap.Pop(&s.evs).(event)
		s.now = e.at
		s.handle(e)
		s.dispatch()
	}
	return s.result()
}

// simulation is the state of one RunScenario: the clock, the relays, the
// group's workers, mail.jobs and the pending events.
type simulation struct {
	p       Params
	now     time.Time
	srnd    *rand.Rand // scheduler jitter
	bad     []bool
	relays  []*Relay
	workers []*worker
	res     Result
	queue   []simJob // mail.jobs, FIFO, shared by the group
	head    int
	evs     events
	seq     int
	depth   int // retry copies waiting in the delay tiers
	rr      int // the worker dispatch tries first
}

func newSimulation(sc Scenario, strategy string) *simulation {
	p := sc.Params
	s := &simulation{p: p, now: simStart, srnd: rand.New(rand.NewPCG(p.Seed, 3)), bad: sc.badRecipients()}
	s.relays = make([]*Relay, len(sc.Relays))
	for i, rs := range sc.Relays {
		s.relays[i] = newRelay(rs, p, s.now, rand.New(rand.NewPCG(p.Seed, 1+100*uint64(i)))) // relay 0 keeps stream 1
	}
	s.workers = make([]*worker, sc.workers())
	for i := range s.workers {
		s.workers[i] = newWorker(sc, strategy, i, s.now)
		s.workers[i].active = i < max(sc.Workers, 1)
	}
	if sc.Workers > 1 {
		// The worker tells its controls the group's size before each send.
		for _, w := range s.workers[:sc.Workers] {
			for _, pl := range w.pools {
				if pl.control != nil {
					pl.control.SetMembers(s.now, sc.Workers)
				}
			}
		}
	}
	s.res = Result{Strategy: strategy, PerRelay: make([]int, len(s.relays))}
	s.queue = make([]simJob, 0, p.Jobs)
	for i := range p.Jobs {
		s.queue = append(s.queue, simJob{id: i, attempt: 1})
	}
	for i, at := range sc.JoinAt {
		s.push(event{at: s.now.Add(at), kind: evJoin, worker: max(sc.Workers, 1) + i})
	}
	return s
}

func (s *simulation) push(e event) { s.seq++; e.seq = s.seq; heap.Push(&s.evs, e) }

// trySend starts one send on worker wi, or reports false.
func (s *simulation) trySend(wi int) bool {
	w := s.workers[wi]
	retrying := len(w.waiting) > 0 // a sender already holds the job
	if !w.active || (!retrying && (w.busy >= s.p.Senders || (len(w.held) == 0 && s.head >= len(s.queue)))) {
		return false
	}
	ri, at := w.pick(s.now)
	if ri < 0 {
		if !at.IsZero() && (!w.wakeAt.After(s.now) || at.Before(w.wakeAt)) {
			w.wakeAt = at
			s.push(event{at: at, kind: evWake})
		}
		return false
	}
	j := s.nextJob(w, retrying)
	if !retrying {
		w.busy++
		j.fast, j.fastStart = 0, s.now
	}
	if j.attempt == 1 && !retrying && w.budgets != nil {
		w.budgets.Earn(job.PriorityNormal) // a first attempt earns a share of a retry
	}
	a := s.relays[ri].Attempt(s.now, s.bad[j.id])
	s.res.Attempts++
	if a.kind != answerBusy && a.kind != answerRate {
		s.res.Sessions = append(s.res.Sessions, s.now.Sub(simStart))
	}
	w.pools[ri].inFlight++
	s.push(event{at: s.now.Add(a.hold), kind: evDone, job: j, worker: wi, relay: ri, ans: a, sent: s.now})
	return true
}

// nextJob takes the job w sends next: the one its sender holds for a fast
// retry, a throttled job it held, or the head of mail.jobs.
func (s *simulation) nextJob(w *worker, retrying bool) simJob {
	var j simJob
	switch {
	case retrying:
		j, w.waiting = w.waiting[0], w.waiting[1:]
	case len(w.held) > 0:
		j, w.held = w.held[0], w.held[1:]
	default:
		j = s.queue[s.head]
		s.head++
		if s.head > 4096 && s.head*2 > len(s.queue) {
			s.queue = append(s.queue[:0], s.queue[s.head:]...)
			s.head = 0
		}
	}
	return j
}

// dispatch starts sends, round robin over the workers, until none can.
func (s *simulation) dispatch() {
	for {
		sent := false
		for k := range s.workers {
			if wi := (s.rr + k) % len(s.workers); s.trySend(wi) {
				s.rr, sent = (wi+1)%len(s.workers), true
				break
			}
		}
		if !sent {
			return
		}
	}
}

// handle applies one event at s.now.
func (s *simulation) handle(e event) {
	switch e.kind {
	case evJoin:
		s.res.Seeded = join(s.workers, e.worker, s.now) || s.res.Seeded
	case evDue:
		s.depth--
		s.queue = append(s.queue, e.job)
	case evHeld:
		s.workers[e.worker].held = append(s.workers[e.worker].held, e.job)
	case evFast:
		s.workers[e.worker].waiting = append(s.workers[e.worker].waiting, e.job)
	case evDone:
		s.done(e)
	}
}

// done ends a send: the worker learns from the answer, then the job is
// delivered, retried fast, rejected or routed to a delay tier.
func (s *simulation) done(e event) {
	w, pl := s.workers[e.worker], s.workers[e.worker].pools[e.relay]
	w.busy--
	pl.inFlight--
	if e.ans.conn {
		s.relays[e.relay].Release()
	}
	countWaste(&s.res, e)
	v := classify(e.ans)
	ok := e.ans.kind == answerAccepted
	// learn, as the worker: the window, the cool-down, the control.
	w.window.Observe(s.now, pl.name, ok)
	if v.Class == failure.Throttled && v.RelayFault && v.RetryAfter > 0 {
		if until := s.now.Add(v.RetryAfter); until.After(pl.cooldown) {
			pl.cooldown = until
		}
	}
	if pl.control != nil {
		pl.control.Done(s.now, e.sent, ok, v.Limit)
	}
	j := e.job
	switch {
	case ok:
		s.res.Delivered++
		s.res.PerRelay[e.relay]++
		s.res.Latencies = append(s.res.Latencies, s.now.Sub(simStart))
		s.res.Timeline = append(s.res.Timeline, s.now.Sub(simStart))
	case v.Class == failure.Transient && v.RelayFault && j.fast < delivery.DefaultResends &&
		s.now.Sub(j.fastStart) < delivery.DefaultResendBudget:
		// As delivery's deliver: a blip of the relay gets a fast
		// retry after a full-jitter wait, in the same sender and
		// the same attempt.
		wait := time.Duration(w.frnd.Int64N(int64(delivery.DefaultResendBase<<j.fast) + 1))
		j.fast++
		w.busy++
		s.res.FastRetries++
		s.push(event{at: s.now.Add(wait), kind: evFast, job: j, worker: e.worker})
	case v.Class == failure.Permanent:
		// The worker routes a permanent failure to failed before
		// any delay policy is consulted, so no strategy retries
		// one, class-blind or not.
		s.res.Rejected++
		s.res.Lost += lost(s.bad[j.id])
	default:
		s.retry(e, w, pl, v, j)
	}
}

// retry asks w's policy about a failed job and, as the worker does, gives
// up on it, holds a short throttle in the worker, or routes it to a tier.
func (s *simulation) retry(e event, w *worker, pl *pool, v failure.Verdict, j simJob) {
	if v.Class == failure.Throttled {
		j.throttles++
	}
	sr, _ := w.window.Rate(s.now, pl.name)
	d := w.policy.Decide(adaptive.Inputs{
		Class: v.Class, Attempt: j.attempt, Throttles: j.throttles,
		RetryAfter: v.RetryAfter, Lag: int64(len(s.queue) - s.head),
		SuccessRate: sr, RelayCooldownUntil: pl.cooldown, Now: s.now,
	})
	if !d.Retry {
		s.res.Rejected++ // given up on: not delivered
		s.res.Lost += lost(s.bad[j.id])
		return
	}
	delay := d.Delay
	if s.p.Tiers != nil && v.Class == failure.Throttled && v.RelayFault && delay < s.p.Tiers[0] && j.holds < maxThrottleHolds {
		// As delivery's scheduleRetry: a relay throttle shorter
		// than the shortest tier is waited out in the worker,
		// in the job's place, without an attempt charged or a
		// retry token taken.
		j.holds++
		s.res.Held++
		s.push(event{at: s.now.Add(delay), kind: evHeld, job: j, worker: e.worker})
		return
	}
	j.holds = 0
	if w.budgets != nil {
		if ok, until := w.budgets.Take(s.now, job.PriorityNormal); !ok {
			delay = max(delay, until.Sub(s.now))
		}
	}
	if s.p.Tiers != nil {
		tier := s.p.Tiers.Pick(delay)
		delay = tier + schedulerJitter(tier, s.srnd)
	}
	j.attempt++
	s.depth++
	s.res.PeakDepth = max(s.res.PeakDepth, s.depth)
	s.push(event{at: s.now.Add(delay), kind: evDue, job: j})
}

// result completes the run's Result once no event is left.
func (s *simulation) result() Result {
	res := s.res
	res.Makespan = s.now.Sub(simStart)
	for _, w := range s.workers {
		for _, pl := range w.pools {
			if pl.control != nil {
				res.RateDecreases += pl.control.Decreases(adaptive.ControllerRate)
			}
		}
	}
	if c := s.workers[0].pools[0].control; c != nil {
		res.FinalRate, res.FinalLimit = c.Rate(), c.Limit()
	}
	return res
}

// maxThrottleHolds is delivery's limit of short throttles in a row a job
// waits out in the worker before it goes to a delay tier.
const maxThrottleHolds = 3

// lost counts a rejected job that was deliverable.
func lost(badRecipient bool) int {
	if badRecipient {
		return 0
	}
	return 1
}

// countWaste counts an answer's waste by what the relay did.
func countWaste(res *Result, e event) {
	switch e.ans.kind {
	case answerBusy:
		res.Wasted++
		res.Refused++
	case answerRate:
		res.Wasted++
		res.Slowed++
	case answerDrop:
		res.Wasted++
		res.Drops++
	}
	if e.ans.kind == answerBusy || e.ans.kind == answerRate {
		res.ThrottledAt = append(res.ThrottledAt, e.at.Sub(simStart))
	}
}

// join starts worker id at now: every member's controls learn the new
// group size (SetMembers, which rescales a learned rate), and the new
// worker's controls are seeded with the sum of the other workers' learned
// rates, relay by relay, while every one of them paces (Seed). It reports
// whether any control was seeded.
func join(workers []*worker, id int, now time.Time) bool {
	members := 1
	for i, w := range workers {
		if w.active && i != id {
			members++
		}
	}
	seeded := false
	for ri, pl := range workers[id].pools {
		// The fleet's rate is what the members learned before the join;
		// SetMembers then rescales each of them to its new share.
		var fleet adaptive.LearnedRates
		for i, w := range workers {
			if i != id && w.active && w.pools[ri].control != nil {
				fleet.Sum += w.pools[ri].control.Rate()
				fleet.Workers++
			}
		}
		for i, w := range workers {
			if i != id && w.active && w.pools[ri].control != nil {
				w.pools[ri].control.SetMembers(now, members)
			}
		}
		if pl.control == nil {
			continue
		}
		pl.control.SetMembers(now, members)
		if !math.IsInf(fleet.Sum, 1) && fleet.Sum > 0 {
			seeded = pl.control.Seed(now, fleet) || seeded
		}
	}
	workers[id].active = true
	return seeded
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
