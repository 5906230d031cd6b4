package providerhook

import (
	"strings"
	"testing"
	"time"
)

func TestSESConfigValidate(t *testing.T) {
	if err := (SESConfig{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	tests := []struct {
		name  string
		cfg   SESConfig
		field string
	}{
		{"pattern not a regexp", SESConfig{SNSHostPattern: "^(sns$"}, "SNSHostPattern"},
		{"pattern not anchored", SESConfig{SNSHostPattern: `sns\.[a-z0-9-]+\.amazonaws\.com`}, "SNSHostPattern"},
		{"negative timeout", SESConfig{FetchTimeout: -time.Second}, "FetchTimeout"},
		{"negative cache", SESConfig{CertCacheSize: -1}, "CertCacheSize"},
		{"negative body cap", SESConfig{MaxBodyBytes: -1}, "MaxBodyBytes"},
		{"empty topic", SESConfig{TopicARNs: []string{"arn:aws:sns:us-east-1:1:T", ""}}, "TopicARNs[1]"},
	}
	for _, tt := range tests {
		err := tt.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: Validate = %v, want an error naming %s", tt.name, err, tt.field)
		}
	}
}

func TestMailgunConfigValidate(t *testing.T) {
	if err := (MailgunConfig{SigningKey: "k"}).WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	tests := []struct {
		name  string
		cfg   MailgunConfig
		field string
	}{
		{"no key", MailgunConfig{}, "SigningKey"},
		{"negative window", MailgunConfig{SigningKey: "k", MaxAge: -time.Minute}, "MaxAge"},
		{"negative replay cache", MailgunConfig{SigningKey: "k", ReplayCacheSize: -1}, "ReplayCacheSize"},
		{"negative body cap", MailgunConfig{SigningKey: "k", MaxBodyBytes: -1}, "MaxBodyBytes"},
	}
	for _, tt := range tests {
		err := tt.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: Validate = %v, want an error naming %s", tt.name, err, tt.field)
		}
	}
	if _, err := NewMailgun(MailgunConfig{}, &sink{}, discard(), nil); err == nil {
		t.Error("NewMailgun without a signing key succeeded")
	}
}
