package kafkaconn

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/segmentio/kafka-go"
)

func TestConfigValidate(t *testing.T) {
	const secret = "s3cr3t-pa55"
	tests := []struct {
		name string
		cfg  Config
		want string // substring of the error; "" = valid
	}{
		{"loopback plaintext", Config{Brokers: []string{"127.0.0.1:9092"}}, ""},
		{"remote defaults to TLS", Config{Brokers: []string{"kafka.example.com:9093"}}, ""},
		{"no brokers", Config{}, "Brokers is empty"},
		{"broker without port", Config{Brokers: []string{"kafka"}}, `"kafka" is not host:port`},
		{"bad TLS mode", Config{Brokers: []string{"a:1"}, TLS: TLSConfig{Mode: "maybe"}}, `TLS.Mode "maybe"`},
		{"cert without key", Config{Brokers: []string{"a:1"}, TLS: TLSConfig{CertFile: "c.pem"}}, "set both or neither"},
		{"CA with TLS off", Config{Brokers: []string{"a:1"}, TLS: TLSConfig{Mode: TLSOff, CAFile: "ca.pem"}}, "plaintext"},
		{"SCRAM", Config{Brokers: []string{"a:1"}, SASL: SASLConfig{Mechanism: "scram-sha-512", Username: "u", Password: secret}}, ""},
		{"SCRAM without password", Config{Brokers: []string{"a:1"}, SASL: SASLConfig{Mechanism: MechanismSCRAMSHA256, Username: "u"}}, "needs Username and Password"},
		{"credentials without mechanism", Config{Brokers: []string{"a:1"}, SASL: SASLConfig{Username: "u", Password: secret}}, "Mechanism is empty"},
		{"unknown mechanism", Config{Brokers: []string{"a:1"}, SASL: SASLConfig{Mechanism: "GSSAPI", Username: "u", Password: secret}}, `"GSSAPI"`},
		{"PLAIN in clear off loopback", Config{Brokers: []string{"a:1"}, TLS: TLSConfig{Mode: TLSOff},
			SASL: SASLConfig{Mechanism: MechanismPlain, Username: "u", Password: secret}}, "password in clear"},
		{"PLAIN in clear on loopback", Config{Brokers: []string{"localhost:9092"},
			SASL: SASLConfig{Mechanism: MechanismPlain, Username: "u", Password: secret}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.WithDefaults().Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			case err != nil && strings.Contains(err.Error(), secret):
				t.Fatalf("Validate() error holds the password: %v", err)
			}
		})
	}
}

func TestTLSEnabled(t *testing.T) {
	tests := []struct {
		brokers []string
		mode    TLSMode
		want    bool
	}{
		{[]string{"127.0.0.1:9092"}, TLSAuto, false},
		{[]string{"localhost:9092", "[::1]:9092"}, TLSAuto, false},
		{[]string{"127.0.0.1:9092", "10.0.0.5:9092"}, TLSAuto, true},
		{[]string{"kafka:9092"}, TLSAuto, true},
		{[]string{"kafka:9092"}, TLSOff, false},
		{[]string{"127.0.0.1:9092"}, TLSOn, true},
	}
	for _, tt := range tests {
		if got := (Config{Brokers: tt.brokers, TLS: TLSConfig{Mode: tt.mode}}).TLSEnabled(); got != tt.want {
			t.Errorf("TLSEnabled(%v, %s) = %t, want %t", tt.brokers, tt.mode, got, tt.want)
		}
	}
}

func TestNewLoadsCertificates(t *testing.T) {
	if _, err := New(Config{Brokers: []string{"a:1"}, TLS: TLSConfig{CAFile: "/nonexistent/ca.pem"}}); err == nil || !strings.Contains(err.Error(), "TLS.CAFile") {
		t.Errorf("New with a missing CA file = %v, want an error naming TLS.CAFile", err)
	}
	bad := t.TempDir() + "/ca.pem"
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Brokers: []string{"a:1"}, TLS: TLSConfig{CAFile: bad}}); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("New with a CA file of junk = %v, want an error saying so", err)
	}
	c, err := New(Config{Brokers: []string{"a:1"}, SASL: SASLConfig{Mechanism: MechanismSCRAMSHA512, Username: "u", Password: "pw-never-printed"}})
	if err != nil {
		t.Fatal(err)
	}
	if s := c.String(); strings.Contains(s, "pw-never-printed") || !strings.Contains(s, "SCRAM-SHA-512") || !strings.Contains(s, "tls=true") {
		t.Errorf("String() = %q: want brokers, TLS and mechanism, never the password", s)
	}
	if d := c.Dialer("x"); d.TLS == nil || d.TLS.MinVersion < 0x0303 || d.TLS.InsecureSkipVerify || d.SASLMechanism == nil || d.ClientID != "postline-x" {
		t.Errorf("Dialer = %+v: want TLS 1.2+ verified, SASL and the client ID", d)
	}
}

func TestBatchBytesAndCopyFits(t *testing.T) {
	const limit = 4 << 20
	if got := BatchBytes(limit, 1000); got != limit-BatchOverheadBytes-1000*RecordOverheadBytes {
		t.Errorf("BatchBytes = %d", got)
	}
	if got := BatchBytes(10, 1000); got != 1 {
		t.Errorf("BatchBytes of a tiny limit = %d, want 1", got)
	}
	limits := map[string]int{"jobs": limit, "dlq": RequiredLimit(limit), "small": limit, "retry": RequiredLimit(limit) + 1}
	if err := CheckCopyFits(limits, "jobs", "dlq", "retry"); err != nil {
		t.Errorf("CheckCopyFits with room: %v", err)
	}
	err := CheckCopyFits(limits, "jobs", "dlq", "small", "missing")
	if err == nil || !strings.Contains(err.Error(), "topic small accepts") || !strings.Contains(err.Error(), "missing") ||
		strings.Contains(err.Error(), "topic dlq") || !strings.Contains(err.Error(), fmt.Sprint(RequiredLimit(limit))) {
		t.Errorf("CheckCopyFits = %v: want errors naming small (with the limit to set) and missing, not dlq", err)
	}
}

func TestRetryable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"cancelled", fmt.Errorf("write: %w", context.Canceled), false},
		{"deadline", context.DeadlineExceeded, true},
		{"leader moved", kafka.NotLeaderForPartition, true},
		{"not enough replicas", fmt.Errorf("write: %w", kafka.NotEnoughReplicas), true},
		{"request timed out", kafka.RequestTimedOut, true},
		{"too large (broker)", kafka.MessageSizeTooLarge, false},
		{"too large (client)", kafka.MessageTooLargeError{}, false},
		{"unknown topic", kafka.UnknownTopicOrPartition, false},
		{"bad credentials", kafka.SASLAuthenticationFailed, false},
		{"ACL", kafka.TopicAuthorizationFailed, false},
		{"untrusted certificate", &net.OpError{Op: "remote error", Err: x509.UnknownAuthorityError{}}, false},
		{"connection refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"EOF", io.EOF, true},
		{"write errors, one permanent", kafka.WriteErrors{nil, kafka.MessageSizeTooLarge}, false},
		{"write errors, all transient", kafka.WriteErrors{nil, kafka.LeaderNotAvailable}, true},
		{"anything else", errors.New("mystery"), true},
	}
	for _, tt := range tests {
		if got := Retryable(tt.err); got != tt.want {
			t.Errorf("%s: Retryable(%v) = %t, want %t", tt.name, tt.err, got, tt.want)
		}
	}
}

func TestExplain(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{x509.UnknownAuthorityError{}, "not trusted"},
		{kafka.SASLAuthenticationFailed, "refused the SASL credentials"},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, "cannot reach"},
		{context.DeadlineExceeded, "no answer in time"},
	}
	for _, tt := range tests {
		if got := Explain(tt.err); !strings.Contains(got, tt.want) {
			t.Errorf("Explain(%v) = %q, want it to contain %q", tt.err, got, tt.want)
		}
	}
}
