package relay_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/emersion/go-smtp"

	"github.com/postline/postline/bench/relay"
	"github.com/postline/postline/internal/failure"
)

// outcome is what one send got.
type outcome int

const (
	accepted outcome = iota
	droppedTx
	rejected
	other
)

// sendAll sends one message to each recipient over client, redialling
// after the relay hangs up, and returns each send's outcome.
func sendAll(t *testing.T, r *relay.Relay, to []string) []outcome {
	t.Helper()
	out := make([]outcome, len(to))
	var c *smtp.Client
	defer func() {
		if c != nil {
			_ = c.Close()
		}
	}()
	for i, addr := range to {
		if c == nil {
			var err error
			if c, err = tryDial(r); err != nil {
				t.Errorf("dial: %v", err)
				return out
			}
		}
		err := send(c, addr)
		code, enh, text := reply(err)
		switch {
		case err == nil:
			out[i] = accepted
		case code == 421 && enh == "4.4.2" && hasPrefix(err, "end of data:"):
			out[i] = droppedTx
			if v := failure.ClassifyReply(code, enh, text); v.Class != failure.Transient {
				t.Errorf("drop %q classified %s, want transient", text, v.Class)
			}
		case code == 550 && enh == "5.1.1" && hasPrefix(err, "rcpt:"):
			out[i] = rejected
		default:
			out[i] = other
			t.Errorf("send to %s: unexpected %v", addr, err)
		}
		if err != nil && dropped(err) {
			_ = c.Close()
			c = nil
		}
	}
	return out
}

// TestFaultShares sends many messages from several connections and checks
// that the drop and reject shares are what the config says, that exactly
// the addresses Rejects names are rejected, and that the counters add up.
func TestFaultShares(t *testing.T) {
	const (
		workers = 4
		each    = 600
		n       = workers * each
	)
	cfg := relay.Config{TransientDrop: 0.05, PermanentReject: 0.1, Seed: 42}
	r := start(t, cfg)

	results := make([][]outcome, workers)
	var wg sync.WaitGroup
	for w := range workers {
		to := make([]string, each)
		for i := range to {
			to[i] = rcpt(w*each + i)
		}
		wg.Go(func() { results[w] = sendAll(t, r, to) })
	}
	wg.Wait()

	counts := map[outcome]int{}
	dials := 0 // a worker redials after each drop but its last send
	for w, res := range results {
		dials++
		for i, o := range res {
			counts[o]++
			if o == droppedTx && i < len(res)-1 {
				dials++
			}
			if addr := rcpt(w*each + i); (o == rejected) != cfg.Rejects(addr) {
				t.Errorf("%s: outcome %d, Rejects says %v", addr, o, cfg.Rejects(addr))
			}
		}
	}
	withinBinomial(t, "rejected recipients", counts[rejected], n, cfg.PermanentReject)
	// Drops are decided for the transactions that got past RCPT.
	withinBinomial(t, "dropped transactions", counts[droppedTx], counts[accepted]+counts[droppedTx], cfg.TransientDrop)

	st := r.Stats()
	if st.Accepted != int64(counts[accepted]) || st.TransientDrops != int64(counts[droppedTx]) ||
		st.PermanentRejects != int64(counts[rejected]) || st.Attempts() != n || st.Throttled != 0 {
		t.Errorf("Stats %+v do not match the client's counts %v (n=%d)", st, counts, n)
	}
	// Each drop closes the connection.
	if st.Connections != int64(dials) {
		t.Errorf("Connections = %d, want %d (one per worker, one more after each drop)", st.Connections, dials)
	}
	t.Logf("accepted %d, dropped %d, rejected %d of %d", counts[accepted], counts[droppedTx], counts[rejected], n)
}

// TestPermanentRejectIsSticky checks that a rejected recipient is rejected
// again on every retry, on new connections and after Reset, and that
// an accepted one stays accepted.
func TestPermanentRejectIsSticky(t *testing.T) {
	cfg := relay.Config{PermanentReject: 0.5, Seed: 7}
	var bad, good string
	for i := 0; bad == "" || good == ""; i++ {
		if cfg.Rejects(rcpt(i)) {
			bad = rcpt(i)
		} else {
			good = rcpt(i)
		}
	}
	r := start(t, cfg)
	for attempt := range 4 {
		if attempt == 2 {
			r.Reset()
		}
		got := sendAll(t, r, []string{bad, good, bad})
		if !slices.Equal(got, []outcome{rejected, accepted, rejected}) {
			t.Errorf("attempt %d: outcomes %v, want rejected, accepted, rejected", attempt+1, got)
		}
	}
	if st := r.Stats(); st.PermanentRejects != 4 || st.Accepted != 2 {
		t.Errorf("after Reset: rejects %d accepted %d, want 4 2", st.PermanentRejects, st.Accepted)
	}
}

// TestDropsAreReproducible checks that a fixed seed gives the same drops to
// the same sequence of transactions, after Reset and in a new relay.
func TestDropsAreReproducible(t *testing.T) {
	cfg := relay.Config{TransientDrop: 0.2, Seed: 99}
	to := make([]string, 200)
	for i := range to {
		to[i] = rcpt(i)
	}
	r := start(t, cfg)
	first := sendAll(t, r, to)
	r.Reset()
	if st := r.Stats(); st.Attempts() != 0 || len(st.AcceptedAt) != 0 {
		t.Errorf("Stats after Reset = %+v, want zero counts", st)
	}
	again := sendAll(t, r, to)
	fresh := sendAll(t, start(t, cfg), to)
	if !slices.Equal(first, again) || !slices.Equal(first, fresh) {
		t.Errorf("drops differ between runs with seed %d", cfg.Seed)
	}
	other := sendAll(t, start(t, relay.Config{TransientDrop: 0.2, Seed: 100}), to)
	if slices.Equal(first, other) {
		t.Error("seeds 99 and 100 drop the same transactions")
	}
	if n := slices.Index(first, droppedTx); n < 0 {
		t.Error("no drop in 200 transactions at 20%")
	}
}
