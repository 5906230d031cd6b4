package operator

import (
	"net/netip"
	"time"
)

// Throttle is the schedule of waits after wrong passwords for one key (an
// account name or a client address): the first FreeFailures cost nothing,
// each one after blocks the key for First, then twice as long each time,
// up to Max. Failures older than Forget are forgotten.
type Throttle struct {
	FreeFailures int
	First        time.Duration
	Max          time.Duration
	Forget       time.Duration
}

// The default throttles. A client address gets more free failures than an
// account: several people may share one address behind a proxy or NAT.
var (
	DefaultAccountThrottle = Throttle{FreeFailures: 5, First: time.Second, Max: 15 * time.Minute, Forget: 24 * time.Hour}
	DefaultClientThrottle  = Throttle{FreeFailures: 20, First: time.Second, Max: 15 * time.Minute, Forget: 24 * time.Hour}
)

// Wait is how long a key is blocked after its failures-th wrong password
// in a row.
func (t Throttle) Wait(failures int) time.Duration {
	over := failures - t.FreeFailures
	if over <= 0 || t.First <= 0 {
		return 0
	}
	wait := t.First
	for i := 1; i < over; i++ {
		if wait >= t.Max/2 {
			return t.Max
		}
		wait *= 2
	}
	return min(wait, t.Max)
}

// ClientAddress is the throttle's name of a client: its IPv4 address, or
// the /64 of its IPv6 address (one subscriber's usual allocation), from a
// host or host:port; "" when it is neither.
func ClientAddress(remote string) string {
	ap, err := netip.ParseAddrPort(remote)
	addr := ap.Addr()
	if err != nil {
		if addr, err = netip.ParseAddr(remote); err != nil {
			return ""
		}
	}
	addr = addr.Unmap()
	if addr.Is4() {
		return addr.String()
	}
	prefix, err := addr.WithZone("").Prefix(64)
	if err != nil {
		return ""
	}
	return prefix.String()
}
