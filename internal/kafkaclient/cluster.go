// Package kafkaclient builds every connection Postline's services make to
// Kafka, from one kafkaconn.Config: the consumer group and its readers, every
// writer, and admin clients, for the worker, the retry scheduler, the
// reaper, the dead-letter writer, postctl and the public job and event
// packages alike. TLS (verified by default), SASL PLAIN and SCRAM, and the
// client ID are set here and nowhere else.
//
// It also owns two decisions every caller needs: how many bytes a writer may
// put in one batch for a topic, taken from the topic's max.message.bytes, and
// whether a Kafka error may heal when the call is made again (MayHeal). It knows connections
// and topic limits, not mail. It is internal because its API is kafka-go's
// types; applications configure a connection with kafkaconn.Config only.
package kafkaclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/postline/postline/internal/backoff"
	"github.com/postline/postline/internal/configerr"
	"github.com/postline/postline/kafkaconn"
)

// Cluster builds connections to one Kafka cluster. It is safe for
// concurrent use and holds no connections itself: each Transport, Dialer,
// Client and Writer it returns owns its own.
type Cluster struct {
	cfg  kafkaconn.Config
	tls  *tls.Config
	mech sasl.Mechanism
}

// New checks cfg (after WithDefaults) and loads its certificates. It does
// not contact the brokers: Check does.
func New(cfg kafkaconn.Config) (*Cluster, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tc, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	mech, err := mechanism(cfg)
	if err != nil {
		return nil, err
	}
	return &Cluster{cfg: cfg, tls: tc, mech: mech}, nil
}

// mechanism builds the SASL mechanism of c, or nil for none.
func mechanism(c kafkaconn.Config) (sasl.Mechanism, error) {
	switch c.SASL.Mechanism {
	case kafkaconn.MechanismPlain:
		return plain.Mechanism{Username: c.SASL.Username, Password: c.SASL.Password}, nil
	case kafkaconn.MechanismSCRAMSHA256, kafkaconn.MechanismSCRAMSHA512:
		algo := scram.SHA256
		if c.SASL.Mechanism == kafkaconn.MechanismSCRAMSHA512 {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, c.SASL.Username, c.SASL.Password)
		if err != nil {
			// The error is about the username's form; it never holds the password.
			return nil, fmt.Errorf("kafka: SASL %s: %w", c.SASL.Mechanism, err)
		}
		return m, nil
	}
	return nil, nil
}

// tlsConfig builds the TLS client configuration of c, or nil when TLS is
// off.
func tlsConfig(c kafkaconn.Config) (*tls.Config, error) {
	if !c.TLSEnabled() {
		return nil, nil
	}
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         c.TLS.ServerName,
		InsecureSkipVerify: c.TLS.InsecureSkipVerify, //nolint:gosec // an explicit, documented operator choice
	}
	if c.TLS.CAFile != "" {
		pem, err := os.ReadFile(c.TLS.CAFile)
		if err != nil {
			return nil, configerr.Errorf("TLS.CAFile", "kafka: TLS.CAFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, configerr.Errorf("TLS.CAFile", "kafka: TLS.CAFile %s holds no PEM certificate", c.TLS.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.TLS.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka: TLS client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Config returns the connection settings the cluster was built from, with
// defaults applied: what the public job and event packages take.
func (c *Cluster) Config() kafkaconn.Config { return c.cfg }

// Brokers returns the bootstrap addresses.
func (c *Cluster) Brokers() []string { return append([]string(nil), c.cfg.Brokers...) }

// Addr returns the bootstrap addresses as a net.Addr for kafka-go.
func (c *Cluster) Addr() net.Addr { return kafka.TCP(c.cfg.Brokers...) }

// String describes the cluster for logs: brokers, TLS and SASL mechanism,
// never credentials.
func (c *Cluster) String() string {
	s := fmt.Sprintf("brokers=%v tls=%t", c.cfg.Brokers, c.tls != nil)
	if c.mech != nil {
		s += " sasl=" + string(c.cfg.SASL.Mechanism)
	}
	return s
}

// Transport returns a new transport for clients and writers, named with
// the client ID plus suffix ("postline-worker-dlq"). Close it with
// CloseIdleConnections once its users are closed.
func (c *Cluster) Transport(suffix string) *kafka.Transport {
	return &kafka.Transport{
		ClientID:    c.clientID(suffix),
		DialTimeout: c.cfg.DialTimeout,
		TLS:         c.tlsClone(),
		SASL:        c.mech,
	}
}

// Dialer returns a dialer for readers and consumer groups.
func (c *Cluster) Dialer(suffix string) *kafka.Dialer {
	return &kafka.Dialer{
		ClientID:      c.clientID(suffix),
		Timeout:       c.cfg.DialTimeout,
		DualStack:     true,
		TLS:           c.tlsClone(),
		SASLMechanism: c.mech,
	}
}

// Client returns an admin client with its own transport and a func that
// closes the transport's connections. timeout bounds each request.
func (c *Cluster) Client(suffix string, timeout time.Duration) (*kafka.Client, func()) {
	t := c.Transport(suffix)
	t.MetadataTTL = 250 * time.Millisecond // admin polls must see new topics soon
	return &kafka.Client{Addr: c.Addr(), Transport: t, Timeout: timeout}, t.CloseIdleConnections
}

func (c *Cluster) clientID(suffix string) string {
	if suffix == "" {
		return c.cfg.ClientID
	}
	return c.cfg.ClientID + "-" + suffix
}

func (c *Cluster) tlsClone() *tls.Config {
	if c.tls == nil {
		return nil
	}
	return c.tls.Clone()
}

// Check connects to the cluster and reads its metadata: it proves the
// brokers answer, the certificate is trusted and the credentials are
// accepted. An error that trying again cannot mend (MayHeal false) says
// which of those failed.
func (c *Cluster) Check(ctx context.Context) error {
	client, closeFn := c.Client("check", c.cfg.DialTimeout)
	defer closeFn()
	if _, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}}); err != nil {
		return fmt.Errorf("kafka %v: %s: %w", c.cfg.Brokers, Explain(err), err)
	}
	return nil
}

// Explain names the likely cause of a connection error for an operator:
// an untrusted certificate, refused credentials, a plaintext or TLS
// mismatch, an unreachable broker. It never returns a secret.
func Explain(err error) string {
	var (
		uae  x509.UnknownAuthorityError
		herr x509.HostnameError
		cie  x509.CertificateInvalidError
		rec  tls.RecordHeaderError
		ke   kafka.Error
		op   *net.OpError
	)
	switch {
	case errors.As(err, &uae), errors.As(err, &herr), errors.As(err, &cie):
		return "the broker's TLS certificate is not trusted (check POSTLINE_KAFKA_TLS_CA_FILE and POSTLINE_KAFKA_TLS_SERVER_NAME)"
	case errors.As(err, &rec):
		return "the broker did not answer TLS (is this a plaintext listener? check POSTLINE_KAFKA_TLS)"
	case errors.As(err, &ke) && ke == kafka.SASLAuthenticationFailed:
		return "the broker refused the SASL credentials (check POSTLINE_KAFKA_SASL_USERNAME and the password)"
	case errors.As(err, &ke) && ke == kafka.UnsupportedSASLMechanism:
		return "the broker does not offer this SASL mechanism (check POSTLINE_KAFKA_SASL_MECHANISM)"
	case errors.As(err, &ke) && (ke == kafka.TopicAuthorizationFailed || ke == kafka.ClusterAuthorizationFailed || ke == kafka.GroupAuthorizationFailed):
		return "the broker's ACLs refuse this user"
	case errors.As(err, &op):
		return "cannot reach the broker"
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time (a TLS or SASL listener spoken to in plaintext hangs like this; check POSTLINE_KAFKA_TLS)"
	}
	return "request failed"
}

// MaxMessageBytes returns each topic's max.message.bytes: the largest
// record batch the broker accepts for it (the topic's setting, or the
// broker's message.max.bytes when the topic has none).
func (c *Cluster) MaxMessageBytes(ctx context.Context, topics ...string) (map[string]int, error) {
	client, closeFn := c.Client("describe", 10*time.Second)
	defer closeFn()
	req := &kafka.DescribeConfigsRequest{}
	for _, t := range topics {
		req.Resources = append(req.Resources, kafka.DescribeConfigRequestResource{
			ResourceType: kafka.ResourceTypeTopic,
			ResourceName: t,
			ConfigNames:  []string{"max.message.bytes"},
		})
	}
	resp, err := client.DescribeConfigs(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("describe topics %v: %w", topics, err)
	}
	out := make(map[string]int, len(topics))
	for _, r := range resp.Resources {
		if r.Error != nil {
			return nil, fmt.Errorf("describe topic %s: %w", r.ResourceName, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName != "max.message.bytes" {
				continue
			}
			n, err := strconv.Atoi(e.ConfigValue)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("topic %s: max.message.bytes %q is not a positive number", r.ResourceName, e.ConfigValue)
			}
			out[r.ResourceName] = n
		}
	}
	for _, t := range topics {
		if _, ok := out[t]; !ok {
			return nil, fmt.Errorf("topic %s: the broker did not report max.message.bytes", t)
		}
	}
	return out, nil
}

// Await calls Check until it succeeds, ctx ends, or it fails in a way
// trying again cannot mend (MayHeal false): refused credentials or an
// untrusted certificate end it at once with the explained error, so a
// misconfigured process stops with a clear message instead of waiting
// forever. onWait, if not nil, sees each failure that will be tried again.
func (c *Cluster) Await(ctx context.Context, onWait func(error)) error {
	r := backoff.Policy{First: 200 * time.Millisecond, Max: 5 * time.Second,
		Permanent: func(err error) bool { return !MayHeal(err) }}
	if onWait != nil {
		r.OnWait = func(err error, _ int, _ time.Duration) { onWait(err) }
	}
	return r.Do(ctx, func() error { return c.Check(ctx) })
}

// AwaitLogged is Await as a program waits for Kafka at start: the first
// failure that will be retried is logged on logger, once, and the rest wait
// quietly.
func (c *Cluster) AwaitLogged(ctx context.Context, logger *slog.Logger) error {
	warned := false
	return c.Await(ctx, func(err error) {
		if !warned {
			logger.Error("cannot reach Kafka; trying again until it answers", "kafka", c.String(), "error", err)
			warned = true
		}
	})
}
