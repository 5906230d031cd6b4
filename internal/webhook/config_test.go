package webhook

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/internal/testkit/writertest"
	"github.com/postline/postline/kafkaconn"
)

func testCluster(t testing.TB) *kafkaclient.Cluster {
	t.Helper()
	c, err := kafkaclient.New(kafkaconn.Config{Brokers: []string{"127.0.0.1:9092"}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestConfigDefaults(t *testing.T) {
	c := Config{Endpoints: []Endpoint{{ID: "a"}}}.WithDefaults()
	if c.Topic != "mail.events" || c.GroupID != "postline-webhooks" || c.Schedule.Horizon != 72*time.Hour ||
		len(c.Schedule.Delays) != 7 || c.FailingAfter != 5 || c.DisableAfter != 120*time.Hour || c.DeadRetention != 14*24*time.Hour ||
		c.Concurrency != 8 || c.DedupeWindow != 100_000 ||
		c.Transport == nil || c.NowFunc == nil || c.Endpoints[0].Timeout != DefaultTimeout {
		t.Errorf("defaults = %+v", c)
	}
	in := []Endpoint{{ID: "a"}}
	_ = Config{Endpoints: in}.WithDefaults()
	if in[0].Timeout != 0 {
		t.Error("WithDefaults changed the caller's endpoints")
	}
}

func TestConfigValidate(t *testing.T) {
	long := "whsec_" + base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	valid := func() Config {
		return Config{
			Kafka: testCluster(t), DeadLetters: writertest.DeadLetters(), Queue: &Queue{},
			Endpoints: []Endpoint{{ID: "billing", URL: mustURL(t, "https://b.example/h"), SecretEnv: "BILLING_SECRET", Secret: Secret(testSecret)}},
		}
	}
	if err := valid().WithDefaults().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	tests := []struct {
		name   string
		change func(*Config)
		want   string
		never  string
	}{
		{"no kafka", func(c *Config) { c.Kafka = nil }, "Kafka = nil: required", ""},
		{"no dead letters", func(c *Config) { c.DeadLetters = nil }, "DeadLetters = nil: required", ""},
		{"secret unset", func(c *Config) { c.Endpoints[0].Secret = "" }, `Endpoints[0]: endpoint "billing": the secret in $BILLING_SECRET: secret is empty`, ""},
		{"secret without prefix", func(c *Config) { c.Endpoints[0].Secret = Secret(strings.TrimPrefix(testSecret, "whsec_")) },
			`endpoint "billing": the secret in $BILLING_SECRET: secret does not start with "whsec_"`, "MfKQ9r8G"},
		{"secret too short", func(c *Config) { c.Endpoints[0].Secret = Secret(long) },
			`endpoint "billing": the secret in $BILLING_SECRET: secret holds 16 bytes`, long[6:14]},
		{"secret not base64", func(c *Config) { c.Endpoints[0].Secret = "whsec_s3cr3t!value!" },
			"is not standard base64", "s3cr3t"},
		{"secret without its variable", func(c *Config) { c.Endpoints[0].SecretEnv, c.Endpoints[0].Secret = "", "" },
			`endpoint "billing": Secret: secret is empty`, ""},
		{"http off loopback", func(c *Config) { c.Endpoints[0].URL = mustURL(t, "http://u:pw@b.example/h?k=v") },
			`endpoint "billing": url: http://b.example/h: http is allowed only on loopback`, "pw@"},
		{"duplicate id", func(c *Config) { c.Endpoints = append(c.Endpoints, c.Endpoints[0]) }, `Endpoints[1].ID = "billing": duplicate endpoint id`, ""},
		{"bad timeout", func(c *Config) { c.Endpoints[0].Timeout = time.Hour }, `endpoint "billing": timeout: 1h0m0s`, ""},
		{"no queue", func(c *Config) { c.Queue = nil }, "Queue = nil: required", ""},
		{"bad delay", func(c *Config) { c.Schedule.Delays = []time.Duration{time.Second, -time.Second} }, "Schedule.Delays[1] = -1s: must be positive", ""},
		{"bad horizon", func(c *Config) { c.Schedule.Horizon = -time.Hour }, "Schedule.Horizon = -1h0m0s", ""},
		{"failing after", func(c *Config) { c.FailingAfter = -1 }, "FailingAfter = -1", ""},
		{"disable after", func(c *Config) { c.DisableAfter = -time.Hour }, "DisableAfter = -1h0m0s: must be positive", ""},
		{"concurrency", func(c *Config) { c.Concurrency = -2 }, "Concurrency = -2", ""},
		{"consumer settings", func(c *Config) { c.HeartbeatInterval = time.Minute }, "HeartbeatInterval", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.change(&c)
			err := c.WithDefaults().Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), strings.TrimPrefix(testSecret, "whsec_")) || (tt.never != "" && strings.Contains(err.Error(), tt.never)) {
				t.Errorf("error %q shows a secret", err)
			}
		})
	}
}
