package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/bench/relay"
	"github.com/postline/postline/internal/testenv"
)

// relaysOutput is the part of `postctl -o json relays` these tests read.
type relaysOutput struct {
	Relays []struct {
		Name    string `json:"name"`
		Breaker *struct {
			State string `json:"state"`
		} `json:"breaker"`
		FleetRate float64 `json:"fleet_rate"`
		Workers   []struct {
			WorkerID string   `json:"worker_id"`
			Stale    bool     `json:"stale"`
			Limit    int      `json:"limit"`
			Rate     *float64 `json:"rate"`
			RateCuts int      `json:"rate_cuts"`
			LastCut  *struct {
				Controller string `json:"controller"`
				Reason     string `json:"reason"`
			} `json:"last_cut"`
		} `json:"workers"`
	} `json:"relays"`
}

// relaysJSON runs `postctl -o json relays` against the stack without
// logging it (it is polled) and decodes it; its output must hold no
// secret.
func (s *failureStack) relaysJSON(ctx context.Context) (relaysOutput, error) {
	cmd := exec.CommandContext(ctx, postctlBin, "-o", "json", "relays",
		"--brokers", strings.Join(testenv.KafkaBrokers(), ","), "--database-url", s.dbURL)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	checkNoSecrets(s.t, "the output of postctl -o json relays", append(stdout.Bytes(), stderr.Bytes()...))
	var out relaysOutput
	if err != nil {
		return out, fmt.Errorf("postctl relays: %v: %s", err, redactSecrets(stderr.String()))
	}
	return out, json.Unmarshal(stdout.Bytes(), &out)
}

// TestPostctlRelaysShowsTheThrottlingRelayPaced runs a worker against two
// relays: "throttled" (priority 1, bench/relay taking 30 mails/s and
// answering 450 4.7.1 "rate limit exceeded" above that) and "mailpit"
// (priority 2, its URL holding the canary SMTP password). Once the relay has
// throttled, `postctl relays` shows it paced by the worker, with a rate cut
// whose reason names the 450 reply, its breaker closed, and the fleet's
// learned rate; it names both relays and prints no URL or password. When the
// worker stops cleanly its rows go: the relays are left with their breakers.
func TestPostctlRelaysShowsTheThrottlingRelayPaced(t *testing.T) {
	t.Parallel()
	const jobs = 400
	s := newFailureStack(t, fastTiers)
	r, err := relay.Start(relay.Config{Rate: 30, Burst: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	s.startScheduler("scheduler")
	relays := relayURL("throttled", r.Addr(), 1) + "," + relayURL("mailpit", s.mail.SMTPAddr(), 2)
	w := s.startFailWorker("worker-1", relays, map[string]string{"POSTLINE_SENDERS": "16"})
	s.publish(newJobs(jobs, "relays")...)

	var last relaysOutput
	deadline := time.Now().Add(90 * time.Second)
	for paced := false; !paced; {
		if time.Now().After(deadline) {
			t.Fatalf("postctl relays never showed the throttled relay paced with a rate cut; last: %+v", last)
		}
		time.Sleep(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		last, err = s.relaysJSON(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, rv := range last.Relays {
			if rv.Name != "throttled" {
				continue
			}
			for _, wv := range rv.Workers {
				paced = wv.WorkerID == "worker-1" && !wv.Stale && wv.Rate != nil && wv.RateCuts > 0 &&
					wv.LastCut != nil && wv.LastCut.Controller == "rate"
			}
		}
	}

	// The text the operator reads.
	out := s.postctl("relays")
	for _, want := range []string{"relay throttled: breaker closed; fleet learned rate ", "(1 of 1 live worker paced)",
		"relay mailpit: breaker closed", "worker-1", " 450"} {
		if !strings.Contains(out, want) {
			t.Errorf("postctl relays lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "smtp://") || strings.Contains(out, r.Addr()) || strings.Contains(out, s.mail.SMTPAddr()) {
		t.Errorf("postctl relays prints a relay's URL or address:\n%s", out)
	}
	throttled := strings.SplitN(out[strings.Index(out, "relay throttled"):], "\n\n", 2)[0]
	if !strings.Contains(throttled, "rate ") || !strings.Contains(throttled, " ago: ") || strings.Contains(throttled, "unpaced") {
		t.Errorf("the throttled relay's block shows no learned rate and rate cut:\n%s", throttled)
	}
	for _, rv := range last.Relays {
		for _, wv := range rv.Workers {
			if rv.Name == "throttled" {
				t.Logf("throttled relay: %s limit %d, rate %.1f/s, %d rate cuts, last cut %q; fleet %.1f/s",
					wv.WorkerID, wv.Limit, *wv.Rate, wv.RateCuts, wv.LastCut.Reason, rv.FleetRate)
				if !strings.Contains(wv.LastCut.Reason, "450") {
					t.Errorf("the rate cut's reason %q does not name the 450 reply", wv.LastCut.Reason)
				}
				if rv.FleetRate != *wv.Rate {
					t.Errorf("fleet learned rate %v, want the only worker's %v", rv.FleetRate, *wv.Rate)
				}
			}
		}
	}

	// A clean stop deletes the worker's rows at once.
	if code, _ := w.Terminate(); code != 0 {
		t.Errorf("worker exited %d, want 0", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	after, err := s.relaysJSON(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, rv := range after.Relays {
		names = append(names, rv.Name)
		if len(rv.Workers) != 0 || rv.Breaker == nil {
			t.Errorf("after the worker stopped, relay %s: breaker %+v, workers %+v; want its breaker and no worker", rv.Name, rv.Breaker, rv.Workers)
		}
	}
	if strings.Join(names, ",") != "mailpit,throttled" && strings.Join(names, ",") != "throttled,mailpit" {
		t.Errorf("after the worker stopped: relays %v, want throttled and mailpit", names)
	}
}
