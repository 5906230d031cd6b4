package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postline/postline/bench/relay"
)

// TestThrottlingRelayNeverOpensTheBreaker runs two workers with the default
// circuit settings (no POSTLINE_CIRCUIT_THRESHOLD override) against a relay
// that takes 100 mails/s (burst 20) and answers 450 4.7.1 "rate limit
// exceeded" above that, with 3,000 jobs. Throttling is not an outage: the
// send control learns the relay's rate, and the shared breaker, which opens
// only for a relay that is down or refuses everything, never opens (no
// transition of the relay's circuit on either worker, open never seen on
// /metrics). Throughput once the workers have learnt the rate is at least
// 85 % of the relay's. Before, throttles counted as provider faults and five
// in a row on one worker opened the circuit for the whole fleet for 30 s.
func TestThrottlingRelayNeverOpensTheBreaker(t *testing.T) {
	t.Parallel()
	const (
		rate  = 100.0
		burst = 20
		jobs  = 3000
	)
	s := newFailureStack(t, fastTiers)
	r, err := relay.Start(relay.Config{Rate: rate, Burst: burst}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	s.startScheduler("scheduler")
	relays := fmt.Sprintf("smtp://%s?name=relay&tls=none", r.Addr())
	// failEnv shortens the circuit settings for the failure suites; this
	// test puts the defaults back (cmd/worker/settings.go).
	defaults := map[string]string{
		"POSTLINE_CIRCUIT_COOLDOWN":     "30s",
		"POSTLINE_CIRCUIT_MAX_COOLDOWN": "1h",
		"POSTLINE_CIRCUIT_REFRESH":      "1s",
		"POSTLINE_SENDERS":              "16",
	}
	workers := []*workerProc{
		s.startFailWorker("worker-1", relays, defaults),
		s.startFailWorker("worker-2", relays, defaults),
	}
	eventually(t, readyTimeout, "both workers own partitions", func(ctx context.Context) (bool, string) {
		var status []string
		for _, w := range workers {
			parts, err := w.Metric(ctx, "postline_consumer_assigned_partitions")
			if err != nil || parts == 0 {
				return false, fmt.Sprintf("%s: %v partitions (%v)", w.name, parts, err)
			}
			status = append(status, fmt.Sprintf("%s: %v", w.name, parts))
		}
		return true, strings.Join(status, ", ")
	})

	// Sample the relay's accepted count, and both workers' view of the
	// circuit, until every job is sent.
	type sample struct {
		at       time.Time
		accepted int64
	}
	var (
		mu         sync.Mutex
		samples    []sample
		openSeen   []string
		wg         sync.WaitGroup
		stop       = make(chan struct{})
		lastMetric time.Time
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
				for _, w := range workers {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					v, err := w.Metric(ctx, "postline_circuit_state", "provider", "relay", "state", "closed")
					cancel()
					if err == nil && v != 1 {
						mu.Lock()
						openSeen = append(openSeen, fmt.Sprintf("%s at %d accepted", w.name, st.Accepted))
						mu.Unlock()
					}
				}
			}
		}
	})
	s.publish(newJobs(jobs, "throttle-breaker")...)
	s.waitSent(jobs, 4*time.Minute)
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
	if st.Accepted != jobs {
		t.Errorf("relay accepted %d mails, want exactly %d", st.Accepted, jobs)
	}
	// Throughput. The send control starts pacing at 0.7 x what one worker
	// saw accepted in its first second and then gains 2/s a second
	// (internal/adaptive), so the fleet ramps up over tens of seconds;
	// once it has learnt the relay's rate (the first second at 85 % of
	// it), it must hold 85 % until 90 % of the jobs are accepted (the last
	// ones come back through the delay topics at the scheduler's pace). A
	// breaker that opened would pause the fleet for 30 s in that stretch.
	perSecond := func(i int) int64 { return samples[i].accepted - samples[i-10].accepted }
	var from, to sample
	var curve []string
	for i := 10; i < len(samples); i++ {
		if i%10 == 0 {
			curve = append(curve, fmt.Sprint(perSecond(i)))
		}
		if from.at.IsZero() && float64(perSecond(i)) >= 0.85*rate {
			from = samples[i]
		}
		if to.at.IsZero() && samples[i].accepted >= jobs*9/10 {
			to = samples[i]
		}
	}
	t.Logf("accepted per second: %s", strings.Join(curve, " "))
	for _, w := range workers {
		t.Logf("%s: send rate %.1f/s, concurrency limit %v", w.name,
			w.mustMetric("postline_adaptive_send_rate", "provider", "relay"),
			w.mustMetric("postline_adaptive_concurrency_limit", "provider", "relay"))
	}
	if from.at.IsZero() || to.at.IsZero() || to.at.Sub(from.at) < 5*time.Second {
		t.Fatalf("no stretch of 5 s after the fleet reached 85%% of the relay's rate: reached at %+v, 90%% of the jobs at %+v", from, to)
	}
	var ramp time.Duration
	for _, sm := range samples {
		if sm.accepted > 0 {
			ramp = from.at.Sub(sm.at)
			break
		}
	}
	got := float64(to.accepted-from.accepted) / to.at.Sub(from.at).Seconds()
	t.Logf("relay: %d attempts, %d throttled, %d accepted; ramp %v; %.1f mails/s from %d to %d accepted over %v (relay rate %.0f/s)",
		st.Attempts(), st.Throttled, st.Accepted, ramp.Round(100*time.Millisecond), got, from.accepted, to.accepted,
		to.at.Sub(from.at).Round(time.Millisecond), rate)
	if got < 0.85*rate {
		t.Errorf("throughput %.1f mails/s once learnt, want at least 85%% of the relay's %.0f/s", got, rate)
	}
}
