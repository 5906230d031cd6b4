package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/postline/postline/bench/internal/benchstats"
)

// The simulator's harder scenarios, by the names the real runs use too.
const (
	simDrop         = "drop"
	simTwoRelays    = "two-relays"
	simThreeWorkers = "three-workers"
	simFivexx       = "fivexx"
	simFleet200     = "fleet200"
)

// Scenario is one setup the simulator runs: the jobs and transport
// (Params: jobs, session times, senders per worker, tiers, seed, the
// adaptive knobs, the share of bad recipients), the relays of one group of
// equal priority, and the workers of the consumer group.
type Scenario struct {
	Name       string
	What       string // what it models, for the report
	Params     Params // the relay fields are unused: Relays are the relays
	Relays     []RelaySpec
	Workers    int             // workers from t=0 (at least 1)
	JoinAt     []time.Duration // a worker joins at each
	Strategies []string
	// RateFrom, when set, adds the target of >= 90 % of the relays' rate
	// from then on.
	RateFrom time.Duration
	// MaxDeferred, when set, adds the target of at most that share of
	// attempts deferred (Postfix's scenario).
	MaxDeferred float64
}

// relay is the main scenario's relay.
func (p Params) relay() RelaySpec {
	return RelaySpec{Name: "relay", Rate: p.Rate, Burst: p.Burst, Conns: p.Conns, Hint: p.Hint, Transient: p.Transient}
}

// asScenario is p as a scenario: one relay, one worker.
func (p Params) asScenario(name string) Scenario {
	return Scenario{Name: name, Params: p, Relays: []RelaySpec{p.relay()}, Workers: 1,
		Strategies: []string{StratUniform, StratReference, StratAdaptive}}
}

func (sc Scenario) workers() int { return max(sc.Workers, 1) + len(sc.JoinAt) }

// badRecipients draws, once per job and the same for every strategy,
// whether its recipient does not exist (550 5.1.1).
func (sc Scenario) badRecipients() []bool {
	r := rand.New(rand.NewPCG(sc.Params.Seed, 4))
	bad := make([]bool, sc.Params.Jobs)
	for i := range bad {
		bad[i] = r.Float64() < sc.Params.Permanent
	}
	return bad
}

// Scenarios are every scenario, from p (the main scenario's parameters
// and the transport every scenario shares).
func Scenarios(p Params) []Scenario {
	three := []string{StratUniform, StratReference, StratAdaptive}
	derived := func(name, what string, jobs int, permanent float64, relays ...RelaySpec) Scenario {
		q := p
		q.Jobs, q.Permanent = jobs, permanent
		q.Rate, q.Burst, q.Conns, q.Hint, q.Transient = 0, 0, 0, 0, 0
		return Scenario{Name: name, What: what, Params: q, Relays: relays, Workers: 1, Strategies: three}
	}
	mainSc := p.asScenario(ScenarioMain)
	mainSc.What = "the parameters above: one relay, one worker"
	postfix := PostfixParams(p).asScenario(ScenarioPostfix)
	postfix.What = fmt.Sprintf("421 at the greeting above %d connections, no rate limit", PostfixParams(p).Conns)
	postfix.MaxDeferred = 0.05

	drop := derived(simDrop, "the relay's rate drops from 50/s to 10/s from t=20s to t=140s, then returns", 5000, p.Permanent,
		RelaySpec{Name: "relay", Rate: 50, Burst: 50, Conns: 5, Transient: p.Transient,
			Phases: []RatePhase{{At: 20 * time.Second, Rate: 10}, {At: 140 * time.Second, Rate: 50}}})
	two := derived(simTwoRelays, "two relays of equal priority, 40/s and 15/s, one group sharing the load", 5000, p.Permanent,
		RelaySpec{Name: "relay-a", Rate: 40, Burst: 40, Conns: 5, Transient: p.Transient},
		RelaySpec{Name: "relay-b", Rate: 15, Burst: 15, Conns: 5, Transient: p.Transient})
	three3 := derived(simThreeWorkers, "two workers share one 50/s relay (no fleet-wide rate set); a third joins at t=30s", 5000, p.Permanent,
		RelaySpec{Name: "relay", Rate: 50, Burst: 50, Conns: 20, Transient: p.Transient})
	three3.Workers, three3.JoinAt = 2, []time.Duration{30 * time.Second}
	fivexx := derived(simFivexx, "a 50/s relay that refuses over-rate sends with 550 5.7.1 \"Message refused, try again in N seconds\"", 5000, p.Permanent,
		RelaySpec{Name: "relay", Rate: 50, Burst: 50, Conns: 5, Transient: p.Transient, Refuse5xx: true})
	fleet := derived(simFleet200, "a 200/s relay (burst 40), 3 % 451 4.3.0, 1 % bad recipients, two workers", 20000, 0.01,
		RelaySpec{Name: "relay", Rate: 200, Burst: 40, Conns: 40, Transient: 0.03, Drop: replyTempFailure})
	fleet.Workers, fleet.RateFrom = 2, 10*time.Second
	return []Scenario{mainSc, postfix, drop, two, three3, fivexx, fleet}
}

func scenarioNames(scs []Scenario) []string {
	out := make([]string, len(scs))
	for i, sc := range scs {
		out[i] = sc.Name
	}
	return out
}

// pickScenarios keeps the main and Postfix scenarios, first, and those of
// scs named in the comma-separated list.
func pickScenarios(scs []Scenario, list string) ([]Scenario, error) {
	want := map[string]bool{ScenarioMain: true, ScenarioPostfix: true}
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !slices.Contains(scenarioNames(scs), n) {
			return nil, fmt.Errorf("unknown scenario %q (have %s)", n, strings.Join(scenarioNames(scs), ", "))
		}
		want[n] = true
	}
	var out []Scenario
	for _, sc := range scs {
		if want[sc.Name] {
			out = append(out, sc)
		}
	}
	return out, nil
}

// ----- lower bounds -----

// capacityCurve is the relays' cumulative capacity C(t): how many
// sessions they can have let start by t. Per relay it is the lesser of the
// token bucket, burst + the integral of its rate, and the connections,
// Conns*(floor(t/session)+1); C is the sum over the relays. Each is a
// limit no client can pass, so their minimum is too (an upper bound on what
// the relay can take, hence lower bounds on times).
type capacityCurve struct {
	relays  []RelaySpec
	session time.Duration
}

// bucket is the relay's token-bucket curve at t: +Inf when unlimited.
func bucket(s RelaySpec, t time.Duration) float64 {
	total := float64(s.Burst)
	from, r := time.Duration(0), s.Rate
	for _, ph := range s.Phases {
		if ph.At >= t {
			break
		}
		if r <= 0 {
			return math.Inf(1)
		}
		total += r * (ph.At - from).Seconds()
		from, r = ph.At, ph.Rate
	}
	if r <= 0 {
		return math.Inf(1)
	}
	return total + r*(t-from).Seconds()
}

// at is C(t).
func (c capacityCurve) at(t time.Duration) float64 {
	total := 0.0
	for _, s := range c.relays {
		conns := float64(s.Conns) * float64(t/c.session+1)
		total += math.Min(bucket(s, t), conns)
	}
	return total
}

// inverse is inf{t : C(t) >= n}, to the microsecond.
func (c capacityCurve) inverse(n float64) time.Duration {
	if c.at(0) >= n {
		return 0
	}
	hi := time.Second
	for c.at(hi) < n {
		hi *= 2
	}
	lo := time.Duration(0) // C(lo) < n <= C(hi)
	for hi-lo > time.Microsecond {
		mid := lo + (hi-lo)/2
		if c.at(mid) >= n {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// Bounds are a scenario's lower bounds, for any strategy.
type Bounds struct {
	Jobs, Deliverable int // deliverable: good recipients
	// DropShare is the relays' least drop share q, and DropSlots the
	// slots each expected drop takes: 1 when every relay is bound by its
	// rate (a drop takes a token), 1/2 otherwise (a drop holds a
	// connection for half a session).
	DropShare, DropSlots float64
	Mean, Makespan       time.Duration
}

// slotsPerJob is the expected slots one job takes until one session is
// not dropped: 1 + DropSlots*q/(1-q).
func (b Bounds) slotsPerJob() float64 {
	return 1 + b.DropSlots*b.DropShare/(1-b.DropShare)
}

// Bounds computes the scenario's lower bounds from the capacity curve:
// the i-th delivery needs i*(1 + w*q/(1-q)) slots (its own and the
// expected drops before it; the rejected recipients may all come last), so
// it cannot be accepted before inf{t: C(t) >= that}, and ends a session
// later. The mean bound is the mean of those over the deliverable jobs;
// the makespan bound is the time every job's slots fit, plus a session.
func (sc Scenario) Bounds() Bounds {
	b := Bounds{Jobs: sc.Params.Jobs, DropShare: 1, DropSlots: 1}
	for _, bad := range sc.badRecipients() {
		if !bad {
			b.Deliverable++
		}
	}
	for _, s := range sc.Relays {
		b.DropShare = math.Min(b.DropShare, s.Transient)
		for _, r := range append([]float64{s.Rate}, rates(s.Phases)...) {
			if r <= 0 || r > float64(s.Conns)/sc.Params.SendTime.Seconds() {
				b.DropSlots = 0.5
			}
		}
	}
	if len(sc.Relays) == 0 {
		b.DropShare = 0
	}
	c := capacityCurve{relays: sc.Relays, session: sc.Params.SendTime}
	f := b.slotsPerJob()
	var sum time.Duration
	for i := 1; i <= b.Deliverable; i++ {
		sum += c.inverse(float64(i) * f)
	}
	if b.Deliverable > 0 {
		b.Mean = sum/time.Duration(b.Deliverable) + sc.Params.SendTime
	}
	b.Makespan = c.inverse(float64(b.Jobs)*f) + sc.Params.SendTime
	return b
}

func rates(ph []RatePhase) []float64 {
	out := make([]float64, len(ph))
	for i, p := range ph {
		out[i] = p.Rate
	}
	return out
}

// rateIntegral is the sessions the relays' rates allow over [from, to)
// (their buckets' refill; unlimited relays count their connections).
func (sc Scenario) rateIntegral(from, to time.Duration) float64 {
	total := 0.0
	for _, s := range sc.Relays {
		total += bucket(s, to) - bucket(s, from)
	}
	return total
}

// ----- targets -----

// Target is one target's verdict.
type Target struct {
	Name, Value string
	Reachable   bool
	Why         string // the floor any strategy has, or why unreachable
	OK          bool
}

// Verdict is PASS, FAIL or UNREACHABLE.
func (t Target) Verdict() string {
	if !t.Reachable {
		return "UNREACHABLE"
	}
	return benchstats.Verdict(t.OK)
}

// Targets are the scenario's targets for one run (the adaptive strategy's).
func (sc Scenario) Targets(b Bounds, r Result) []Target {
	jobs := float64(sc.Params.Jobs)
	meanX := r.Mean().Seconds() / b.Mean.Seconds()
	spanX := r.Makespan.Seconds() / b.Makespan.Seconds()
	beyond := float64(r.Wasted-r.Drops) / jobs
	apj := float64(r.Attempts) / jobs
	floor := 1 / (1 - b.DropShare)
	ts := []Target{
		{"every deliverable job delivered", fmt.Sprintf("%d of %d (%d lost)", r.Delivered, b.Deliverable, r.Lost), true, "all of them", r.Lost == 0},
		{"mean latency <= 1.10x its lower bound", fmt.Sprintf("%s = %.2fx %s", secs(r.Mean()), meanX, secs(b.Mean)), true, "bound " + secs(b.Mean), meanX <= 1.10},
		{"makespan <= 1.25x the minimum makespan", fmt.Sprintf("%s = %.2fx %s", secs(r.Makespan), spanX, secs(b.Makespan)), true, "bound " + secs(b.Makespan), spanX <= 1.25},
		{"wasted beyond the injected drops <= 2 % of jobs", fmt.Sprintf("%d - %d drops = %.2f %%", r.Wasted, r.Drops, 100*beyond), true, "0", beyond <= 0.02},
		{"attempts <= 1.05x jobs", fmt.Sprintf("%.3fx", apj), floor <= 1.05, fmt.Sprintf("floor %.3fx (drops)", floor), apj <= 1.05},
	}
	if sc.MaxDeferred > 0 {
		ts = append(ts, Target{fmt.Sprintf("deferred <= %.0f %%", 100*sc.MaxDeferred), fmt.Sprintf("%.1f %%", 100*r.Deferred()),
			b.DropShare <= sc.MaxDeferred, fmt.Sprintf("floor %.1f %% (drops)", 100*b.DropShare), r.Deferred() <= sc.MaxDeferred})
	}
	if sc.RateFrom > 0 {
		u := sc.RateUse(r)
		ts = append(ts, Target{fmt.Sprintf(">= 90 %% of the relay's rate from %v on", sc.RateFrom), fmt.Sprintf("%.1f %%", 100*u),
			true, "sessions that took a token in [from, makespan] / (rate * (makespan - from))", u >= 0.90})
	}
	if len(sc.JoinAt) > 0 {
		at := sc.JoinAt[0]
		before, after := countIn(r.ThrottledAt, at-10*time.Second, at), countIn(r.ThrottledAt, at, at+10*time.Second)
		// Refusals come a few at a time as the pacers probe; a join adds
		// none when the 10 s after it see no more than the 10 s before,
		// give or take 0.5 % of the sessions in them (at least one).
		slack := max(1, countIn(r.Sessions, at, at+10*time.Second)/200)
		ts = append(ts, Target{"a joining worker adds no refusals", fmt.Sprintf("%d throttled answers in the 10 s after the join, %d in the 10 s before", after, before),
			true, fmt.Sprintf("as before the join, give or take %d (0.5 %% of the sessions after it)", slack), after <= before+slack})
	}
	return ts
}

// RateUse is the share of the relays' rate used from sc.RateFrom to the
// makespan: the sessions that took a token (accepted, rejected recipients,
// drops) over the rate's integral.
func (sc Scenario) RateUse(r Result) float64 {
	if r.Makespan <= sc.RateFrom {
		return 0
	}
	return float64(countIn(r.Sessions, sc.RateFrom, r.Makespan+time.Nanosecond)) / sc.rateIntegral(sc.RateFrom, r.Makespan)
}

// countIn counts the times in [from, to); ts is ascending.
func countIn(ts []time.Duration, from, to time.Duration) int {
	lo, _ := slices.BinarySearch(ts, from)
	hi, _ := slices.BinarySearch(ts, to)
	return hi - lo
}
