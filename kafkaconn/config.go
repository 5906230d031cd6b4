// Package kafkaconn is the one setting an application needs to reach
// Postline's Kafka cluster: the brokers, TLS and SASL, in Config. The public
// job.NewPublisher and event.NewReader take it, and every Postline service
// builds its connections from the same type.
package kafkaconn

import (
	"cmp"
	"errors"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/postline/postline/internal/configerr"
)

// Defaults of Config.
const (
	// DefaultClientID names the connections in the brokers' logs and quotas.
	DefaultClientID = "postline"
	// DefaultDialTimeout bounds one TCP connect plus TLS and SASL handshakes.
	DefaultDialTimeout = 10 * time.Second
)

// TLSMode says when connections use TLS.
type TLSMode string

// The TLS modes.
const (
	// TLSAuto uses TLS unless every bootstrap broker is on loopback: a
	// connection that leaves the machine is encrypted and verified unless
	// the operator says otherwise.
	TLSAuto TLSMode = "auto"
	// TLSOn always uses TLS.
	TLSOn TLSMode = "on"
	// TLSOff never uses TLS. Only for networks the operator trusts.
	TLSOff TLSMode = "off"
)

// Mechanism is a SASL mechanism name as Kafka spells it.
type Mechanism string

// The SASL mechanisms Postline connects with.
const (
	// MechanismNone authenticates nobody (a PLAINTEXT or SSL listener).
	MechanismNone Mechanism = ""
	// MechanismPlain sends the password itself; it needs TLS off loopback.
	MechanismPlain Mechanism = "PLAIN"
	// MechanismSCRAMSHA256 and MechanismSCRAMSHA512 prove the password
	// without sending it (RFC 5802).
	MechanismSCRAMSHA256 Mechanism = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 Mechanism = "SCRAM-SHA-512"
)

// Config is everything needed to reach a Kafka cluster. Every reader,
// writer and admin client of Postline is built from one, and so are
// job.Publisher and event.Reader.
type Config struct {
	// Brokers are the bootstrap addresses, host:port. Required.
	Brokers []string
	// ClientID is sent with every request. Defaults to DefaultClientID.
	ClientID string
	// DialTimeout bounds a connect with its TLS and SASL handshakes.
	// Defaults to DefaultDialTimeout.
	DialTimeout time.Duration
	// TLS configures encryption. Defaults to TLSAuto with verification.
	TLS TLSConfig
	// SASL configures authentication. Defaults to none.
	SASL SASLConfig
}

// TLSConfig configures TLS to the brokers.
type TLSConfig struct {
	// Mode says when TLS is used. Defaults to TLSAuto.
	Mode TLSMode
	// CAFile is a PEM bundle of the CAs that sign the brokers'
	// certificates. Defaults to the system's roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// brokers that authenticate clients by certificate (mTLS). Set both or
	// neither. Default to none.
	CertFile, KeyFile string
	// ServerName is the name the brokers' certificates must carry. Defaults
	// to the host of the address dialled.
	ServerName string
	// InsecureSkipVerify accepts any certificate. Never in production: it
	// lets anyone on the path read the mail. Defaults to false.
	InsecureSkipVerify bool
}

// SASLConfig configures SASL authentication.
type SASLConfig struct {
	// Mechanism is the SASL mechanism. Defaults to MechanismNone.
	Mechanism Mechanism
	// Username and Password are the credentials; required with a
	// mechanism. Password is never printed by this package.
	Username string
	Password string
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.ClientID = cmp.Or(c.ClientID, DefaultClientID)
	c.DialTimeout = cmp.Or(c.DialTimeout, DefaultDialTimeout)
	c.TLS.Mode = cmp.Or(c.TLS.Mode, TLSAuto)
	c.SASL.Mechanism = Mechanism(strings.ToUpper(string(c.SASL.Mechanism)))
	return c
}

// Validate reports every invalid field by name. It never includes the
// password in its errors.
func (c Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, configerr.Errorf("Brokers", "kafka: Brokers is empty"))
	}
	for _, b := range c.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			errs = append(errs, configerr.Errorf("Brokers", "kafka: Brokers: %q is not host:port", b))
		}
	}
	if c.DialTimeout < 0 {
		errs = append(errs, configerr.Errorf("DialTimeout", "kafka: DialTimeout %s is negative", c.DialTimeout))
	}
	switch c.TLS.Mode {
	case TLSAuto, TLSOn, TLSOff:
	default:
		errs = append(errs, configerr.Errorf("TLS.Mode", "kafka: TLS.Mode %q is not auto, on or off", c.TLS.Mode))
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		errs = append(errs, configerr.Errorf("TLS.CertFile", "kafka: TLS.CertFile and TLS.KeyFile: set both or neither"))
	}
	if !c.TLSEnabled() && (c.TLS.CAFile != "" || c.TLS.CertFile != "" || c.TLS.ServerName != "") {
		errs = append(errs, configerr.Errorf("TLS.Mode", "kafka: TLS files or server name are set but TLS.Mode makes the connection plaintext"))
	}
	switch c.SASL.Mechanism {
	case MechanismNone:
		if c.SASL.Username != "" || c.SASL.Password != "" {
			errs = append(errs, configerr.Errorf("SASL.Mechanism", "kafka: SASL credentials are set but SASL.Mechanism is empty"))
		}
	case MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512:
		if c.SASL.Username == "" || c.SASL.Password == "" {
			errs = append(errs, configerr.Errorf("Username", "kafka: SASL %s needs Username and Password", c.SASL.Mechanism))
		}
		if c.SASL.Mechanism == MechanismPlain && !c.TLSEnabled() && !allLoopback(c.Brokers) {
			errs = append(errs, errors.New("kafka: SASL PLAIN sends the password in clear: enable TLS for brokers off this machine"))
		}
	default:
		errs = append(errs, configerr.Errorf("SASL.Mechanism", "kafka: SASL.Mechanism %q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.SASL.Mechanism))
	}
	return errors.Join(errs...)
}

// TLSEnabled reports whether connections use TLS under c.TLS.Mode.
func (c Config) TLSEnabled() bool {
	switch c.TLS.Mode {
	case TLSOn:
		return true
	case TLSOff:
		return false
	}
	return !allLoopback(c.Brokers)
}

// allLoopback reports whether every address is on this machine.
func allLoopback(addrs []string) bool {
	return len(addrs) > 0 && !slices.ContainsFunc(addrs, func(a string) bool { return !IsLoopback(a) })
}

// IsLoopback reports whether addr (host or host:port) names this machine:
// localhost or a loopback IP.
func IsLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
