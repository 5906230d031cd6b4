package main

import (
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/bench/relay"
	"github.com/postline/postline/internal/testenv"
)

func TestFill(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	published := map[string]time.Time{"a@x": t0, "b@x": t0.Add(time.Second), "c@x": t0}
	r := RealResult{Result: Result{Strategy: StratAdaptive}, Scenario: ScenarioMain, Jobs: 4,
		Relay: relay.Stats{
			Accepted: 4, Throttled: 3, TransientDrops: 1, Refused: 2, HungUp: 1, PermanentRejects: 1,
			// b is delivered twice (only the first counts); "other" is not ours.
			AcceptedAt:  []time.Time{t0.Add(2 * time.Second), t0.Add(3 * time.Second), t0.Add(4 * time.Second), t0.Add(5 * time.Second)},
			AcceptedIDs: []string{"a@x", "b@x", "b@x", "other"},
		}}
	fill(&r, published, t0, t0.Add(6*time.Second), map[string]int{"sent": 2, "failed": 1})
	if r.Attempts != 12 || r.Wasted != 7 || r.Refused != 3 || r.Slowed != 3 {
		t.Errorf("attempts %d wasted %d refused %d slowed %d, want 12 7 3 3", r.Attempts, r.Wasted, r.Refused, r.Slowed)
	}
	if r.Delivered != 2 || r.Failed != 1 || r.Rejected != 1 || r.Unfinished != 1 {
		t.Errorf("delivered %d failed %d rejected %d unfinished %d, want 2 1 1 1", r.Delivered, r.Failed, r.Rejected, r.Unfinished)
	}
	if r.Mean() != 2*time.Second || r.Makespan != 6*time.Second {
		t.Errorf("latencies %v (mean %v), makespan %v; want mean 2s, makespan 6s", r.Latencies, r.Mean(), r.Makespan)
	}
	if want := []time.Duration{2 * time.Second, 3 * time.Second}; len(r.Timeline) != 2 || r.Timeline[0] != want[0] || r.Timeline[1] != want[1] {
		t.Errorf("timeline %v, want %v", r.Timeline, want)
	}
}

func TestRealTargets(t *testing.T) {
	res := func(sc, s string, mean time.Duration, wasted, attempts, jobs int) RealResult {
		return RealResult{Result: Result{Strategy: s, Wasted: wasted, Attempts: attempts, Latencies: []time.Duration{mean}}, Scenario: sc, Jobs: jobs}
	}
	good := []RealResult{
		res(ScenarioMain, StratUniform, 100*time.Second, 1000, 3000, 2000),
		res(ScenarioMain, StratReference, 60*time.Second, 500, 2500, 2000),
		res(ScenarioMain, StratAdaptive, 25*time.Second, 40, 2040, 2000),
		res(ScenarioPostfix, StratAdaptive, 10*time.Second, 100, 1100, 1000),
	}
	tests := []struct {
		name    string
		results []RealResult
		want    []string
	}{
		{"all met", good, []string{"PASS", "PASS", "PASS", "PASS", "PASS", "PASS"}},
		{"only adaptive ran", good[2:3], []string{"n/a", "n/a", "PASS", "n/a", "n/a", "n/a"}},
		{"adaptive no better than uniform", []RealResult{good[0], good[1], res(ScenarioMain, StratAdaptive, 80*time.Second, 600, 2600, 2000),
			res(ScenarioPostfix, StratAdaptive, 10*time.Second, 200, 1000, 1000)},
			[]string{"FAIL", "FAIL", "FAIL", "FAIL", "FAIL", "FAIL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := realTargets(tt.results, 0)
			for i, g := range got {
				if g.result != tt.want[i] {
					t.Errorf("%s: %s (%s), want %s", g.name, g.result, g.value, tt.want[i])
				}
			}
		})
	}
	// A uniform mean close to the bound leaves no room for 70 %: the
	// target is unreachable, not failed.
	near := []RealResult{res(ScenarioMain, StratUniform, 22*time.Second, 500, 2500, 2000), good[1],
		res(ScenarioMain, StratAdaptive, 20*time.Second, 40, 2040, 2000), good[3]}
	if got := realTargets(near, 19*time.Second)[0]; got.result != "UNREACHABLE" || !strings.Contains(got.value, "at the bound") {
		t.Errorf("latency target near the bound: %s (%s), want UNREACHABLE", got.result, got.value)
	}
	timedOut := append([]RealResult(nil), good...)
	timedOut[0].TimedOut = true
	if got := realTargets(timedOut, 0)[0].result; got != "TIMEOUT" {
		t.Errorf("a timed-out uniform run: %s, want TIMEOUT", got)
	}
}

func TestRealStrategies(t *testing.T) {
	if got, err := realStrategies("uniform, adaptive"); err != nil || strings.Join(got, ",") != "uniform,adaptive" {
		t.Errorf("realStrategies = %v, %v", got, err)
	}
	if _, err := realStrategies("uniform,fast"); err == nil {
		t.Error("an unknown strategy was accepted")
	}
}

// TestRealSmall runs the real harness at a tiny size: the worker and the
// scheduler built from this tree, one strategy, a relay fast enough that
// only its faults defer mail. It takes about 15 s, mostly the build and
// the consumer groups' joins.
func TestRealSmall(t *testing.T) {
	testenv.Integration(t, "Kafka and PostgreSQL")
	dir := buildBinaries(t)
	p := defaultRealParams()
	p.Jobs, p.PostfixJobs, p.Strategies, p.Parallel = 60, 0, []string{StratAdaptive}, false
	p.Scenarios = []string{ScenarioMain}
	p.Rate, p.Burst, p.Conns, p.Senders = 1000, 100, 20, 4
	p.Transient, p.Permanent = 0.05, 0.05
	p.Timeout = 2 * time.Minute
	p.WorkerBin, p.SchedulerBin = filepath.Join(dir, "worker"), filepath.Join(dir, "retry-scheduler")
	p.Brokers, p.DatabaseURL, p.LogDir = testenv.KafkaBrokers(), testenv.DatabaseURL(), dir
	if err := p.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	results, err := RunReal(ctx, p, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 {
		t.Fatalf("%d results, want 1", len(results))
	}
	r := results[0]
	st := r.Relay
	if r.TimedOut || r.Unfinished != 0 || r.Delivered+r.Failed+r.Dead != p.Jobs {
		t.Errorf("timed out %v, %d unfinished; delivered %d + failed %d + dead %d, want %d jobs", r.TimedOut, r.Unfinished, r.Delivered, r.Failed, r.Dead, p.Jobs)
	}
	if r.Attempts < p.Jobs || int64(r.Attempts) != st.Accepted+st.Deferred()+st.PermanentRejects || r.Wasted != int(st.Deferred()) {
		t.Errorf("attempts %d (relay: %d accepted, %d deferred, %d rejected), wasted %d; want attempts >= %d and the relay's sum",
			r.Attempts, st.Accepted, st.Deferred(), st.PermanentRejects, r.Wasted, p.Jobs)
	}
	if r.Delivered == 0 || int64(r.Delivered) > st.Accepted || len(r.Latencies) != r.Delivered || len(r.Timeline) != r.Delivered {
		t.Errorf("delivered %d, relay accepted %d, %d latencies, %d timeline points", r.Delivered, st.Accepted, len(r.Latencies), len(r.Timeline))
	}
	if r.Mean() <= 0 || r.P99() < r.Mean() || r.P99() > r.Makespan+time.Second {
		t.Errorf("mean %v, p99 %v, makespan %v: want 0 < mean <= p99 <= makespan", r.Mean(), r.P99(), r.Makespan)
	}
	// The relay rejects recipients by a hash: every rejected one must end
	// failed, and no job may fail for another reason here.
	rejected := 0
	for k := range p.Jobs {
		if p.relayConfig(ScenarioMain).Rejects(rcptAddr(k)) {
			rejected++
		}
	}
	if r.Failed != rejected || int(st.PermanentRejects) != rejected {
		t.Errorf("failed %d, relay rejected %d recipients; the relay's hash rejects %d of them", r.Failed, st.PermanentRejects, rejected)
	}
	var b strings.Builder
	realReport(&b, p, results)
	if !strings.Contains(b.String(), "| adaptive | ") || !strings.Contains(b.String(), "attempts <= 1.1x offered jobs") {
		t.Errorf("report lacks the adaptive row or the targets:\n%s", b.String())
	}
}

// buildBinaries builds the worker and the scheduler from this tree into a
// temporary directory and returns it.
func buildBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/worker", "./cmd/retry-scheduler")
	build.Dir = strings.TrimSpace(string(root))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// TestRealScenariosSmall runs two harder scenarios at a tiny size: two
// relays at one priority (per-relay counters) and fleet200 (two workers
// with default settings, their /metrics read at the end). About 20 s.
func TestRealScenariosSmall(t *testing.T) {
	testenv.Integration(t, "Kafka and PostgreSQL")
	dir := buildBinaries(t)
	p := defaultRealParams()
	p.Rate, p.Burst, p.Conns, p.Senders, p.Transient, p.Permanent = 50, 50, 5, 20, 0.01, 0.005
	p.Scenarios = []string{ScenarioTwoRelays, ScenarioFleet200}
	p.ScenarioJobs[ScenarioTwoRelays], p.ScenarioJobs[ScenarioFleet200] = 150, 400
	p.Timeout = 2 * time.Minute
	p.WorkerBin, p.SchedulerBin = filepath.Join(dir, "worker"), filepath.Join(dir, "retry-scheduler")
	p.Brokers, p.DatabaseURL, p.LogDir = testenv.KafkaBrokers(), testenv.DatabaseURL(), dir
	if err := p.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	results, err := RunReal(ctx, p, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 || results[0].Scenario != ScenarioTwoRelays || results[1].Scenario != ScenarioFleet200 {
		t.Fatalf("results %d, want two-relays and fleet200", len(results))
	}
	for _, r := range results {
		if !r.Complete || r.TimedOut || r.Unfinished != 0 || r.Delivered+r.Failed+r.Dead != r.Jobs {
			t.Errorf("%s: complete %v timed out %v, %d unfinished, %d+%d+%d of %d", r.Scenario, r.Complete, r.TimedOut, r.Unfinished, r.Delivered, r.Failed, r.Dead, r.Jobs)
		}
		var accepted int64
		for _, st := range r.Relays {
			accepted += st.Accepted
		}
		if accepted != r.Relay.Accepted || len(r.Relay.AcceptedAt) != int(accepted) || r.MetricsErr != nil {
			t.Errorf("%s: relays accepted %d, merged %d (%d times); metrics: %v", r.Scenario, accepted, r.Relay.Accepted, len(r.Relay.AcceptedAt), r.MetricsErr)
		}
	}
	if two := results[0]; len(two.Relays) != 2 || two.RelayNames[0] != "a" || two.RelayNames[1] != "b" {
		t.Errorf("two-relays: relays %v", two.RelayNames)
	}
	if fleet := results[1]; fleet.Workers != 2 || fleet.Relay.TransientReplies == 0 {
		t.Errorf("fleet200: %d workers, %d transient replies", fleet.Workers, fleet.Relay.TransientReplies)
	}
	var b strings.Builder
	realReport(&b, p, results)
	for _, want := range []string{"### two-relays", "### fleet200", "### Summary", "each relay's share of acceptances", "no circuit opening"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// testWriter sends the harness's progress to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

var _ io.Writer = testWriter{}

func TestRealParamsValidate(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*RealParams)
		field string // in the error; "" = valid
	}{
		{"defaults", func(*RealParams) {}, ""},
		{"extra worker setting", func(p *RealParams) { p.WorkerEnv = []string{"POSTLINE_CIRCUIT_THRESHOLD=1000"} }, ""},
		{"no jobs", func(p *RealParams) { p.Jobs = 0 }, "-real-jobs"},
		{"policy through -worker-env", func(p *RealParams) { p.WorkerEnv = []string{"POSTLINE_RETRY_POLICY=uniform"} }, "-worker-env"},
		{"not a setting", func(p *RealParams) { p.WorkerEnv = []string{"PATH=/tmp"} }, "-worker-env"},
		{"bad tiers", func(p *RealParams) { p.Tiers = "soon" }, "-tiers"},
		{"Postfix without a hang-up limit", func(p *RealParams) { p.HangUpAbove = 0 }, "-real-hang-up-above"},
		{"no scenarios", func(p *RealParams) { p.Scenarios = nil }, "-real-scenarios"},
		{"unknown scenario", func(p *RealParams) { p.Scenarios = []string{"drop", "flood"} }, "-real-scenarios"},
		{"no jobs in a scenario", func(p *RealParams) { p.ScenarioJobs[ScenarioDrop] = 0 }, "-real-drop-jobs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := defaultRealParams()
			tt.edit(&p)
			err := p.validate()
			switch {
			case tt.field == "" && err != nil:
				t.Errorf("validate: %v", err)
			case tt.field != "" && (err == nil || !strings.Contains(err.Error(), tt.field)):
				t.Errorf("validate = %v, want an error naming %s", err, tt.field)
			}
		})
	}
}

func TestPerTenSeconds(t *testing.T) {
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	tests := []struct {
		times []time.Time
		want  string
	}{
		{nil, ""},
		{[]time.Time{at(0.5), at(9.9), at(10), at(35)}, "2 1 0 1"},
		{[]time.Time{at(-1), at(1)}, "2"}, // before publishing ended counts in the first window
	}
	for _, tt := range tests {
		if got := perTenSeconds(tt.times, start); got != tt.want {
			t.Errorf("perTenSeconds(%v) = %q, want %q", tt.times, got, tt.want)
		}
	}
}
