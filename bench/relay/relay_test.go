package relay_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/postline/postline/bench/relay"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/testkit"
)

func TestConfig(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		c := relay.Config{Rate: 12.5}.WithDefaults()
		want := relay.Config{
			Addr: relay.DefaultAddr, Rate: 12.5, Burst: 13,
			ThrottleCode: 450, ThrottleEnhanced: "4.7.1", ThrottleText: relay.DefaultThrottleText,
			ThrottleAt: relay.AtRcpt, Domain: relay.DefaultDomain, IdleTimeout: relay.DefaultIdleTimeout,
			TransientReplyCode: 451, TransientReplyEnhanced: "4.3.0", TransientReplyText: relay.DefaultTransientReplyText,
		}
		if c != want {
			t.Errorf("WithDefaults = %+v, want %+v", c, want)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("Validate: %v", err)
		}
		if b := (relay.Config{Rate: 0.2}).WithDefaults().Burst; b != 1 {
			t.Errorf("Burst for Rate 0.2 = %d, want 1", b)
		}
		if b := (relay.Config{}).WithDefaults().Burst; b != 0 {
			t.Errorf("Burst without a rate = %d, want 0", b)
		}
	})

	tests := []struct {
		name  string
		cfg   relay.Config
		field string // "" = valid
	}{
		{"zero", relay.Config{}, ""},
		{"localhost", relay.Config{Addr: "localhost:0"}, ""},
		{"ipv6 loopback", relay.Config{Addr: "[::1]:0"}, ""},
		{"data stage, lower case", relay.Config{ThrottleAt: "data"}, ""},
		{"5xx throttle", relay.Config{ThrottleCode: 550, ThrottleEnhanced: "5.7.1", ThrottleText: "Temporary rate limit"}, ""},
		{"no port", relay.Config{Addr: "127.0.0.1"}, "Addr"},
		{"not loopback", relay.Config{Addr: "0.0.0.0:2525"}, "Addr"},
		{"negative rate", relay.Config{Rate: -1}, "Rate"},
		{"negative burst", relay.Config{Rate: 10, Burst: -1}, "Burst"},
		{"negative conns", relay.Config{MaxConns: -1}, "MaxConns"},
		{"negative hang-up", relay.Config{HangUpAbove: -5}, "HangUpAbove"},
		{"2xx throttle", relay.Config{ThrottleCode: 250}, "ThrottleCode"},
		{"enhanced of another class", relay.Config{ThrottleCode: 550}, "ThrottleEnhanced"},
		{"bad enhanced", relay.Config{ThrottleEnhanced: "4.7"}, "ThrottleEnhanced"},
		{"text with a line break", relay.Config{ThrottleText: "slow\r\n250 ok"}, "ThrottleText"},
		{"unknown stage", relay.Config{ThrottleAt: "MAIL"}, "ThrottleAt"},
		{"drop above 1", relay.Config{TransientDrop: 1.5}, "TransientDrop"},
		{"negative reject", relay.Config{PermanentReject: -0.1}, "PermanentReject"},
		{"transient reply", relay.Config{TransientReply: 0.03, TransientDrop: 0.01}, ""},
		{"drop and reply above 1", relay.Config{TransientReply: 0.6, TransientDrop: 0.5}, "TransientReply"},
		{"5xx transient reply", relay.Config{TransientReplyCode: 550}, "TransientReplyCode"},
		{"transient reply enhanced of another class", relay.Config{TransientReplyEnhanced: "5.3.0"}, "TransientReplyEnhanced"},
		{"transient reply text with a line break", relay.Config{TransientReplyText: "a\nb"}, "TransientReplyText"},
		{"domain with space", relay.Config{Domain: "a b"}, "Domain"},
		{"negative idle", relay.Config{IdleTimeout: -time.Second}, "IdleTimeout"},
		{"reply delay", relay.Config{ReplyDelay: 5 * time.Millisecond}, ""},
		{"negative reply delay", relay.Config{ReplyDelay: -time.Millisecond}, "ReplyDelay"},
		{"round trip delay and pipelining", relay.Config{RoundTripDelay: 5 * time.Millisecond, Pipelining: true}, ""},
		{"negative round trip delay", relay.Config{RoundTripDelay: -time.Millisecond}, "RoundTripDelay"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.WithDefaults().Validate()
			switch {
			case tt.field == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.field != "" && (err == nil || !strings.Contains(err.Error(), tt.field)):
				t.Errorf("Validate = %v, want an error naming %s", err, tt.field)
			}
			if tt.field != "" {
				if _, err := relay.Start(tt.cfg, nil); err == nil {
					t.Error("Start accepted an invalid config")
				}
			}
		})
	}
}

func TestRejects(t *testing.T) {
	cfg := relay.Config{PermanentReject: 0.1, Seed: 42}
	const n = 20000
	k := 0
	for i := range n {
		if cfg.Rejects(rcpt(i)) {
			k++
		}
	}
	withinBinomial(t, "rejected addresses", k, n, cfg.PermanentReject)

	same, other := 0, relay.Config{PermanentReject: 0.1, Seed: 43}
	for i := range 1000 {
		a := rcpt(i)
		if cfg.Rejects(a) != cfg.Rejects(a) {
			t.Fatalf("Rejects(%s) is not deterministic", a)
		}
		if cfg.Rejects(a) != cfg.Rejects("<"+strings.ToUpper(a)+">") {
			t.Errorf("Rejects(%s) depends on case or angle brackets", a)
		}
		if cfg.Rejects(a) && other.Rejects(a) {
			same++
		}
	}
	if same > 40 { // independent choices overlap in about 1% of 1000
		t.Errorf("seeds 42 and 43 reject %d of the same addresses: the seed does not matter", same)
	}
	for _, share := range []float64{0, 1} {
		c := relay.Config{PermanentReject: share}
		if got := c.Rejects("a@example.com"); got != (share == 1) {
			t.Errorf("Rejects with share %v = %v", share, got)
		}
	}
}

func TestStatsHelpers(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	tests := []struct {
		name  string
		times []time.Time
		width time.Duration
		want  []int
	}{
		{"empty", nil, time.Second, nil},
		{"zero width", at(1), 0, nil},
		{"one bucket", at(0, 10, 999), time.Second, []int{3}},
		{"gaps", at(0, 1000, 1001, 3500), time.Second, []int{1, 2, 0, 1}},
		{"half seconds", at(0, 499, 500, 1200), 500 * time.Millisecond, []int{2, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := relay.Stats{Since: t0, AcceptedAt: tt.times}.AcceptedPer(tt.width)
			if len(got) != len(tt.want) {
				t.Fatalf("AcceptedPer = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("AcceptedPer = %v, want %v", got, tt.want)
				}
			}
		})
	}
	s := relay.Stats{Accepted: 5, Throttled: 4, TransientDrops: 3, Refused: 2, HungUp: 1, PermanentRejects: 6}
	if s.Deferred() != 10 || s.Attempts() != 21 {
		t.Errorf("Deferred, Attempts = %d, %d, want 10, 21", s.Deferred(), s.Attempts())
	}
}

// TestRateIsEnforced offers three times the relay's rate for about a second
// from four connections and checks that the bucket lets through Burst plus
// Rate per second, and that every other message gets the throttle reply
// with a retry hint the failure package understands.
func TestRateIsEnforced(t *testing.T) {
	const (
		rateR   = 100.0
		burst   = 10
		conns   = 4
		offered = 300 // 3x rateR over one second
	)
	r := start(t, relay.Config{Rate: rateR, Burst: burst})

	type tally struct {
		ok, throttled int
		badReplies    []string
	}
	results := make([]tally, conns)
	interval := time.Second * conns / offered
	var wg sync.WaitGroup
	begin := time.Now()
	for w := range conns {
		c := dial(t, r)
		wg.Go(func() {
			tick := time.NewTicker(interval)
			defer tick.Stop()
			res := &results[w]
			for i := range offered / conns {
				if i > 0 {
					<-tick.C // paces the offered load; not waiting for a condition
				}
				err := send(c, rcpt(w*1000+i))
				if err == nil {
					res.ok++
					continue
				}
				code, enh, text := reply(err)
				hint, ok := failure.ParseRetryAfter(text)
				if code != 450 || enh != "4.7.1" || !hasPrefix(err, "rcpt:") || !ok || hint < time.Second {
					res.badReplies = append(res.badReplies, err.Error())
					continue
				}
				if v := failure.ClassifyReply(code, enh, text); v.Class != failure.Throttled {
					res.badReplies = append(res.badReplies, "class "+string(v.Class)+": "+err.Error())
				}
				res.throttled++
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)

	var ok, throttled int
	for _, res := range results {
		ok += res.ok
		throttled += res.throttled
		for _, b := range res.badReplies {
			t.Errorf("unexpected reply: %s", b)
		}
	}
	if ok+throttled != offered {
		t.Errorf("accepted %d + throttled %d != offered %d", ok, throttled, offered)
	}
	// The bucket never lets more through than Burst + Rate*elapsed; with
	// three times the rate offered it stays empty, so not much fewer either.
	upper := burst + rateR*elapsed.Seconds()
	if float64(ok) > upper+1 || float64(ok) < 0.9*upper-3 {
		t.Errorf("accepted %d in %s, want about %.0f (Burst %d + Rate %.0f/s)", ok, elapsed.Round(time.Millisecond), upper, burst, rateR)
	}
	st := r.Stats()
	if st.Accepted != int64(ok) || st.Throttled != int64(throttled) || st.Attempts() != offered || len(st.AcceptedAt) != ok {
		t.Errorf("Stats = accepted %d throttled %d attempts %d times %d, want %d %d %d %d",
			st.Accepted, st.Throttled, st.Attempts(), len(st.AcceptedAt), ok, throttled, offered, ok)
	}
	if st.PeakOpen != conns || st.Connections != conns {
		t.Errorf("PeakOpen %d, Connections %d, want %d", st.PeakOpen, st.Connections, conns)
	}
	t.Logf("accepted %d, throttled %d in %s; per 250 ms: %v", ok, throttled, elapsed.Round(time.Millisecond), st.AcceptedPer(250*time.Millisecond))
}

// TestThrottleReply checks the reply to an empty bucket at either stage,
// and that a retry after the advertised time is accepted.
func TestThrottleReply(t *testing.T) {
	tests := []struct {
		name   string
		cfg    relay.Config
		prefix string // the client step that failed
		code   int
		enh    string
		hint   time.Duration
	}{
		{"at RCPT", relay.Config{Rate: 0.5, Burst: 1}, "rcpt:", 450, "4.7.1", 2 * time.Second},
		{"at DATA", relay.Config{Rate: 1, Burst: 1, ThrottleAt: relay.AtData}, "end of data:", 450, "4.7.1", time.Second},
		{"custom reply", relay.Config{Rate: 0.25, Burst: 1, ThrottleCode: 421, ThrottleEnhanced: "4.7.0",
			ThrottleText: "Too many messages, wait {seconds} seconds"}, "rcpt:", 421, "4.7.0", 4 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := start(t, tt.cfg)
			c := dial(t, r)
			if err := send(c, "a@example.com"); err != nil {
				t.Fatalf("first send: %v", err)
			}
			err := send(c, "b@example.com")
			code, enh, text := reply(err)
			if !hasPrefix(err, tt.prefix) || code != tt.code || enh != tt.enh {
				t.Fatalf("second send = %v, want %s %d %s", err, tt.prefix, tt.code, tt.enh)
			}
			if hint, ok := failure.ParseRetryAfter(text); !ok || hint != tt.hint {
				t.Errorf("hint in %q = %s, %v, want %s", text, hint, ok, tt.hint)
			}
			st := r.Stats()
			if st.Accepted != 1 || st.Throttled != 1 {
				t.Errorf("Stats accepted %d throttled %d, want 1 1", st.Accepted, st.Throttled)
			}
		})
	}
}

// TestMaxConns checks that the connection after the first C is answered
// 421 4.7.0 at the greeting and closed, and that a slot frees up when a
// connection closes.
func TestMaxConns(t *testing.T) {
	const limit = 2
	r := start(t, relay.Config{MaxConns: limit})
	c1 := dial(t, r)
	dial(t, r)

	_, err := tryDial(r)
	code, enh, text := reply(err)
	if code != 421 || enh != "4.7.0" || !strings.Contains(text, "too many connections") {
		t.Fatalf("connection %d got %v, want 421 4.7.0 too many connections", limit+1, err)
	}
	if v := failure.ClassifyReply(code, enh, text); v.Class != failure.Throttled {
		t.Errorf("greeting refusal classified %s, want throttled", v.Class)
	}
	st := r.Stats()
	if st.Refused != 1 || st.Connections != 3 || st.Open != 2 || st.PeakOpen != 2 {
		t.Errorf("Stats refused %d connections %d open %d peak %d, want 1 3 2 2", st.Refused, st.Connections, st.Open, st.PeakOpen)
	}

	if err := c1.Quit(); err != nil {
		t.Fatalf("quit: %v", err)
	}
	testkit.Eventually(t, 5*time.Second, "the relay to see the connection close", func() bool { return r.Stats().Open == 1 })
	c3 := dial(t, r)
	if err := send(c3, "a@example.com"); err != nil {
		t.Fatalf("send on a freed slot: %v", err)
	}
	if st := r.Stats(); st.Refused != 1 || st.Accepted != 1 || st.Attempts() != 2 {
		t.Errorf("Stats refused %d accepted %d attempts %d, want 1 1 2", st.Refused, st.Accepted, st.Attempts())
	}
}

// TestHangUpAbove checks Postfix's scenario: connections get in, the
// oldest HangUpAbove are served, and a younger one is hung up on at MAIL.
func TestHangUpAbove(t *testing.T) {
	const limit = 2
	r := start(t, relay.Config{HangUpAbove: limit})
	c1, c2, c3 := dial(t, r), dial(t, r), dial(t, r)
	if st := r.Stats(); st.Open != 3 || st.Refused != 0 {
		t.Fatalf("open %d refused %d, want 3 0: HangUpAbove must not refuse at the greeting", st.Open, st.Refused)
	}
	if err := send(c1, rcpt(1)); err != nil {
		t.Errorf("the oldest connection, with 3 open: %v", err)
	}

	err := send(c3, rcpt(3))
	code, enh, text := reply(err)
	if !hasPrefix(err, "mail:") || code != 421 || enh != "4.7.0" || !strings.Contains(text, "too many connections") {
		t.Fatalf("MAIL on the youngest of 3 = %v, want 421 4.7.0 too many connections at MAIL", err)
	}
	if err := c3.Noop(); err == nil {
		t.Error("the hung-up connection still answers")
	}
	testkit.Eventually(t, 5*time.Second, "the hung-up connection to close", func() bool { return r.Stats().Open == limit })
	if err := send(c2, rcpt(2)); err != nil {
		t.Errorf("send on connection 2 with %d open: %v", limit, err)
	}
	st := r.Stats()
	if st.HungUp != 1 || st.Accepted != 2 || st.PeakOpen != 3 || st.Attempts() != 3 {
		t.Errorf("Stats hung up %d accepted %d peak %d attempts %d, want 1 2 3 3", st.HungUp, st.Accepted, st.PeakOpen, st.Attempts())
	}
}

// TestAcceptedIDs checks that the relay notes the Message-ID of each
// accepted message, in order and without angle brackets, and "" for a
// message without one or with a header it cannot parse.
func TestAcceptedIDs(t *testing.T) {
	r := start(t, relay.Config{})
	c := dial(t, r)
	bodies := []struct {
		body string
		want string
	}{
		{"Message-ID: <a1@postline.test>\r\nSubject: one\r\n\r\nhello\r\n", "a1@postline.test"},
		{"Subject: two\r\nMessage-Id:  <b2@postline.test> \r\n\r\nhello\r\n", "b2@postline.test"},
		{"Subject: no id\r\n\r\nhello\r\n", ""},
		{"not a header line\r\n\r\nhello\r\n", ""},
	}
	for i, b := range bodies {
		if err := c.SendMail("sender@example.com", []string{rcpt(i)}, strings.NewReader(b.body)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	st := r.Stats()
	if len(st.AcceptedIDs) != len(bodies) || len(st.AcceptedAt) != len(bodies) {
		t.Fatalf("AcceptedIDs %q, %d times; want %d of each", st.AcceptedIDs, len(st.AcceptedAt), len(bodies))
	}
	for i, b := range bodies {
		if st.AcceptedIDs[i] != b.want {
			t.Errorf("AcceptedIDs[%d] = %q, want %q", i, st.AcceptedIDs[i], b.want)
		}
	}
}

// TestReplyDelay checks that every transaction waits ReplyDelay at MAIL,
// RCPT and the final dot, and that the wait holds only its own session:
// connections in parallel do not queue behind each other.
func TestReplyDelay(t *testing.T) {
	const delay = 40 * time.Millisecond
	r := start(t, relay.Config{ReplyDelay: delay})

	c := dial(t, r)
	begin := time.Now()
	if err := send(c, rcpt(0)); err != nil {
		t.Fatalf("send: %v", err)
	}
	if took := time.Since(begin); took < 3*delay {
		t.Errorf("one transaction took %s, want at least 3 x %s (MAIL, RCPT, final dot)", took, delay)
	}

	const conns = 8
	clients := make([]*smtp.Client, conns)
	for i := range clients {
		clients[i] = dial(t, r)
	}
	errs := make(chan error, conns)
	begin = time.Now()
	for i, cl := range clients {
		go func() { errs <- send(cl, rcpt(i+1)) }()
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	// Serialised, the transactions would take conns x 3 x delay (960 ms);
	// in parallel about 3 x delay. Half the serial time leaves room for a
	// loaded machine and still fails a relay-wide wait.
	if took, serial := time.Since(begin), conns*3*delay; took >= serial/2 {
		t.Errorf("%d parallel transactions took %s, want well under the serial %s", conns, took, serial)
	}
	if got := r.Stats().Accepted; got != conns+1 {
		t.Errorf("Accepted = %d, want %d", got, conns+1)
	}
}
