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

	HooksAddr         string `env:"POSTLINE_HOOKS_ADDR" default:"" usage:"address of the provider webhooks (/hooks/ses, /hooks/mailgun); empty: none; put TLS in front of it"`
	SESTopicARNs      string `env:"POSTLINE_SES_TOPIC_ARNS" default:"" usage:"SNS topics whose SES notifications are taken, comma-separated; setting it enables /hooks/ses"`
	MailgunSigningKey string `env:"POSTLINE_MAILGUN_SIGNING_KEY" default:"" usage:"Mailgun's webhook signing key; setting it enables /hooks/mailgun"`
	RulesFile         string `env:"POSTLINE_RULES_FILE" default:"" usage:"YAML file of classification rules replacing the built-in ones; the workers' value"`

	HTTPAddr        string        `env:"POSTLINE_RECEIVER_HTTP_ADDR" default:":8083" usage:"address of /metrics, /healthz and /readyz"`
	ShutdownTimeout time.Duration `env:"POSTLINE_SHUTDOWN_TIMEOUT" default:"30s" usage:"how long SIGTERM waits for open SMTP sessions and webhook requests"`
	LogLevel        string        `env:"POSTLINE_LOG_LEVEL" default:"info" usage:"debug, info, warn or error"`
}
