package relay

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The stages at which the token bucket is consulted (Config.ThrottleAt).
const (
	// AtRcpt takes one token per transaction at its first RCPT TO that is
	// not permanently rejected; an empty bucket rejects that RCPT.
	AtRcpt = "RCPT"
	// AtData takes the token when the message body has been read; an
	// empty bucket rejects the final dot, after the body was transferred.
	AtData = "DATA"
)

// SecondsPlaceholder in Config.ThrottleText is replaced by the whole number
// of seconds until the bucket holds a token again (rounded up, at least 1).
const SecondsPlaceholder = "{seconds}"

// Defaults for Config.
const (
	DefaultAddr             = "127.0.0.1:0"
	DefaultThrottleCode     = 450
	DefaultThrottleEnhanced = "4.7.1"
	DefaultThrottleText     = "rate limit exceeded, try again in " + SecondsPlaceholder + " seconds"
	DefaultThrottleAt       = AtRcpt
	DefaultDomain           = "relay.localhost"
	DefaultIdleTimeout      = 5 * time.Minute

	DefaultTransientReplyCode     = 451
	DefaultTransientReplyEnhanced = "4.3.0"
	DefaultTransientReplyText     = "Temporary failure, please try again later"
)

// Config describes the relay's capacity and its faults. The zero Config is a
// relay on 127.0.0.1 that accepts everything.
type Config struct {
	// Addr is the loopback host:port to listen on. Port 0 picks a free port
	// (see Relay.Addr). Defaults to "127.0.0.1:0".
	Addr string
	// Rate is the relay's capacity R in messages per second, enforced by a
	// token bucket (golang.org/x/time/rate) that every connection shares.
	// 0 means unlimited. Defaults to 0.
	Rate float64
	// Burst is the bucket's size: how many messages may arrive at once
	// after a quiet spell. Ignored when Rate is 0. Defaults to Rate rounded
	// up (one second's worth), at least 1.
	Burst int
	// MaxConns is the relay's connection limit C: a connection arriving
	// while C are open is answered "421 4.7.0 ... too many connections" at
	// the greeting and closed, as Postfix does. 0 means unlimited. Defaults
	// to 0.
	MaxConns int
	// HangUpAbove models a relay that lets connections in but hangs up on
	// sessions when it is overloaded (Postfix's scheduler test: 5
	// concurrent sessions while the client may open 20): only the oldest
	// HangUpAbove open connections are served, and a MAIL FROM on any
	// younger one is answered "421 4.7.0 ... too many connections, closing
	// transmission channel" and the connection closed. Unlike MaxConns, the
	// connection first gets a 220 greeting, so the client learns only at
	// its first transaction. 0 means off. Defaults to 0.
	HangUpAbove int
	// ThrottleCode, ThrottleEnhanced and ThrottleText are the reply when
	// the bucket is empty; SecondsPlaceholder in the text becomes the time
	// until the next token. Default to 450, "4.7.1" and "rate limit
	// exceeded, try again in {seconds} seconds".
	ThrottleCode     int
	ThrottleEnhanced string
	ThrottleText     string
	// ThrottleAt is where the bucket is consulted: AtRcpt or AtData.
	// Defaults to AtRcpt.
	ThrottleAt string
	// TransientDrop is the share of transactions (of those that got past
	// the bucket) answered "421 4.4.2" at the end of DATA and disconnected:
	// the message is lost, the client must send it again. Decided by a
	// random generator seeded with Seed. Defaults to 0.
	TransientDrop float64
	// TransientReply is the share of transactions (of those that got past
	// the bucket and were not dropped) answered with TransientReplyCode
	// and TransientReplyEnhanced at the end of DATA, the connection kept
	// open: a relay's passing local problem ("451 4.3.0"), after which the
	// client may send the next message on the same connection. Decided by
	// the same seeded generator as TransientDrop, one draw per
	// transaction, so a config without it drops the same transactions as
	// before. Defaults to 0.
	TransientReply float64
	// TransientReplyCode, TransientReplyEnhanced and TransientReplyText
	// are that reply. Default to 451, "4.3.0" and "Temporary failure,
	// please try again later".
	TransientReplyCode     int
	TransientReplyEnhanced string
	TransientReplyText     string
	// PermanentReject is the share of recipient addresses answered "550
	// 5.1.1" at RCPT TO. Decided by a hash of Seed and the address (see
	// Rejects), so a retry of the same message is rejected again.
	// Defaults to 0.
	PermanentReject float64
	// Seed makes TransientDrop's sequence of decisions and PermanentReject's
	// choice of addresses reproducible. Defaults to 0.
	Seed int64
	// Domain is the name in the greeting and in replies. Defaults to
	// "relay.localhost".
	Domain string
	// IdleTimeout closes a connection that sends no command for this long
	// with "421 4.4.2 Idle timeout", as real MTAs do. Defaults to 5m.
	IdleTimeout time.Duration
	// ReplyDelay is how long the relay waits before it answers each MAIL
	// FROM, each RCPT TO and the final dot of DATA: a relay whose replies
	// are bound by latency (a round trip, a disk sync), not by a rate. The
	// wait holds only the session, not the relay, so N connections still
	// get N times the throughput of one. 0 answers at once. Defaults to 0.
	ReplyDelay time.Duration
	// Pipelining makes the relay advertise PIPELINING (RFC 2920) in its
	// EHLO reply, inviting a client to send MAIL FROM, its RCPT TOs and
	// DATA in one write. The relay answers pipelined commands either way,
	// in order; without Pipelining it just does not offer them. Defaults to
	// false.
	Pipelining bool
	// RoundTripDelay is how long the relay waits before each write of its
	// replies: the network's latency, paid once per round trip the client
	// waits for, however many replies the write carries. The relay writes
	// when it has read all the input it has (as Postfix does), so replies
	// to pipelined commands share one write and one wait, and a client
	// that waits for each reply pays it per command. Unlike ReplyDelay it
	// applies to every write, the greeting and the replies to EHLO and
	// DATA included. 0 writes at once. Defaults to 0.
	RoundTripDelay time.Duration
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Addr = cmp.Or(c.Addr, DefaultAddr)
	if c.Burst == 0 && c.Rate > 0 && !math.IsInf(c.Rate, 1) {
		c.Burst = max(1, int(math.Ceil(c.Rate)))
	}
	c.ThrottleCode = cmp.Or(c.ThrottleCode, DefaultThrottleCode)
	c.ThrottleEnhanced = cmp.Or(c.ThrottleEnhanced, DefaultThrottleEnhanced)
	c.ThrottleText = cmp.Or(c.ThrottleText, DefaultThrottleText)
	c.ThrottleAt = cmp.Or(strings.ToUpper(c.ThrottleAt), DefaultThrottleAt)
	c.TransientReplyCode = cmp.Or(c.TransientReplyCode, DefaultTransientReplyCode)
	c.TransientReplyEnhanced = cmp.Or(c.TransientReplyEnhanced, DefaultTransientReplyEnhanced)
	c.TransientReplyText = cmp.Or(c.TransientReplyText, DefaultTransientReplyText)
	c.Domain = cmp.Or(c.Domain, DefaultDomain)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, DefaultIdleTimeout)
	return c
}

var enhancedStatus = regexp.MustCompile(`^([45])\.\d{1,3}\.\d{1,3}$`)

// Validate reports the first invalid field. It expects a config that went
// through WithDefaults.
func (c Config) Validate() error {
	for _, check := range []func() error{c.validateAddr, c.validateLimits, c.validateThrottle, c.validateFaults, c.validateSession} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validateAddr checks where the relay listens.
func (c Config) validateAddr() error {
	host, _, err := net.SplitHostPort(c.Addr)
	switch {
	case err != nil:
		return fmt.Errorf("relay config: Addr %q: %w", c.Addr, err)
	case !isLoopback(host):
		// It accepts mail from anyone and drops it: keep it off the network.
		return fmt.Errorf("relay config: Addr %q is not a loopback address", c.Addr)
	}
	return nil
}

// validateLimits checks the rate and connection limits.
func (c Config) validateLimits() error {
	switch {
	case math.IsNaN(c.Rate) || c.Rate < 0:
		return fmt.Errorf("relay config: Rate %v must not be negative", c.Rate)
	case c.Burst < 0 || c.Rate > 0 && !math.IsInf(c.Rate, 1) && c.Burst < 1:
		return fmt.Errorf("relay config: Burst %d must be at least 1", c.Burst)
	case c.MaxConns < 0:
		return fmt.Errorf("relay config: MaxConns %d must not be negative", c.MaxConns)
	case c.HangUpAbove < 0:
		return fmt.Errorf("relay config: HangUpAbove %d must not be negative", c.HangUpAbove)
	}
	return nil
}

// validateThrottle checks the reply to a send over the limits.
func (c Config) validateThrottle() error {
	switch {
	case c.ThrottleCode < 400 || c.ThrottleCode > 599:
		return fmt.Errorf("relay config: ThrottleCode %d is not a 4xx or 5xx reply", c.ThrottleCode)
	case !enhancedStatus.MatchString(c.ThrottleEnhanced) || c.ThrottleEnhanced[:1] != strconv.Itoa(c.ThrottleCode/100):
		return fmt.Errorf("relay config: ThrottleEnhanced %q is not an RFC 3463 status of the class of ThrottleCode %d", c.ThrottleEnhanced, c.ThrottleCode)
	case strings.ContainsAny(c.ThrottleText, "\r\n"):
		return fmt.Errorf("relay config: ThrottleText %q contains a line break", c.ThrottleText)
	case c.ThrottleAt != AtRcpt && c.ThrottleAt != AtData:
		return fmt.Errorf("relay config: ThrottleAt %q is not %s or %s", c.ThrottleAt, AtRcpt, AtData)
	}
	return nil
}

// validateFaults checks the injected transient and permanent failures.
func (c Config) validateFaults() error {
	switch {
	case !isShare(c.TransientDrop):
		return fmt.Errorf("relay config: TransientDrop %v is not between 0 and 1", c.TransientDrop)
	case !isShare(c.TransientReply) || !isShare(c.TransientDrop+c.TransientReply):
		return fmt.Errorf("relay config: TransientReply %v is not between 0 and 1-TransientDrop", c.TransientReply)
	case c.TransientReplyCode < 400 || c.TransientReplyCode > 499:
		return fmt.Errorf("relay config: TransientReplyCode %d is not a 4xx reply", c.TransientReplyCode)
	case !enhancedStatus.MatchString(c.TransientReplyEnhanced) || c.TransientReplyEnhanced[:1] != "4":
		return fmt.Errorf("relay config: TransientReplyEnhanced %q is not a 4.x.x RFC 3463 status", c.TransientReplyEnhanced)
	case strings.ContainsAny(c.TransientReplyText, "\r\n"):
		return fmt.Errorf("relay config: TransientReplyText %q contains a line break", c.TransientReplyText)
	case !isShare(c.PermanentReject):
		return fmt.Errorf("relay config: PermanentReject %v is not between 0 and 1", c.PermanentReject)
	}
	return nil
}

// validateSession checks the SMTP session's name, idle timeout and delays.
func (c Config) validateSession() error {
	switch {
	case c.Domain == "" || strings.ContainsFunc(c.Domain, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Errorf("relay config: Domain %q must be a host name", c.Domain)
	case c.IdleTimeout <= 0:
		return fmt.Errorf("relay config: IdleTimeout %s must be positive", c.IdleTimeout)
	case c.ReplyDelay < 0:
		return fmt.Errorf("relay config: ReplyDelay %s must not be negative", c.ReplyDelay)
	case c.RoundTripDelay < 0:
		return fmt.Errorf("relay config: RoundTripDelay %s must not be negative", c.RoundTripDelay)
	}
	return nil
}

// Rejects reports whether the relay answers 550 5.1.1 to the recipient addr:
// a pure function of Seed, PermanentReject and the address (compared
// without case and surrounding angle brackets), so benchmarks can count the
// permanent failures they should expect.
func (c Config) Rejects(addr string) bool {
	if c.PermanentReject <= 0 {
		return false
	}
	addr = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(addr), "<"), ">"))
	h := fnv.New64a()
	var seed [8]byte
	binary.LittleEndian.PutUint64(seed[:], uint64(c.Seed))
	_, _ = h.Write(seed[:])
	_, _ = h.Write([]byte(addr))
	return unitFloat(mix64(h.Sum64())) < c.PermanentReject
}

// mix64 is splitmix64's finalizer: FNV's high bits alone are not uniform
// enough for short, similar addresses.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// unitFloat maps x uniformly onto [0, 1).
func unitFloat(x uint64) float64 { return float64(x>>11) / (1 << 53) }

func isShare(f float64) bool { return f >= 0 && f <= 1 }

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
