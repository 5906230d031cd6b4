package admission_test

import (
	"net/netip"
	"testing"

	"github.com/postline/postline/internal/admission"
)

// FuzzClient: the client of an IP address is the IPv4 address itself, or
// a /64 holding the IPv6 address; whatever the port, the same address
// always counts against the same client; anything else is its own client.
func FuzzClient(f *testing.F) {
	for _, s := range []string{"192.0.2.7:25", "[::ffff:192.0.2.7]:25", "[2001:db8::1]:2525", "[fe80::1%eth0]:25", "@", "", "[::]:0"} {
		f.Add(s, uint16(25))
	}
	f.Fuzz(func(t *testing.T, remote string, port uint16) {
		got := admission.Client(remote)
		ap, err := netip.ParseAddrPort(remote)
		if err != nil {
			if got != remote {
				t.Fatalf("Client(%q) = %q, want the address itself (not IP)", remote, got)
			}
			return
		}
		ip := ap.Addr().Unmap()
		if other := admission.Client(netip.AddrPortFrom(ap.Addr(), port).String()); other != got {
			t.Fatalf("Client(%q) = %q but %q on port %d", remote, got, other, port)
		}
		if ip.Is4() {
			if got != ip.String() {
				t.Fatalf("Client(%q) = %q, want %q", remote, got, ip)
			}
			return
		}
		p, err := netip.ParsePrefix(got)
		if err != nil || p.Bits() != 64 || !p.Contains(ip.WithZone("")) {
			t.Fatalf("Client(%q) = %q, want a /64 holding %s (%v)", remote, got, ip, err)
		}
	})
}
