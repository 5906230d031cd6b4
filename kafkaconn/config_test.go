package kafkaconn

import (
	"strings"
	"testing"
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
