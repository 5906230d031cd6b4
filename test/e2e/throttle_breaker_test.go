package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/postline/postline/bench/relay"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/internal/testkit"
)

// TestThrottlingRelayNeverOpensTheBreaker runs two workers with the settings
// a user gets (circuit breaker, pacing, retry tiers: no overrides beyond the
// stack's addresses) against a relay that takes 100 mails/s (a token bucket
// with a burst of 20) and answers 450 4.7.1 "rate limit exceeded" above that,
// with "451 4.3.0" on 3 % of messages and "550 5.1.1" for 1 % of recipients,
// fed 6,000 jobs (a window of about 45 s, so one pacing dip under CI load
// weighs less). (The benchmark's fleet200 scenario runs the same relay at
// 200 mails/s with 20,000 jobs; here the rate leaves room for the other tests
// sharing the machine's two cores.) Throttling is not an outage: the send
// control learns the relay's rate, and the shared breaker, which opens only
// for a relay that is down or refuses everything, never opens (no transition
// of the relay's circuit on either worker, open never seen on /metrics),
// although 451 4.3.0 is a fault of the relay's. From 10 s after the first
// acceptance until 90 % of the mail is accepted, the fleet holds at least
// 90 % of the relay's rate. Before, throttles counted as relay faults:
// five in a row on one worker opened the circuit for the whole fleet for
// 30 s, and the pacer took 20 s to climb back from a cut.
//
// Its figure is a rate, so it does not run in parallel with other tests
// (the two cores shared with another end-to-end test, the outcome loop's
// four processes say, dipped it below the bound once), and its workers are
// built without the race detector even under -race (plainWorkerBin): two
// instrumented workers beside the other packages' tests of make test were
// starved of CPU, offered the relay under 90 % of its rate and were refused
// only 21 times in 6,000 mails, a shortfall that was not the pacing's.
func TestThrottlingRelayNeverOpensTheBreaker(t *testing.T) {
	const (
		rate  = 100.0
		burst = 20
		jobs  = 6000
	)
	s := newFailureStack(t, retry.DefaultTiers.String())
	r, err := relay.Start(relay.Config{Rate: rate, Burst: burst, TransientReply: 0.03, PermanentReject: 0.01, Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	s.startScheduler("scheduler")
	relays := fmt.Sprintf("smtp://%s?name=relay&tls=none", r.Addr())
	// failEnv shortens the circuit settings and the senders for the
	// failure suites; this test puts the defaults back
	// (cmd/worker/settings.go).
	defaults := map[string]string{
		"POSTLINE_CIRCUIT_COOLDOWN":     "30s",
		"POSTLINE_CIRCUIT_MAX_COOLDOWN": "1h",
		"POSTLINE_CIRCUIT_REFRESH":      "1s",
		"POSTLINE_SENDERS":              "16",
	}
	bin, err := plainWorkerBin()
	if err != nil {
		t.Fatal(err)
	}
	var workers []*workerProc
	for _, name := range []string{"worker-1", "worker-2"} {
		w := startProcess(t, bin, name, s.failEnv(name, relays, defaults))
		w.WaitReady(readyTimeout)
		workers = append(workers, w)
	}
	waitOwnPartitions(t, workers...)

	// Sample the relay's accepted count, and both workers' view of the
	// circuit and their send control, until every job is sent.
	type sample struct {
		at       time.Time
		accepted int64
	}
	var (
		mu         sync.Mutex
		samples    []sample
		openSeen   []string
		controls   = make(map[string][]string) // per worker, one a second
		wg         sync.WaitGroup
		stop       = make(chan struct{})
		lastMetric time.Time
		lastTrace  time.Time
	)
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				st := r.Stats()
				mu.Lock()
				samples = append(samples, sample{now, st.Accepted})
				mu.Unlock()
				if now.Sub(lastMetric) < 500*time.Millisecond {
					continue
				}
				lastMetric = now
				second := now.Sub(lastTrace) >= time.Second
				if second {
					lastTrace = now
				}
				for _, w := range workers {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					fams, err := w.families(ctx)
					cancel()
					if err != nil {
						continue
					}
					v, err := metricSum(fams, w.name, "postline_circuit_state", "provider", "relay", "state", "closed")
					if err == nil && v != 1 {
						mu.Lock()
						openSeen = append(openSeen, fmt.Sprintf("%s at %d accepted", w.name, st.Accepted))
						mu.Unlock()
					}
					if second {
						mu.Lock()
						controls[w.name] = append(controls[w.name], sendControl(fams, w.name))
						mu.Unlock()
					}
				}
			}
		}
	})
	s.publish(newJobs(jobs, "throttle-breaker")...)
	testkit.Eventually(t, 4*time.Minute, fmt.Sprintf("%d jobs sent or failed", jobs), func(ctx context.Context) (bool, string) {
		counts, err := s.statusCounts(ctx)
		if err != nil {
			return false, err.Error()
		}
		return counts["sent"]+counts["failed"] >= jobs, fmt.Sprintf("rows by status %v", counts)
	})
	close(stop)
	wg.Wait()

	for _, w := range workers {
		for _, to := range []string{"open", "half_open", "closed"} {
			if v := w.mustMetric("postline_circuit_transitions_total", "provider", "relay", "to", to); v != 0 {
				t.Errorf("%s wrote %v transitions of the relay's circuit to %s, want 0: throttling is not an outage", w.name, v, to)
			}
		}
	}
	if len(openSeen) > 0 {
		t.Errorf("the relay's circuit was not closed on /metrics %d times (first %v), want never", len(openSeen), openSeen[:min(3, len(openSeen))])
	}

	st := r.Stats()
	counts, err := s.statusCounts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Accepted != int64(counts["sent"]) || counts["sent"]+counts["failed"] != jobs || counts["failed"] > jobs/50 {
		t.Errorf("relay accepted %d mails; rows %v; want every job sent or failed (1 %% of recipients rejected), the relay's count equal to the sent rows", st.Accepted, counts)
	}
	// Throughput, from 10 s after the first acceptance until 90 % of the
	// accepted mail: in the last tenth one worker's partitions run dry
	// before the other's (keys do not split evenly; the other worker takes
	// the whole relay at the next lag refresh) and the last jobs come back
	// from delay tiers at the scheduler's pace. A breaker that opened would
	// pause the whole fleet for 30 s inside the window.
	var first, from, to sample
	var curve []string
	for i, sm := range samples {
		if i >= 10 && i%10 == 0 {
			curve = append(curve, fmt.Sprint(sm.accepted-samples[i-10].accepted))
		}
		switch {
		case first.at.IsZero() && sm.accepted > 0:
			first = sm
		case !first.at.IsZero() && from.at.IsZero() && sm.at.Sub(first.at) >= 10*time.Second:
			from = sm
		}
		if to.at.IsZero() && sm.accepted >= st.Accepted*90/100 {
			to = sm
		}
	}
	t.Logf("accepted per second: %s", strings.Join(curve, " "))
	for _, w := range workers {
		t.Logf("%s: send rate %.1f/s, concurrency limit %v; each second, rate/limit/in flight/cuts/lag: %s", w.name,
			w.mustMetric("postline_adaptive_send_rate", "provider", "relay"),
			w.mustMetric("postline_adaptive_concurrency_limit", "provider", "relay"),
			strings.Join(controls[w.name], " "))
	}
	if from.at.IsZero() || to.at.Sub(from.at) < 5*time.Second {
		t.Fatalf("no stretch of 5 s from 10 s after the first acceptance (%+v) to 90 %% of the mail (%+v)", from, to)
	}
	got := float64(to.accepted-from.accepted) / to.at.Sub(from.at).Seconds()
	t.Logf("relay: %d attempts, %d throttled, %d accepted; %.1f mails/s from %d to %d accepted over %v (relay rate %.0f/s)",
		st.Attempts(), st.Throttled, st.Accepted, got, from.accepted, to.accepted, to.at.Sub(from.at).Round(time.Millisecond), rate)
	if got < 0.90*rate {
		t.Errorf("throughput %.1f mails/s from 10 s on, want at least 90%% of the relay's %.0f/s", got, rate)
	}
}

// sendControl is one worker's send control toward the relay in fams, for
// the log: its learned rate, concurrency limit, records in flight, cuts so
// far and the group's lag as it last saw it.
func sendControl(fams map[string]*dto.MetricFamily, worker string) string {
	get := func(name string, labels ...string) string {
		v, err := metricSum(fams, worker, name, labels...)
		if err != nil {
			return "?"
		}
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return get("postline_adaptive_send_rate", "provider", "relay") + "/" +
		get("postline_adaptive_concurrency_limit", "provider", "relay") + "/" +
		get("postline_consumer_in_flight") + "/" +
		get("postline_adaptive_decreases_total", "provider", "relay") + "/" +
		get("postline_adaptive_lag")
}
