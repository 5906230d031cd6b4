package sender

import (
	"cmp"
	"math"
	"net"
	"os"
	"strings"
	"time"

	"github.com/postline/postline/internal/configerr"
)

// TLSPolicy says how a Relay protects its SMTP connections.
type TLSPolicy string

// The TLS policies.
const (
	TLSAuto          TLSPolicy = "auto"          // none for loopback hosts, mandatory otherwise (the default)
	TLSMandatory     TLSPolicy = "mandatory"     // STARTTLS required
	TLSOpportunistic TLSPolicy = "opportunistic" // STARTTLS if offered
	TLSNone          TLSPolicy = "none"          // never (loopback test sinks)
	TLSImplicit      TLSPolicy = "implicit"      // SMTPS (port 465)
)

// Defaults for Config.
const (
	DefaultName               = "primary"
	DefaultPort               = 587
	DefaultTLS                = TLSAuto
	DefaultDialTimeout        = 10 * time.Second
	DefaultSendTimeout        = 30 * time.Second
	DefaultMaxMessagesPerConn = 1000
	DefaultIdleTimeout        = 10 * time.Second
)

// Config describes one SMTP relay.
type Config struct {
	// Name is the relay name used in metrics and logs; keep it short
	// and stable (it is a label value). Defaults to "primary".
	Name string
	// Host is the relay's host name or IP address, without a port. Required.
	Host string
	// Port is the relay's TCP port. Defaults to 587.
	Port int
	// TLS is the TLS policy. Defaults to TLSAuto: none for loopback hosts
	// (localhost, 127.0.0.0/8, ::1), mandatory STARTTLS otherwise.
	TLS TLSPolicy
	// InsecureSkipVerify accepts any server certificate. Only for test
	// relays with self-signed certificates. Defaults to false.
	InsecureSkipVerify bool
	// Username and Password enable SMTP AUTH (PLAIN, else LOGIN). Without
	// TLS the credentials are only sent to a loopback host. Default to no
	// authentication.
	Username, Password string
	// HELO is the name announced in EHLO. Defaults to os.Hostname().
	HELO string
	// DialTimeout bounds connecting, including the SMTP greeting, EHLO,
	// STARTTLS and AUTH. Defaults to 10s.
	DialTimeout time.Duration
	// SendTimeout is the I/O timeout for one message's transaction. Defaults
	// to 30s.
	SendTimeout time.Duration
	// MaxMessagesPerConn makes a session redial after this many
	// transactions on one connection, so a long-lived connection does not
	// pin one relay node forever. Zero means the default; a negative value
	// means unlimited. Defaults to 1000.
	MaxMessagesPerConn int
	// Priority orders relays for failover: lower is preferred, and relays
	// with equal priority keep their configured order. Defaults to 0.
	Priority int
	// MaxConns caps the connections (sending sessions) this worker opens
	// to the relay; 0 means one per worker sender goroutine, i.e. the
	// worker's sender count. Defaults to 0.
	MaxConns int
	// Notify asks the relay for delivery status notifications (RFC 3461)
	// when it announces DSN: the NOTIFY value of every RCPT (for example
	// "SUCCESS,FAILURE,DELAY"), with RET=HDRS so reports carry the
	// headers, not the body. Reports go to each recipient's return path.
	// "" asks for none (the relay's defaults apply). Defaults to "".
	Notify string
	// Rate is what the relay accepts from the whole fleet, in messages per
	// second (its published sending limit); each worker paces itself to
	// its share by live consumer-group members. The sender does not use
	// it: the worker's send control does. 0 means unknown. Defaults to 0.
	Rate float64
	// NoPipelining sends the envelope one command per round trip even to a
	// relay that advertises PIPELINING (RFC 2920): for a relay, or a proxy
	// in front of it, that advertises the extension and mishandles grouped
	// commands. Defaults to false: pipelining whenever advertised.
	NoPipelining bool
	// IdleTimeout: a connection idle longer than this is closed and
	// redialled before the next send, rather than failing it. Keep it below
	// the relay's own idle timeout (often 30s to 5m). Defaults to 10s.
	IdleTimeout time.Duration
	// DKIM signs each message with the key of its From address's domain
	// (a *dkim.Keyring; relays may share one). A message whose From
	// domain has no key goes out unsigned, counted in
	// postline_sender_dkim_total{result="no_key"}; one whose signing fails
	// is not sent (see StageSign). nil signs nothing and counts nothing.
	// Defaults to nil.
	DKIM DKIMSigner
}

// DKIMSigner signs rendered messages; *dkim.Keyring implements it.
type DKIMSigner interface {
	// Sign returns msg with a DKIM-Signature field for domain prepended
	// and true, or msg unchanged and false when it has no key for domain.
	Sign(domain string, msg []byte) (signed []byte, ok bool, err error)
}

// WithDefaults returns c with zero fields set to their defaults. Priority
// and MaxConns keep zero: it is their default.
func (c Config) WithDefaults() Config {
	c.Name = cmp.Or(c.Name, DefaultName)
	c.Port = cmp.Or(c.Port, DefaultPort)
	c.TLS = cmp.Or(c.TLS, DefaultTLS)
	if c.HELO == "" {
		c.HELO = hostname()
	}
	c.DialTimeout = cmp.Or(c.DialTimeout, DefaultDialTimeout)
	c.SendTimeout = cmp.Or(c.SendTimeout, DefaultSendTimeout)
	c.MaxMessagesPerConn = cmp.Or(c.MaxMessagesPerConn, DefaultMaxMessagesPerConn)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, DefaultIdleTimeout)
	return c
}

// Validate reports the first invalid field. It expects a config that went
// through WithDefaults.
func (c Config) Validate() error {
	switch {
	case c.Name == "" || strings.ContainsFunc(c.Name, isSpaceOrControl):
		return configerr.Errorf("Name", "sender config: Name %q must be non-empty without spaces", c.Name)
	case c.Host == "":
		return configerr.Errorf("Host", "sender config: Host is required")
	case strings.ContainsFunc(c.Host, isSpaceOrControl) || strings.ContainsAny(c.Host, "/[]"):
		return configerr.Errorf("Host", "sender config: Host %q is not a host name or IP address", c.Host)
	case strings.Contains(c.Host, ":") && net.ParseIP(c.Host) == nil:
		return configerr.Errorf("Host", "sender config: Host %q must not include a port (use Port)", c.Host)
	case c.Port < 1 || c.Port > 65535:
		return configerr.Errorf("Port", "sender config: Port %d is not between 1 and 65535", c.Port)
	case !c.TLS.valid():
		return configerr.Errorf("TLS", "sender config: TLS %q is not one of auto, mandatory, opportunistic, none, implicit", c.TLS)
	case c.Username == "" && c.Password != "":
		return configerr.Errorf("Password", "sender config: Password is set without Username")
	case c.Username != "" && effectiveTLS(c.TLS, c.Host) == TLSNone && !isLoopback(c.Host):
		return configerr.Errorf("Username", "sender config: Username is set with TLS %q to non-loopback host %q: credentials would travel in clear text", c.TLS, c.Host)
	case strings.ContainsAny(c.Username+c.Password, "\r\n\x00"):
		return configerr.Errorf("Username", "sender config: Username or Password contains CR, LF or NUL")
	case c.HELO == "" || strings.ContainsFunc(c.HELO, isSpaceOrControl):
		return configerr.Errorf("HELO", "sender config: HELO %q must be a host name", c.HELO)
	case !validNotify(c.Notify):
		return configerr.Errorf("Notify", "sender config: Notify %q is not NEVER or a comma-separated list of SUCCESS, FAILURE, DELAY", c.Notify)
	case c.DialTimeout <= 0:
		return configerr.Errorf("DialTimeout", "sender config: DialTimeout %s must be positive", c.DialTimeout)
	case c.SendTimeout <= 0:
		return configerr.Errorf("SendTimeout", "sender config: SendTimeout %s must be positive", c.SendTimeout)
	case c.IdleTimeout <= 0:
		return configerr.Errorf("IdleTimeout", "sender config: IdleTimeout %s must be positive", c.IdleTimeout)
	case c.Priority < 0:
		return configerr.Errorf("Priority", "sender config: Priority %d must not be negative", c.Priority)
	case c.MaxConns < 0:
		return configerr.Errorf("MaxConns", "sender config: MaxConns %d must not be negative", c.MaxConns)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return configerr.Errorf("Rate", "sender config: Rate %v must be a non-negative number", c.Rate)
	}
	return nil
}

func (p TLSPolicy) valid() bool {
	switch p {
	case TLSAuto, TLSMandatory, TLSOpportunistic, TLSNone, TLSImplicit:
		return true
	}
	return false
}

// effectiveTLS resolves TLSAuto for host: no TLS on loopback, where test
// sinks rarely speak it and nothing leaves the machine, mandatory STARTTLS
// everywhere else.
func effectiveTLS(p TLSPolicy, host string) TLSPolicy {
	if p != TLSAuto {
		return p
	}
	if isLoopback(host) {
		return TLSNone
	}
	return TLSMandatory
}

// isLoopback reports whether host names this machine without DNS:
// "localhost" or a loopback IP address.
func isLoopback(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return h
}

// validNotify reports whether n is a NOTIFY value of RFC 3461: NEVER
// alone, or SUCCESS, FAILURE and DELAY once each; "" is none.
func validNotify(n string) bool {
	if n == "" || n == "NEVER" {
		return true
	}
	seen := map[string]bool{}
	for _, k := range strings.Split(n, ",") {
		if (k != "SUCCESS" && k != "FAILURE" && k != "DELAY") || seen[k] {
			return false
		}
		seen[k] = true
	}
	return true
}
