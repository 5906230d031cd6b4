package circuit_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/circuit"
	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/internal/testkit"
)

// fleet is one migrated schema shared by several workers.
type fleet struct {
	t   *testing.T
	url string
	db  *pgxpool.Pool // for the test's own queries
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	url, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return &fleet{t: t, url: url, db: pool}
}

// worker is one replica: its own pool, registry and Breakers.
type worker struct {
	*circuit.Breakers
	reg     *prometheus.Registry
	queries *atomic.Int64 // statements sent on the worker's pool
}

// counter counts the statements a pool sends.
type counter struct{ n *atomic.Int64 }

func (c counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// worker starts a replica named owner; with run, its refresh loop runs until
// the test ends.
func (f *fleet) worker(owner string, relays []string, p circuit.Policy, run bool) *worker {
	f.t.Helper()
	cfg, err := pgxpool.ParseConfig(f.url)
	if err != nil {
		f.t.Fatal(err)
	}
	n := new(atomic.Int64)
	cfg.ConnConfig.Tracer = counter{n}
	pool, err := pgxpool.NewWithConfig(f.t.Context(), cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(pool.Close)
	reg := prometheus.NewPedanticRegistry()
	b, err := circuit.New(pool, owner, relays, p, nil, reg)
	if err != nil {
		f.t.Fatalf("New(%s): %v", owner, err)
	}
	if run {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		f.t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				f.t.Errorf("Run(%s) = %v, want nil", owner, err)
			}
		})
	}
	return &worker{Breakers: b, reg: reg, queries: n}
}

// row reads the shared row of relay.
type dbRow struct {
	state     string
	failures  int
	successes int
	cooldown  time.Duration
	version   int64
	owner     *string
}

func (f *fleet) row(relay string) dbRow {
	f.t.Helper()
	var r dbRow
	var opened, until *time.Time
	if err := f.db.QueryRow(f.t.Context(), `SELECT state, failures, successes, cooldown, version, probe_owner, opened_at, open_until
		FROM postline_circuits WHERE provider = $1`, relay).Scan(&r.state, &r.failures, &r.successes, &r.cooldown, &r.version, &r.owner, &opened, &until); err != nil {
		f.t.Fatalf("read row %s: %v", relay, err)
	}
	if r.state != "closed" && (opened == nil || until == nil || until.Sub(*opened) != r.cooldown) {
		f.t.Errorf("row %s: open from %v to %v, want a period of its cooldown %v", relay, opened, until, r.cooldown)
	}
	return r
}

func (w *worker) snapshot(t *testing.T, relay string) circuit.Snapshot {
	t.Helper()
	for _, s := range w.Snapshot() {
		if s.Relay == relay {
			return s
		}
	}
	t.Fatalf("no snapshot of %s", relay)
	return circuit.Snapshot{}
}

// count returns the value of the first series of metric name matching labels.
func (w *worker) count(name string, labels prometheus.Labels) float64 {
	mfs, err := w.reg.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	return 0
}

func report(t *testing.T, w *worker, relay string, o circuit.SendResult, class string, n int) {
	t.Helper()
	for range n {
		if err := w.Report(t.Context(), relay, o, class); err != nil {
			t.Fatalf("Report(%s, %v): %v", relay, o, err)
		}
	}
}

// claimProbe has every worker call Allow from 4 goroutines each, for window
// or until the probe is won and window has passed, and checks that exactly
// one call won it. It returns the winner.
func claimProbe(t *testing.T, relay string, window time.Duration, ws ...*worker) *worker {
	t.Helper()
	// A worker's cache says closed until its next refresh.
	testkit.Eventually(t, 3*time.Second, "every worker sees "+relay+" open", func() bool {
		for _, w := range ws {
			if w.snapshot(t, relay).State == circuit.Closed {
				return false
			}
		}
		return true
	})
	var (
		mu      sync.Mutex
		winners []*worker
		wg      sync.WaitGroup
	)
	deadline := time.Now().Add(window)
	for _, w := range ws {
		for range 4 {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					d, err := w.Allow(t.Context(), relay)
					if err != nil {
						t.Errorf("Allow(%s): %v", relay, err)
						return
					}
					if d.Probe != d.Allowed {
						t.Errorf("Allow(%s) = %+v while not closed, want a probe or nothing", relay, d)
					}
					if d.Probe {
						mu.Lock()
						winners = append(winners, w)
						mu.Unlock()
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d Allow calls won the probe of %s, want exactly 1", len(winners), relay)
	}
	return winners[0]
}

func TestTwoWorkersSeeOpenCircuit(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	relays := []string{"primary", "backup"}
	p := circuit.Policy{RefreshInterval: time.Second}
	a := f.worker("worker-a", relays, p, true)
	b := f.worker("worker-b", relays, p, true)
	changed := b.Changed()

	report(t, a, "primary", circuit.Failure, "throttled", 5)
	if d, err := a.Allow(t.Context(), "primary"); err != nil || d.Allowed {
		t.Fatalf("A: Allow(primary) after 5 throttles = %+v, %v; want refused", d, err)
	}
	took := testkit.Eventually(t, 3*time.Second, "worker B sees primary open", func() bool {
		d, err := b.Allow(t.Context(), "primary")
		if err != nil {
			t.Fatal(err)
		}
		return !d.Allowed
	})
	t.Logf("worker B saw the open circuit after %v (refresh 1s)", took)
	select {
	case <-changed:
	default:
		t.Error("B's Changed channel was not closed by the change")
	}
	s := b.snapshot(t, "primary")
	if s.State != circuit.Open || s.Health != circuit.Unavailable || s.Failures != 5 || s.LastClass != "throttled" ||
		s.Cooldown != circuit.DefaultBaseCooldown {
		t.Errorf("B's snapshot of primary = %+v, want open, unavailable, 5 throttles, 30s", s)
	}
	if d, err := b.Allow(t.Context(), "backup"); err != nil || !d.Allowed || d.Probe {
		t.Errorf("B: Allow(backup) = %+v, %v; want allowed", d, err)
	}
	if !b.AnyAllowed() {
		t.Error("AnyAllowed with backup closed = false")
	}
	if got := a.count("postline_circuit_state", prometheus.Labels{"provider": "primary", "state": "open"}); got != 1 {
		t.Errorf("A: state{primary,open} = %v, want 1", got)
	}
	if got := b.count("postline_circuit_health", prometheus.Labels{"provider": "primary", "health": "unavailable"}); got != 1 {
		t.Errorf("B: health{primary,unavailable} = %v, want 1", got)
	}
}

func TestConcurrentReportsLoseNothing(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	// A threshold the reports never reach: the count must be exact.
	high := circuit.Policy{FailureThreshold: 1000}
	ws := []*worker{f.worker("worker-a", []string{"p"}, high, false), f.worker("worker-b", []string{"p"}, high, false)}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { report(t, ws[i%2], "p", circuit.Failure, "transient", 10) })
	}
	wg.Wait()
	if r := f.row("p"); r.failures != 80 || r.state != "closed" || r.version != 81 {
		t.Errorf("after 80 concurrent failures: %+v, want 80 failures, closed, version 81", r)
	}

	// With the default threshold of 5, 24 concurrent faults open it once.
	g := newFleet(t)
	ws = []*worker{g.worker("worker-a", []string{"p"}, circuit.Policy{}, false), g.worker("worker-b", []string{"p"}, circuit.Policy{}, false)}
	for i := range 8 {
		wg.Go(func() { report(t, ws[i%2], "p", circuit.Failure, "throttled", 3) })
	}
	wg.Wait()
	if r := g.row("p"); r.failures != 5 || r.state != "open" || r.version != 6 {
		t.Errorf("after 24 concurrent failures: %+v, want open with 5 failures at version 6 (later ones ignored)", r)
	}
	opened := 0.0
	for _, w := range ws {
		opened += w.count("postline_circuit_transitions_total", prometheus.Labels{"provider": "p", "to": "open"})
	}
	if opened != 1 {
		t.Errorf("transitions_total{to=open} summed over both workers = %v, want 1", opened)
	}
}

func TestProbe(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	const base = 300 * time.Millisecond
	p := circuit.Policy{FailureThreshold: 2, BaseCooldown: base, ProbeTimeout: 10 * time.Second, RefreshInterval: 100 * time.Millisecond}
	a := f.worker("worker-a", []string{"p"}, p, true)
	b := f.worker("worker-b", []string{"p"}, p, true)

	// Open, and no probe before the cooldown ends.
	report(t, a, "p", circuit.Failure, "throttled", 2)
	if r := f.row("p"); r.state != "open" || r.cooldown != base {
		t.Fatalf("after 2 faults: %+v, want open for %v", r, base)
	}
	if d, err := a.Allow(t.Context(), "p"); err != nil || d.Allowed {
		t.Fatalf("Allow during the cooldown = %+v, %v; want refused", d, err)
	}

	// After the cooldown exactly one of 8 callers on two workers probes.
	winner := claimProbe(t, "p", 2*base, a, b)
	if r := f.row("p"); r.state != "half_open" || r.owner == nil {
		t.Fatalf("after the claim: %+v, want half_open with an owner", r)
	}
	if s := winner.snapshot(t, "p"); s.State != circuit.HalfOpen || s.Health != circuit.Degraded {
		t.Errorf("winner's snapshot = %+v, want half_open, degraded", s)
	}
	// A straggler's failure from the other worker does not decide the probe.
	other := a
	if winner == a {
		other = b
	}
	report(t, other, "p", circuit.Failure, "throttled", 1)
	if r := f.row("p"); r.state != "half_open" {
		t.Fatalf("after another worker's failure: %+v, want still half_open", r)
	}

	// The probe's success closes the circuit for everyone.
	report(t, winner, "p", circuit.Success, "", 1)
	if r := f.row("p"); r.state != "closed" || r.failures != 0 || r.cooldown != base {
		t.Fatalf("after the probe's success: %+v, want closed, 0 failures, cooldown %v", r, base)
	}
	testkit.Eventually(t, 3*time.Second, "both workers see it closed", func() bool {
		da, _ := a.Allow(t.Context(), "p")
		db, _ := b.Allow(t.Context(), "p")
		return da.Allowed && !da.Probe && db.Allowed && !db.Probe
	})
	if got := winner.count("postline_circuit_probes_total", prometheus.Labels{"provider": "p", "result": "success"}); got != 1 {
		t.Errorf("probes_total{success} = %v, want 1", got)
	}

	// Open again; a failed probe doubles the cooldown.
	report(t, a, "p", circuit.Failure, "throttled", 2)
	winner = claimProbe(t, "p", 2*base, a, b)
	report(t, winner, "p", circuit.Failure, "throttled", 1)
	if r := f.row("p"); r.state != "open" || r.cooldown != 2*base {
		t.Fatalf("after a failed probe: %+v, want open for %v", r, 2*base)
	}
	if s := winner.snapshot(t, "p"); s.Cooldown != 2*base || s.State != circuit.Open {
		t.Errorf("winner's snapshot = %+v, want open for %v", s, 2*base)
	}
	if got := winner.count("postline_circuit_probes_total", prometheus.Labels{"provider": "p", "result": "failure"}); got != 1 {
		t.Errorf("probes_total{failure} = %v, want 1", got)
	}

	// A probe that times out multiplies it by 4.
	winner = claimProbe(t, "p", 4*base, a, b)
	report(t, winner, "p", circuit.TimeoutFailure, "transient", 1)
	if r := f.row("p"); r.state != "open" || r.cooldown != 8*base {
		t.Fatalf("after a timed-out probe: %+v, want open for %v", r, 8*base)
	}
	testkit.Eventually(t, 3*time.Second, "the other worker sees the 2.4s cooldown", func() bool {
		s := other.snapshot(t, "p")
		return s.State == circuit.Open && s.Cooldown == 8*base && s.LastClass == "transient"
	})
}

func TestAuthFailureOpensAtOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	a := f.worker("worker-a", []string{"primary", "backup"}, circuit.Policy{}, false)
	report(t, a, "primary", circuit.AuthFailure, "auth", 1)
	if r := f.row("primary"); r.state != "open" || r.failures != 1 {
		t.Fatalf("after one auth failure: %+v, want open", r)
	}
	if d, err := a.Allow(t.Context(), "primary"); err != nil || d.Allowed {
		t.Errorf("Allow(primary) = %+v, %v; want refused", d, err)
	}
	if s := a.snapshot(t, "primary"); s.LastClass != "auth" || s.Health != circuit.Unavailable {
		t.Errorf("snapshot = %+v, want auth, unavailable", s)
	}
	if s := a.snapshot(t, "backup"); s.State != circuit.Closed || s.Health != circuit.Healthy {
		t.Errorf("backup = %+v, want closed, healthy", s)
	}
	if got := a.count("postline_circuit_transitions_total", prometheus.Labels{"provider": "primary", "to": "open"}); got != 1 {
		t.Errorf("transitions_total{primary,open} = %v, want 1", got)
	}
}

func TestExpiredProbeMayBeClaimedAgain(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	const probeTimeout = 300 * time.Millisecond
	p := circuit.Policy{BaseCooldown: 100 * time.Millisecond, ProbeTimeout: probeTimeout, RefreshInterval: 50 * time.Millisecond}
	a := f.worker("worker-a", []string{"p"}, p, true)
	b := f.worker("worker-b", []string{"p"}, p, true)
	report(t, a, "p", circuit.AuthFailure, "auth", 1)
	testkit.Eventually(t, 2*time.Second, "A claims the probe", func() bool {
		d, err := a.Allow(t.Context(), "p")
		if err != nil {
			t.Fatal(err)
		}
		return d.Probe
	})
	claimed := time.Now()
	// A never reports; B gets the probe once A's deadline has passed.
	testkit.Eventually(t, 3*time.Second, "B claims the expired probe", func() bool {
		d, err := b.Allow(t.Context(), "p")
		if err != nil {
			t.Fatal(err)
		}
		return d.Probe
	})
	if waited := time.Since(claimed); waited < probeTimeout-50*time.Millisecond {
		t.Errorf("B claimed the probe %v after A, before A's %v deadline", waited, probeTimeout)
	}
	if r := f.row("p"); r.state != "half_open" || r.owner == nil || *r.owner != "worker-b" {
		t.Fatalf("row = %+v, want half_open owned by worker-b", r)
	}
	if got := b.count("postline_circuit_probes_total", prometheus.Labels{"provider": "p", "result": "expired"}); got != 1 {
		t.Errorf("B: probes_total{expired} = %v, want 1", got)
	}
	// A's late report is a straggler's; B's success closes.
	if err := a.Report(t.Context(), "p", circuit.Failure, "transient"); err != nil {
		t.Fatal(err)
	}
	if r := f.row("p"); r.state != "half_open" || *r.owner != "worker-b" {
		t.Fatalf("after A's late report: %+v, want half_open owned by worker-b", r)
	}
	report(t, b, "p", circuit.Success, "", 1)
	if r := f.row("p"); r.state != "closed" {
		t.Fatalf("after B's success: %+v, want closed", r)
	}
}

func TestSuccessStormDoesNotWrite(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	a := f.worker("worker-a", []string{"p"}, circuit.Policy{}, false) // no refresh loop: every statement is Allow's or Report's
	before := f.row("p").version
	start := a.queries.Load()
	storm := func() {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 2000 {
					if d, err := a.Allow(t.Context(), "p"); err != nil || !d.Allowed {
						t.Errorf("Allow = %+v, %v", d, err)
						return
					}
					if err := a.Report(t.Context(), "p", circuit.Success, ""); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	storm()
	if n := a.queries.Load() - start; n != 0 {
		t.Errorf("16,000 Allow+Report(Success) while closed and healthy sent %d statements, want 0", n)
	}
	if v := f.row("p").version; v != before {
		t.Errorf("version moved from %d to %d during the success storm", before, v)
	}
	// One fault begins a window; in it the successes are batched: one
	// write per FlushInterval (1s) at most, the first at once.
	report(t, a, "p", circuit.Failure, "transient", 1)
	began := time.Now()
	storm()
	flushes := 1 + int64(time.Since(began)/circuit.DefaultFlushInterval)
	r := f.row("p")
	if r.failures != 1 || r.successes < 1 || r.version < before+2 || r.version > before+1+flushes {
		t.Errorf("after a fault and a storm: %+v, want 1 failure, some successes, between 2 and %d writes", r, 1+flushes)
	}
}

// TestThrottlesNeverWrite: a relay that throttles is the send control's
// business; the breaker neither counts nor writes, however many throttles.
func TestThrottlesNeverWrite(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	a := f.worker("worker-a", []string{"p"}, circuit.Policy{}, false)
	before := f.row("p").version
	start := a.queries.Load()
	report(t, a, "p", circuit.Throttle, "throttled", 1000)
	if n := a.queries.Load() - start; n != 0 {
		t.Errorf("1,000 throttles sent %d statements, want 0", n)
	}
	if r := f.row("p"); r.version != before || r.state != "closed" || r.failures != 0 {
		t.Errorf("after 1,000 throttles: %+v, want closed, untouched at version %d", r, before)
	}
	if d, err := a.Allow(t.Context(), "p"); err != nil || !d.Allowed {
		t.Errorf("Allow after 1,000 throttles = %+v, %v; want allowed", d, err)
	}
}

// TestAnotherWorkersSuccessesKeepItClosed is the shared-count regression:
// worker B keeps sending through the relay while worker A meets faults. B's
// successes reach the shared row (batched) and keep A's faults from opening
// the circuit. Before, A's consecutive count only saw B's successes when B's
// stale cache happened to show failures, so A's five faults opened it.
func TestAnotherWorkersSuccessesKeepItClosed(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	p := circuit.Policy{RefreshInterval: 50 * time.Millisecond, FlushInterval: 50 * time.Millisecond}
	a := f.worker("worker-a", []string{"p"}, p, true)
	b := f.worker("worker-b", []string{"p"}, p, true)

	report(t, a, "p", circuit.Failure, "transient", 1) // begins the window
	testkit.Eventually(t, 3*time.Second, "B sees the window", func() bool { return b.snapshot(t, "p").Failures == 1 })
	// B sends 10 mails, spread past one flush interval.
	for range 10 {
		report(t, b, "p", circuit.Success, "", 1)
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(60 * time.Millisecond)
	report(t, b, "p", circuit.Success, "", 1)
	if r := f.row("p"); r.successes < 10 {
		t.Fatalf("after B's 11 successes: %+v, want at least 10 in the shared row", r)
	}
	// A's further faults: 9 in all against B's >= 10 successes.
	report(t, a, "p", circuit.Failure, "transient", 8)
	if r := f.row("p"); r.state != "closed" || r.failures != 9 {
		t.Errorf("after A's 9 faults beside B's successes: %+v, want closed with 9 failures", r)
	}
	if d, err := a.Allow(t.Context(), "p"); err != nil || !d.Allowed {
		t.Errorf("A: Allow = %+v, %v; want allowed while B's mail is accepted", d, err)
	}
}

// TestRefusingEverythingOpensAcrossWorkers: faults from two workers with no
// success anywhere add up in the shared window and open the circuit at the
// threshold, though neither worker met five.
func TestRefusingEverythingOpensAcrossWorkers(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	a := f.worker("worker-a", []string{"p"}, circuit.Policy{}, false)
	b := f.worker("worker-b", []string{"p"}, circuit.Policy{}, false)
	report(t, a, "p", circuit.Failure, "transient", 2)
	report(t, b, "p", circuit.TimeoutFailure, "transient", 2)
	if r := f.row("p"); r.state != "closed" || r.failures != 4 {
		t.Fatalf("after 4 faults: %+v, want closed with 4 failures", r)
	}
	report(t, a, "p", circuit.Failure, "transient", 1)
	if r := f.row("p"); r.state != "open" || r.failures != 5 || r.successes != 0 {
		t.Errorf("after 5 faults from two workers: %+v, want open with 5 failures, 0 successes", r)
	}
}

func TestChangedWakesWhenCooldownEnds(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	const base = 300 * time.Millisecond
	// A refresh far slower than the cooldown: the wake-up must come from
	// the cooldown timer, not from a refresh.
	a := f.worker("worker-a", []string{"p"}, circuit.Policy{BaseCooldown: base, RefreshInterval: time.Minute}, true)
	report(t, a, "p", circuit.AuthFailure, "auth", 1)
	ch := a.Changed()
	if a.AnyAllowed() {
		t.Fatal("AnyAllowed with the only circuit open = true")
	}
	at, ok := a.NextProbeAt()
	if s := a.snapshot(t, "p"); !ok || !at.Equal(s.OpenUntil) {
		t.Fatalf("NextProbeAt = %v, %v; want the open_until %v", at, ok, s.OpenUntil)
	}
	select {
	case <-ch:
	case <-time.After(3 * time.Second):
		t.Fatal("Changed not closed within 3s of a 300ms cooldown")
	}
	if !a.AnyAllowed() {
		t.Error("AnyAllowed after the cooldown = false")
	}
	d, err := a.Allow(t.Context(), "p")
	if err != nil || !d.Probe {
		t.Fatalf("Allow after the cooldown = %+v, %v; want the probe", d, err)
	}
	if a.AnyAllowed() {
		t.Error("AnyAllowed with our probe in flight = true, want false")
	}
	ch = a.Changed()
	report(t, a, "p", circuit.Success, "", 1)
	select {
	case <-ch:
	default:
		t.Error("Changed not closed by the probe's success")
	}
	if _, ok := a.NextProbeAt(); ok || !a.AnyAllowed() {
		t.Errorf("after closing: NextProbeAt ok = %v, AnyAllowed = %v; want false, true", ok, a.AnyAllowed())
	}
}

func TestReportRejects(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	a := f.worker("worker-a", []string{"p"}, circuit.Policy{}, false)
	if err := a.Report(t.Context(), "nope", circuit.Failure, "transient"); err == nil || !strings.Contains(err.Error(), "unknown relay") {
		t.Errorf("Report(unknown relay) = %v", err)
	}
	if err := a.Report(t.Context(), "p", circuit.SendResult(42), ""); err == nil || !strings.Contains(err.Error(), "invalid result") {
		t.Errorf("Report(invalid result) = %v", err)
	}
	if _, err := a.Allow(t.Context(), "nope"); err == nil {
		t.Error("Allow(unknown relay) succeeded")
	}
}
