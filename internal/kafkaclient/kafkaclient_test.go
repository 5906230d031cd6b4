package kafkaclient

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

	"github.com/postline/postline/kafkaconn"
	"github.com/segmentio/kafka-go"
)

func TestNewLoadsCertificates(t *testing.T) {
	if _, err := New(kafkaconn.Config{Brokers: []string{"a:1"}, TLS: kafkaconn.TLSConfig{CAFile: "/nonexistent/ca.pem"}}); err == nil || !strings.Contains(err.Error(), "TLS.CAFile") {
		t.Errorf("New with a missing CA file = %v, want an error naming TLS.CAFile", err)
	}
	bad := t.TempDir() + "/ca.pem"
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(kafkaconn.Config{Brokers: []string{"a:1"}, TLS: kafkaconn.TLSConfig{CAFile: bad}}); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("New with a CA file of junk = %v, want an error saying so", err)
	}
	c, err := New(kafkaconn.Config{Brokers: []string{"a:1"}, SASL: kafkaconn.SASLConfig{Mechanism: kafkaconn.MechanismSCRAMSHA512, Username: "u", Password: "pw-never-printed"}})
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

func TestMayHeal(t *testing.T) {
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
		if got := MayHeal(tt.err); got != tt.want {
			t.Errorf("%s: MayHeal(%v) = %t, want %t", tt.name, tt.err, got, tt.want)
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
