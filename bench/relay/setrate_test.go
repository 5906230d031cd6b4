package relay_test

import (
	"math"
	"testing"
	"time"

	"github.com/postline/postline/bench/relay"
	"github.com/postline/postline/internal/failure"
)

// sendN calls send n times and returns how many were accepted and the
// retry hint of the last throttle reply (0 if none).
func sendN(t *testing.T, send func(int) error, n int) (ok int, hint time.Duration) {
	t.Helper()
	for i := range n {
		err := send(i)
		if err == nil {
			ok++
			continue
		}
		code, enh, text := reply(err)
		h, parsed := failure.ParseRetryAfter(text)
		if code != 450 || enh != "4.7.1" || !parsed {
			t.Fatalf("send %d: %v, want accepted or a 450 4.7.1 with a hint", i, err)
		}
		hint = h
	}
	return ok, hint
}

// TestSetRate changes the bucket of a running relay and checks that each
// rate holds from the moment it is set, that the throttle hint follows the
// new rate, that 0 lifts the limit, and that the changes are recorded.
func TestSetRate(t *testing.T) {
	r := start(t, relay.Config{Rate: 2, Burst: 2})
	c := dial(t, r)
	next := 0
	sendTo := func(int) error { next++; return send(c, rcpt(next)) }

	if ok, hint := sendN(t, sendTo, 3); ok != 2 || hint != time.Second {
		t.Fatalf("2/s burst 2: %d of 3 accepted, hint %v; want 2 and 1s", ok, hint)
	}
	// Faster: the bucket refills at 1000/s up to 50 tokens.
	if err := r.SetRate(1000, 50); err != nil {
		t.Fatal(err)
	}
	time.Sleep(80 * time.Millisecond) // lets the faster bucket fill; 80 ms at 1000/s is 80 tokens, capped at 50
	if ok, _ := sendN(t, sendTo, 30); ok != 30 {
		t.Errorf("after SetRate(1000, 50): %d of 30 accepted, want all", ok)
	}
	// Slower: the bucket is capped at the new burst of 1, refilled every 2 s.
	if err := r.SetRate(0.5, 1); err != nil {
		t.Fatal(err)
	}
	if ok, hint := sendN(t, sendTo, 3); ok != 1 || hint != 2*time.Second {
		t.Errorf("after SetRate(0.5, 1): %d of 3 accepted, hint %v; want 1 and 2s", ok, hint)
	}
	// Unlimited.
	if err := r.SetRate(0, 0); err != nil {
		t.Fatal(err)
	}
	if ok, _ := sendN(t, sendTo, 20); ok != 20 {
		t.Errorf("after SetRate(0, 0): %d of 20 accepted, want all", ok)
	}
	st := r.Stats()
	if len(st.RateChanges) != 3 || st.RateChanges[1].Rate != 0.5 || st.RateChanges[1].Burst != 1 || st.RateChanges[2].Rate != 0 {
		t.Errorf("RateChanges = %+v, want (1000, 50), (0.5, 1), (0, 0)", st.RateChanges)
	}
	if int64(len(st.ThrottledAt)) != st.Throttled || st.Throttled != 3 {
		t.Errorf("Throttled %d with %d times, want 3 and 3", st.Throttled, len(st.ThrottledAt))
	}
	// Reset goes back to the Config's 2/s, burst 2.
	r.Reset()
	if ok, _ := sendN(t, sendTo, 3); ok != 2 {
		t.Errorf("after Reset: %d of 3 accepted, want the Config's burst of 2", ok)
	}
}

// TestSetRateFromUnlimited limits a relay that started without a rate: it
// gets a full bucket of the new burst.
func TestSetRateFromUnlimited(t *testing.T) {
	r := start(t, relay.Config{})
	c := dial(t, r)
	if err := r.SetRate(0.5, 3); err != nil {
		t.Fatal(err)
	}
	next := 0
	if ok, hint := sendN(t, func(int) error { next++; return send(c, rcpt(next)) }, 5); ok != 3 || hint != 2*time.Second {
		t.Errorf("unlimited, then SetRate(0.5, 3): %d of 5 accepted, hint %v; want 3 and 2s", ok, hint)
	}
}

func TestSetRateRejectsBadArguments(t *testing.T) {
	r := start(t, relay.Config{Rate: 10})
	for _, tt := range []struct {
		rate  float64
		burst int
	}{{-1, 1}, {10, 0}, {math.NaN(), 1}, {math.Inf(1), 1}} {
		if err := r.SetRate(tt.rate, tt.burst); err == nil {
			t.Errorf("SetRate(%v, %d) accepted", tt.rate, tt.burst)
		}
	}
	if st := r.Stats(); len(st.RateChanges) != 0 {
		t.Errorf("rejected calls were recorded: %+v", st.RateChanges)
	}
}

// TestTransientReply sends many messages over one connection to a relay
// that answers a share of them 451 4.3.0 at the end of DATA: the share is
// the config's, the reply is transient to the failure package, the
// connection stays usable, and the counters add up.
func TestTransientReply(t *testing.T) {
	const n = 600
	cfg := relay.Config{TransientReply: 0.1, Seed: 3}
	r := start(t, cfg)
	c := dial(t, r)
	replied := 0
	for i := range n {
		err := send(c, rcpt(i))
		if err == nil {
			continue
		}
		code, enh, text := reply(err)
		if code != 451 || enh != "4.3.0" || !hasPrefix(err, "end of data:") {
			t.Fatalf("send %d: %v, want accepted or 451 4.3.0 at the end of DATA", i, err)
		}
		if v := failure.ClassifyReply(code, enh, text); v.Class != failure.Transient {
			t.Errorf("451 %q classified %s, want transient", text, v.Class)
		}
		replied++
	}
	withinBinomial(t, "transient replies", replied, n, cfg.TransientReply)
	st := r.Stats()
	if st.Connections != 1 || st.TransientReplies != int64(replied) || st.Accepted != int64(n-replied) ||
		st.Deferred() != int64(replied) || st.Attempts() != n {
		t.Errorf("Stats %+v: want 1 connection, %d replies, %d accepted, %d attempts", st, replied, n-replied, n)
	}
}

// TestTransientReplyKeepsDrops checks that adding transient replies to a
// config leaves its drops where they were: one draw per transaction.
func TestTransientReplyKeepsDrops(t *testing.T) {
	const n = 300
	run := func(cfg relay.Config) (drops, replies []int) {
		r := start(t, cfg)
		c := dial(t, r)
		for i := range n {
			err := send(c, rcpt(i))
			switch code, _, _ := reply(err); {
			case err == nil:
			case code == 421:
				drops = append(drops, i)
				_ = c.Close()
				c = dial(t, r)
			case code == 451:
				replies = append(replies, i)
			default:
				t.Fatalf("send %d: %v", i, err)
			}
		}
		return drops, replies
	}
	onlyDrops, none := run(relay.Config{TransientDrop: 0.1, Seed: 11})
	drops, replies := run(relay.Config{TransientDrop: 0.1, TransientReply: 0.1, Seed: 11})
	if len(none) != 0 || len(onlyDrops) == 0 || len(replies) == 0 {
		t.Fatalf("%d drops and %d replies without replies configured; %d replies with", len(onlyDrops), len(none), len(replies))
	}
	if len(drops) != len(onlyDrops) {
		t.Fatalf("drops at %v with replies, %v without", drops, onlyDrops)
	}
	for i := range drops {
		if drops[i] != onlyDrops[i] {
			t.Fatalf("drops at %v with replies, %v without", drops, onlyDrops)
		}
	}
}
