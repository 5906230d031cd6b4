// Command adaptive is the retry-policy simulator: a discrete-event
// simulation on a virtual clock that offers a burst of jobs to a modelled
// relay (a token bucket of R mails/s and C connections, 421/450 4.7.x with
// a retry hint beyond them, random transient drops and permanent
// rejections) and runs three strategies side by side with the same seed:
// (a) uniform exponential backoff and (b) the reference model, each exactly
// as itself, and (c) the project's adaptive policy with its retry budgets,
// learned per-provider pacing and AIMD concurrency. All three share the
// transport: the same senders and the worker's delay tiers.
//
// It prints the parameters, a lower bound on mean latency for the scenario
// (no strategy can beat the relay), a Markdown table, the targets of issue
// 4 as PASS, FAIL or UNREACHABLE (not attainable by any strategy under the
// parameters), and writes a PNG of delivered-over-time.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/postline/postline/bench/internal/benchcli"
	"github.com/postline/postline/bench/internal/benchenv"
	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/retry"
)

func main() { benchcli.Main("adaptive", run) }

// DefaultParams are the main scenario's parameters, chosen once as a
// plausible shared relay and kept (see defaultsWhy), not tuned per policy.
func DefaultParams() Params {
	p := Params{
		Jobs: 10000, Rate: 50, Burst: 50, Conns: 5,
		SendTime: 50 * time.Millisecond, RejectTime: 20 * time.Millisecond, ConnectTime: 5 * time.Millisecond,
		Transient: 0.01, Permanent: 0.005, Senders: 20, Tiers: retry.DefaultTiers, Seed: 1,
		Budgets: true, Control: true,
	}
	p.Hint = refillHint(p)
	return p
}

// defaultsWhy is printed under the parameters.
const defaultsWhy = "Why these: a campaign-sized burst (10,000) into a relay sold at 50 mails/s with a one-second bucket and 5 connections " +
	"(a per-client connection cap, as in Postfix's scenario); 50 ms per mail on a reused connection to a relay in the same region " +
	"(MAIL, RCPT, DATA: a few round trips), so the 5 connections could carry 100/s and the rate R is the limit that binds, while Postfix's " +
	"scenario below exercises the connection cap alone; a client of 20 senders, 4x the relay's connections; the retry hint is the relay's " +
	"bucket refill time rounded up to whole seconds, as a relay that says when it has tokens again would; 1 % transient drops and 0.5 % " +
	"permanent rejections. One set for every strategy, not tuned to any of them."

// refillHint is the hint a token-bucket relay gives: the time to refill its
// bucket, rounded up to whole seconds (at least 1s).
func refillHint(p Params) time.Duration {
	if p.Rate <= 0 {
		return time.Second
	}
	d := time.Duration(float64(p.Burst) / p.Rate * float64(time.Second))
	return max(time.Second, (d + time.Second - 1).Truncate(time.Second))
}

// PostfixParams is Postfix's scenario: a relay that hangs up with 421 above
// 5 concurrent connections, no rate limit, while the client may use 20.
func PostfixParams(p Params) Params {
	p.Rate, p.Conns, p.Senders = 0, 5, 20
	return p
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	p := DefaultParams()
	rp := defaultRealParams()
	fs, f := newFlagSet(&p, &rp, stderr)
	if err := benchcli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := f.applySim(&p); err != nil {
		return err
	}
	if *f.realRun {
		if err := f.applyReal(p, &rp); err != nil {
			return err
		}
	}

	// The main and Postfix scenarios come first, with every strategy.
	scs, err := pickScenarios(Scenarios(p), *f.scenarioNames)
	if err != nil {
		return err
	}
	runs := RunScenarios(scs)
	main, postfix := runs[0].Results, runs[1].Results
	var b strings.Builder
	fmt.Fprintf(&b, "Command: `go run ./bench/adaptive %s`\n\n", commandLine(args))
	report(&b, p, *f.tiers, main, postfix)
	scenarioReport(&b, runs)
	if _, err := io.WriteString(stdout, b.String()); err != nil {
		return err
	}
	if err := f.plotSim(runs); err != nil {
		return err
	}
	if *f.realRun {
		if err := f.runReal(ctx, rp, &b, stdout, stderr); err != nil {
			return err
		}
	}
	if *f.md != "" {
		if err := os.WriteFile(*f.md, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", *f.md, err)
		}
	}
	return nil
}

// cliFlags are the command's flags that are not fields of Params or
// RealParams.
type cliFlags struct {
	hint                                   *time.Duration
	tiers, png, scenarioNames, scenarioPNG *string
	md                                     *string
	realRun                                *bool
	realStrats, realScenarios              *string
	workerEnv, brokers, realPNG            *string
}

// newFlagSet declares the command's flags: those of p and rp set them
// directly, the others land in the returned cliFlags.
func newFlagSet(p *Params, rp *RealParams, stderr io.Writer) (*flag.FlagSet, cliFlags) {
	var f cliFlags
	fs := flag.NewFlagSet("adaptive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&p.Jobs, "jobs", p.Jobs, "burst of jobs offered at t=0")
	fs.Float64Var(&p.Rate, "rate", p.Rate, "relay capacity in mails/s (0 = unlimited)")
	fs.IntVar(&p.Burst, "burst", p.Burst, "relay token bucket size")
	fs.IntVar(&p.Conns, "conns", p.Conns, "relay concurrent connections")
	f.hint = fs.Duration("hint", 0, "retry hint in the relay's 421/450 replies (0 = the bucket's refill time, rounded up to seconds)")
	fs.DurationVar(&p.SendTime, "send-time", p.SendTime, "duration of an accepted session")
	fs.DurationVar(&p.RejectTime, "reject-time", p.RejectTime, "duration of a session refused for rate")
	fs.DurationVar(&p.ConnectTime, "connect-time", p.ConnectTime, "duration of a connection refused at the greeting")
	fs.Float64Var(&p.Transient, "transient", p.Transient, "share of sessions dropped transiently")
	fs.Float64Var(&p.Permanent, "permanent", p.Permanent, "share of sessions rejected permanently")
	fs.IntVar(&p.Senders, "senders", p.Senders, "worker send slots (all strategies)")
	fs.BoolVar(&p.Budgets, "budgets", p.Budgets, "adaptive only: retry budgets (normal priority: 30 + 1/s)")
	fs.BoolVar(&p.Control, "control", p.Control, "adaptive only: the worker's send control (AIMD concurrency and a learned rate)")
	fs.Float64Var(&p.Pacer.Increase, "pace-increase", adaptive.DefaultPacerIncrease, "adaptive only: the pacer's least gain after a cut, mails/s per second")
	fs.Float64Var(&p.Pacer.Probe, "pace-probe", adaptive.DefaultPacerProbe, "adaptive only: the pacer's probe near the rate of its last cut, share of the rate per second")
	fs.Float64Var(&p.Pacer.Factor, "pace-factor", adaptive.DefaultPacerFactor, "adaptive only: pacer multiplicative decrease")
	fs.Uint64Var(&p.Seed, "seed", p.Seed, "random seed")
	f.tiers = fs.String("tiers", p.Tiers.String(), "delay tiers, as the worker rounds them; \"none\" disables rounding")
	f.png = fs.String("png", "bin/adaptive-sim.png", "plot of delivered-over-time (\"\" = none)")
	f.scenarioNames = fs.String("scenarios", strings.Join(scenarioNames(Scenarios(*p)), ","), "simulator scenarios to run, comma-separated (main and postfix always run)")
	f.scenarioPNG = fs.String("scenario-png", "bin/adaptive-sim-{scenario}.png", "plot of each harder scenario's delivered-over-time, {scenario} replaced by its name (\"\" = none)")
	f.md = fs.String("md", "", "also write the Markdown report to this file")
	f.realRun = fs.Bool("real", true, "after the simulator, run the real scenario: cmd/worker and cmd/retry-scheduler against Kafka, PostgreSQL and bench/relay "+
		"(relay rate, burst, connections, faults and senders as the simulator's flags)")
	fs.IntVar(&rp.Jobs, "real-jobs", rp.Jobs, "real scenario: burst of jobs")
	fs.IntVar(&rp.PostfixJobs, "real-postfix-jobs", rp.PostfixJobs, "real scenario: burst of jobs in Postfix's scenario (0 = skip it)")
	fs.IntVar(&rp.HangUpAbove, "real-hang-up-above", rp.HangUpAbove, "real Postfix scenario: the relay serves this many sessions and hangs up (421 at MAIL) on younger ones")
	fs.Int64Var(&rp.Seed, "real-seed", rp.Seed, "real scenario: relay seed (drops and rejected recipients)")
	fs.IntVar(&rp.Partitions, "real-partitions", rp.Partitions, "real scenario: partitions of the jobs topic and of each delay topic")
	fs.DurationVar(&rp.LagInterval, "real-lag-interval", rp.LagInterval, "real scenario: worker POSTLINE_LAG_INTERVAL")
	fs.DurationVar(&rp.Timeout, "real-timeout", rp.Timeout, "real scenario: longest a run may take to make every job terminal")
	fs.DurationVar(&rp.HardTimeout, "real-hard-timeout", 0, "real scenario: longest a run of drop, two-relays, three-workers, fivexx or fleet200 may take "+
		"(0 = min(-real-timeout, 2x the scenario's minimum makespan + 3m))")
	fs.DurationVar(&rp.Sample, "real-sample", rp.Sample, "real scenario: delay-depth sampling interval")
	fs.BoolVar(&rp.Parallel, "real-parallel", rp.Parallel, "real scenario: run every strategy and scenario at once (each on its own relay, topics and schema)")
	f.realStrats = fs.String("real-strategies", strings.Join(rp.Strategies, ","), "real scenario: strategies to run, comma-separated")
	f.realScenarios = fs.String("real-scenarios", strings.Join(rp.Scenarios, ","), "real scenarios to run, comma-separated: main and postfix run every -real-strategies "+
		"(at once with -real-parallel); drop, two-relays, three-workers, fivexx and fleet200 run the adaptive strategy only, each alone")
	for _, name := range []string{ScenarioDrop, ScenarioTwoRelays, ScenarioThreeWorkers, ScenarioFivexx, ScenarioFleet200} {
		n := rp.ScenarioJobs[name]
		fs.Func("real-"+name+"-jobs", fmt.Sprintf("real %s scenario: burst of jobs (default %d)", name, n), func(v string) error {
			k, err := strconv.Atoi(v)
			rp.ScenarioJobs[name] = k
			return err
		})
	}
	f.workerEnv = fs.String("worker-env", strings.Join(rp.WorkerEnv, ","), "real scenario: extra worker settings for every strategy, comma-separated KEY=VALUE (default: none, every strategy runs the defaults a user gets)")
	fs.StringVar(&rp.WorkerBin, "worker-bin", rp.WorkerBin, "the worker binary (go build -o bin/ ./cmd/worker)")
	fs.StringVar(&rp.SchedulerBin, "scheduler-bin", rp.SchedulerBin, "the retry-scheduler binary (go build -o bin/ ./cmd/retry-scheduler)")
	f.brokers = fs.String("brokers", cmp.Or(os.Getenv("POSTLINE_TEST_KAFKA"), testenvKafka), "Kafka brokers, comma-separated")
	fs.StringVar(&rp.DatabaseURL, "database-url", cmp.Or(os.Getenv("POSTLINE_TEST_DATABASE_URL"), testenvDatabaseURL), "PostgreSQL URL (a schema per run is created in it)")
	fs.StringVar(&rp.LogDir, "log-dir", "", "real scenario: directory for the binaries' logs (default: a new temp dir)")
	fs.BoolVar(&rp.Keep, "keep", false, "real scenario: keep topics and schemas after the run")
	f.realPNG = fs.String("real-png", "bin/adaptive-real.png", "plot of the real main scenario's delivered-over-time; each scenario's goes to this path "+
		"without .png plus -<scenario>.png (\"\" = none)")
	return fs, f
}

// applySim sets the simulator's hint and tiers from the flags and checks p.
func (f cliFlags) applySim(p *Params) error {
	p.Hint = *f.hint
	if p.Hint == 0 {
		p.Hint = refillHint(*p)
	}
	if *f.tiers == "none" {
		p.Tiers = nil
	} else {
		t, err := retry.ParseTiers(*f.tiers)
		if err != nil {
			return err
		}
		p.Tiers = t
	}
	if p.Jobs < 1 || p.Senders < 1 || p.Conns < 1 || p.SendTime <= 0 {
		return fmt.Errorf("jobs %d, senders %d, conns %d and send-time %v must be positive", p.Jobs, p.Senders, p.Conns, p.SendTime)
	}
	return p.Pacer.WithDefaults().Validate()
}

// applyReal sets the real scenario's relay from the simulator's p and the
// rest from the flags, checks rp and makes its log directory.
func (f cliFlags) applyReal(p Params, rp *RealParams) error {
	rp.Rate, rp.Burst, rp.Conns, rp.Transient, rp.Permanent, rp.Senders = p.Rate, p.Burst, p.Conns, p.Transient, p.Permanent, p.Senders
	rp.Brokers = strings.Split(*f.brokers, ",")
	if *f.workerEnv != "" {
		rp.WorkerEnv = strings.Split(*f.workerEnv, ",")
	}
	var err error
	if rp.Strategies, err = realStrategies(*f.realStrats); err != nil {
		return err
	}
	if rp.Scenarios, err = parseScenarios(*f.realScenarios); err != nil {
		return err
	}
	if *f.tiers != "none" {
		rp.Tiers = *f.tiers
	}
	if err := rp.validate(); err != nil {
		return err
	}
	rp.LogDir, err = benchenv.LogDir(rp.LogDir, "postline-bench-adaptive-")
	return err
}

// plotSim draws the simulator's main scenario and each harder one.
func (f cliFlags) plotSim(runs []ScenarioRun) error {
	if *f.png != "" {
		if err := plotTimeline(*f.png, "Delivered over time (simulator)", runs[0].Results); err != nil {
			return fmt.Errorf("plot %s: %w", *f.png, err)
		}
	}
	if *f.scenarioPNG != "" {
		for _, r := range runs[2:] {
			path := strings.ReplaceAll(*f.scenarioPNG, "{scenario}", r.Scenario.Name)
			if err := plotTimeline(path, "Delivered over time (simulator, "+r.Scenario.Name+")", r.Results); err != nil {
				return fmt.Errorf("plot %s: %w", path, err)
			}
		}
	}
	return nil
}

// runReal runs the real scenarios, adds their report to b, prints it and
// draws their plots. When a run fails it still writes the report to -md.
func (f cliFlags) runReal(ctx context.Context, rp RealParams, b *strings.Builder, stdout, stderr io.Writer) error {
	fmt.Fprintf(stderr, "bench-adaptive: real scenario; logs in %s\n", rp.LogDir)
	results, runErr := RunReal(ctx, rp, stderr)
	done := completed(results) // a run that failed has no figures
	start := b.Len()
	realReport(b, rp, done)
	if _, err := io.WriteString(stdout, b.String()[start:]); err != nil {
		return err
	}
	if *f.realPNG != "" {
		if mainRuns := realTimelines(done); len(mainRuns) > 0 {
			if err := plotTimeline(*f.realPNG, "Delivered over time (real worker and relay)", mainRuns); err != nil {
				return fmt.Errorf("plot %s: %w", *f.realPNG, err)
			}
		}
		if err := plotScenarios(strings.TrimSuffix(*f.realPNG, ".png"), rp, done); err != nil {
			return err
		}
	}
	if runErr != nil {
		if *f.md != "" {
			_ = os.WriteFile(*f.md, []byte(b.String()), 0o644)
		}
		return runErr
	}
	return nil
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func row(w io.Writer, r Result, p Params, bound time.Duration, last string) {
	fmt.Fprintf(w, "| %s | %d | %s | %s | %.2fx | %s | %d | %d (%d / %d / %d) | %.3f | %d | %s |\n", r.Strategy, r.Delivered, secs(r.Makespan),
		secs(r.Mean()), r.Mean().Seconds()/bound.Seconds(), secs(r.P99()), r.Attempts, r.Wasted, r.Refused, r.Slowed, r.Wasted-r.Refused-r.Slowed,
		float64(r.Attempts)/float64(p.Jobs), r.PeakDepth, last)
}

// rateText prints a learned rate; +Inf is a relay that never refused a
// send for its rate.
func rateText(r float64) string {
	if math.IsInf(r, 1) {
		return "unpaced"
	}
	return fmt.Sprintf("%.1f mails/s", r)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
