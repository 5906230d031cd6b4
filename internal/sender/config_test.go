package sender

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/failure"
)

func TestEffectiveTLS(t *testing.T) {
	tests := []struct {
		policy TLSPolicy
		host   string
		want   TLSPolicy
	}{
		{TLSAuto, "127.0.0.1", TLSNone},
		{TLSAuto, "127.1.2.3", TLSNone},
		{TLSAuto, "localhost", TLSNone},
		{TLSAuto, "LOCALHOST.", TLSNone},
		{TLSAuto, "::1", TLSNone},
		{TLSAuto, "mail.example.com", TLSMandatory},
		{TLSAuto, "localhost.example.com", TLSMandatory},
		{TLSAuto, "10.0.0.1", TLSMandatory},
		{TLSAuto, "::2", TLSMandatory},
		{TLSNone, "mail.example.com", TLSNone},
		{TLSOpportunistic, "127.0.0.1", TLSOpportunistic},
		{TLSMandatory, "localhost", TLSMandatory},
		{TLSImplicit, "mail.example.com", TLSImplicit},
	}
	for _, tt := range tests {
		if got := effectiveTLS(tt.policy, tt.host); got != tt.want {
			t.Errorf("effectiveTLS(%s, %q) = %s, want %s", tt.policy, tt.host, got, tt.want)
		}
	}
}

func TestConfigWithDefaults(t *testing.T) {
	got := Config{Host: "mail.example.com"}.WithDefaults()
	if got.Name != DefaultName || got.Port != DefaultPort || got.TLS != TLSAuto || got.HELO == "" ||
		got.DialTimeout != DefaultDialTimeout || got.SendTimeout != DefaultSendTimeout ||
		got.MaxMessagesPerConn != DefaultMaxMessagesPerConn || got.IdleTimeout != DefaultIdleTimeout {
		t.Errorf("WithDefaults() = %+v", got)
	}
	kept := Config{Name: "b", Port: 25, TLS: TLSNone, HELO: "me.example.com", MaxMessagesPerConn: -1}.WithDefaults()
	if kept.Name != "b" || kept.Port != 25 || kept.TLS != TLSNone || kept.HELO != "me.example.com" || kept.MaxMessagesPerConn != -1 {
		t.Errorf("WithDefaults() overrode set fields: %+v", kept)
	}
	if err := (Config{Host: "mail.example.com"}).WithDefaults().Validate(); err != nil {
		t.Errorf("Validate(defaults) = %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		field  string // named in the error; "" for valid
	}{
		{"valid", func(*Config) {}, ""},
		{"unlimited messages per connection", func(c *Config) { c.MaxMessagesPerConn = -1 }, ""},
		{"auth without tls on loopback", func(c *Config) { c.Host, c.TLS, c.Username, c.Password = "127.0.0.1", TLSNone, "u", "p" }, ""},
		{"ipv6 host", func(c *Config) { c.Host = "2001:db8::1" }, ""},
		{"empty name", func(c *Config) { c.Name = "" }, "Name"},
		{"name with space", func(c *Config) { c.Name = "a b" }, "Name"},
		{"no host", func(c *Config) { c.Host = "" }, "Host"},
		{"host with port", func(c *Config) { c.Host = "mail.example.com:587" }, "Host"},
		{"host with brackets", func(c *Config) { c.Host = "[::1]" }, "Host"},
		{"port zero", func(c *Config) { c.Port = 0 }, "Port"},
		{"port too big", func(c *Config) { c.Port = 70000 }, "Port"},
		{"unknown tls", func(c *Config) { c.TLS = "starttls" }, "TLS"},
		{"password without username", func(c *Config) { c.Password = "p" }, "Password"},
		{"auth in clear text to a remote host", func(c *Config) { c.TLS, c.Username = TLSNone, "u" }, "Username"},
		{"password with newline", func(c *Config) { c.Username, c.Password = "u", "p\r\nQUIT" }, "Password"},
		{"helo with space", func(c *Config) { c.HELO = "a b" }, "HELO"},
		{"zero dial timeout", func(c *Config) { c.DialTimeout = 0 }, "DialTimeout"},
		{"negative send timeout", func(c *Config) { c.SendTimeout = -time.Second }, "SendTimeout"},
		{"zero idle timeout", func(c *Config) { c.IdleTimeout = 0 }, "IdleTimeout"},
		{"priority and max conns", func(c *Config) { c.Priority, c.MaxConns = 3, 8 }, ""},
		{"negative priority", func(c *Config) { c.Priority = -1 }, "Priority"},
		{"negative max conns", func(c *Config) { c.MaxConns = -1 }, "MaxConns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{Host: "mail.example.com"}.WithDefaults()
			tt.modify(&c)
			err := c.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tt.field)
			}
			// New fills zero values first; what stays invalid, it rejects.
			if _, err := New(c, nil, nil); (err == nil) != (c.WithDefaults().Validate() == nil) {
				t.Errorf("New() = %v, disagreeing with Validate after WithDefaults", err)
			}
		})
	}
}

// TestErrorClassifiedPermanent pins down which sender errors the failure
// table calls permanent: only 5xx replies to the mail transaction.
func TestErrorClassifiedPermanent(t *testing.T) {
	tests := []struct {
		stage string
		code  int
		want  bool
	}{
		{StageRcpt, 550, true},
		{StageRcpt, 553, true},
		{StageMail, 552, true},
		{StageData, 554, true},
		{StageBody, 554, true},
		{StageBody, 552, true},
		{StageBuild, 0, true},
		{StageMail, 530, false}, // auth required
		{StageMail, 534, false},
		{StageRcpt, 535, false},
		{StageRcpt, 450, false},
		{StageRcpt, 421, false},
		{StageBody, 451, false},
		{StageBody, 0, false}, // connection lost mid-message
		{StageMail, 0, false},
		{StageConn, 0, false},
		{StageDial, 0, false},
		{StageTLS, 0, false},
		{StageHello, 554, false}, // the relay refuses us, not the message
		{StageTLS, 554, false},
		{StageAuth, 535, false},
		{StageAuth, 504, false},
	}
	for _, tt := range tests {
		e := &Error{Stage: tt.stage, Code: tt.code}
		if got := failure.Classify(e).Class == failure.Permanent; got != tt.want {
			t.Errorf("permanent at %s with %d = %v, want %v", tt.stage, tt.code, got, tt.want)
		}
	}
}

func TestErrorString(t *testing.T) {
	cause := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	tests := []struct {
		err  *Error
		want string
	}{
		{&Error{Relay: "p", Stage: StageRcpt, Code: 550, Enhanced: "5.1.1", Text: "no such user", Err: cause}, "smtp p: rcpt: 550 5.1.1 no such user"},
		{&Error{Relay: "p", Stage: StageMail, Code: 451, Text: "later"}, "smtp p: mail: 451 later"},
		{&Error{Relay: "p", Stage: StageDial, Err: cause}, "smtp p: dial: " + cause.Error()},
		{&Error{Relay: "p", Stage: StageBody, Err: cause, detail: "EOF"}, "smtp p: body: EOF"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	if e := (&Error{Err: cause}); !errors.Is(e, cause) {
		t.Error("Unwrap does not reach the cause")
	}
}

func TestReplyParsing(t *testing.T) {
	tests := []struct {
		code         int
		known, in    string
		wantEnhanced string
		wantText     string
	}{
		{550, "", "5.1.1 no such user", "5.1.1", "no such user"},
		{550, "5.1.1", "no such user", "5.1.1", "no such user"},
		{421, "", " 4.3.2 bye ", "4.3.2", "bye"},
		{550, "", "mailbox unavailable, sorry", "", "mailbox unavailable, sorry"},
		{451, "", "5.1.1 class mismatch", "", "5.1.1 class mismatch"},
		{554, "", "2.0.0.1 not a status", "", "2.0.0.1 not a status"},
	}
	for _, tt := range tests {
		enh, text := splitReply(tt.code, tt.known, tt.in)
		if enh != tt.wantEnhanced || text != tt.wantText {
			t.Errorf("parse %q = %q, %q; want %q, %q", tt.in, enh, text, tt.wantEnhanced, tt.wantText)
		}
	}
}
