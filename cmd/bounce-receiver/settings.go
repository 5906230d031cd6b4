package main

import (
	"time"

	"github.com/postline/postline/internal/config"
)

// settings are the receiver's configuration: each field is an environment
// variable and a flag (see internal/config).
type settings struct {
	config.Kafka
	EventsTopic      string `env:"POSTLINE_EVENTS_TOPIC" default:"mail.events" usage:"topic the recipients' transitions are published to (created if missing)"`
	DatabaseURL      string `env:"POSTLINE_DATABASE_URL" default:"postgres://postline:postline@127.0.0.1:5432/postline?sslmode=disable" usage:"PostgreSQL URL of the store the workers use"`
	DatabaseMaxConns int    `env:"POSTLINE_DATABASE_MAX_CONNS" default:"4" usage:"maximum PostgreSQL connections"`

	BounceDomain      string `env:"POSTLINE_BOUNCE_DOMAIN" default:"" usage:"domain of the return paths bounce+<token>@<domain>; required, the workers' value"`
	ReturnPathKeys    string `env:"POSTLINE_RETURN_PATH_KEYS" default:"" usage:"secret keys of the return path tokens, comma-separated; required, the workers' value"`
	SMTPAddr          string `env:"POSTLINE_BOUNCE_SMTP_ADDR" default:":2525" usage:"address the SMTP server for the bounce domain listens on"`
	FeedbackLocalPart string `env:"POSTLINE_BOUNCE_FEEDBACK_LOCAL_PART" default:"fbl" usage:"local part of the bounce domain's address complaint (ARF) reports are sent to"`
	TLSCertFile       string `env:"POSTLINE_BOUNCE_TLS_CERT_FILE" default:"" usage:"PEM certificate chain for STARTTLS on the SMTP server (with the key file); empty: no STARTTLS"`
	TLSKeyFile        string `env:"POSTLINE_BOUNCE_TLS_KEY_FILE" default:"" usage:"PEM private key of the STARTTLS certificate"`

	MaxSessions          int   `env:"POSTLINE_BOUNCE_MAX_SESSIONS" default:"100" usage:"most SMTP sessions open at once; a connection over it is greeted 421 4.7.0 and closed"`
	MaxSessionsPerClient int   `env:"POSTLINE_BOUNCE_MAX_SESSIONS_PER_CLIENT" default:"10" usage:"most SMTP sessions open at once from one client (an IPv4 address or an IPv6 /64); over it, 421 4.7.0"`
	MaxParseBytes        int64 `env:"POSTLINE_BOUNCE_MAX_PARSE_BYTES" default:"262144" usage:"bytes of a message's start held in memory and parsed, the rest is read and dropped; sessions x this bounds the message data in memory"`

	HooksAddr         string `env:"POSTLINE_HOOKS_ADDR" default:"" usage:"address of the public HTTP server: the one-click unsubscribe links (/unsubscribe/, always) and the provider webhooks (/hooks/ses, /hooks/mailgun, when configured); empty: none; put TLS in front of it"`
	SESTopicARNs      string `env:"POSTLINE_SES_TOPIC_ARNS" default:"" usage:"SNS topics whose SES notifications are taken, comma-separated; setting it enables /hooks/ses"`
	MailgunSigningKey string `env:"POSTLINE_MAILGUN_SIGNING_KEY" default:"" usage:"Mailgun's webhook signing key; setting it enables /hooks/mailgun"`
	RulesFile         string `env:"POSTLINE_RULES_FILE" default:"" usage:"YAML file of classification rules replacing the built-in ones; the workers' value"`
	HooksMaxConns     int    `env:"POSTLINE_HOOKS_MAX_CONNECTIONS" default:"256" usage:"most connections open at once to POSTLINE_HOOKS_ADDR; one over it is answered 503 and closed"`
	HooksMaxRequests  int    `env:"POSTLINE_HOOKS_MAX_REQUESTS" default:"64" usage:"most requests handled at once on POSTLINE_HOOKS_ADDR; one over it is answered 503 with Retry-After (the providers post it again)"`

	HTTPAddr        string        `env:"POSTLINE_RECEIVER_HTTP_ADDR" default:":8083" usage:"address of /metrics, /healthz and /readyz"`
	ShutdownTimeout time.Duration `env:"POSTLINE_SHUTDOWN_TIMEOUT" default:"30s" usage:"how long SIGTERM waits for open SMTP sessions and webhook requests"`
	config.Logging
}
