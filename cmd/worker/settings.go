package main

import (
	"time"

	"github.com/postline/postline/internal/config"
)

// settings are the worker's configuration: each field is an environment
// variable and a flag (see internal/config).
type settings struct {
	config.Kafka
	JobsTopic string `env:"POSTLINE_JOBS_TOPIC" default:"mail.jobs" usage:"topic the jobs are consumed from"`
	DLQTopic  string `env:"POSTLINE_DLQ_TOPIC" default:"mail.dlq" usage:"dead-letter topic"`
	Group     string `env:"POSTLINE_CONSUMER_GROUP" default:"postline-worker" usage:"Kafka consumer group shared by all worker replicas"`
	config.ConsumerGroup
	CommitInterval   time.Duration `env:"POSTLINE_COMMIT_INTERVAL" default:"500ms" usage:"how often finished offsets are committed"`
	RebalanceTimeout time.Duration `env:"POSTLINE_REBALANCE_TIMEOUT" default:"30s" usage:"how long the group waits for members to rejoin a rebalance; must exceed the drain timeout"`
	DrainTimeout     time.Duration `env:"POSTLINE_DRAIN_TIMEOUT" default:"" usage:"how long a revoked or stopping partition waits for its in-flight mail; defaults to 2/3 of the shutdown timeout"`
	LagInterval      time.Duration `env:"POSTLINE_LAG_INTERVAL" default:"2s" usage:"how often the whole group's lag and membership are read (metrics; adaptive backoff input; which members share a relay's rate)"`
	MaxInFlight      int           `env:"POSTLINE_MAX_IN_FLIGHT_PER_PARTITION" default:"2000" usage:"records fetched but not finished, per partition"`
	MaxInFlightBytes int64         `env:"POSTLINE_MAX_IN_FLIGHT_BYTES" default:"100663296" usage:"bytes of the records fetched but not finished, across partitions (each gets an equal share); bounds memory: the default (96 MiB) suits a 512 MiB container"`

	DatabaseURL      string        `env:"POSTLINE_DATABASE_URL" default:"postgres://postline:postline@127.0.0.1:5432/postline?sslmode=disable" usage:"PostgreSQL URL of the idempotency store"`
	DatabaseMaxConns int           `env:"POSTLINE_DATABASE_MAX_CONNS" default:"8" usage:"maximum PostgreSQL connections"`
	Lease            time.Duration `env:"POSTLINE_LEASE" default:"30s" usage:"how long a claimed Message-ID is reserved for this worker"`
	WorkerID         string        `env:"POSTLINE_WORKER_ID" default:"" usage:"lease owner name; defaults to host-pid-random"`

	SMTPRelays   string  `env:"POSTLINE_SMTP_RELAYS" default:"" usage:"SMTP relays as URLs in priority order, comma-separated (smtp://user:pass@host:587?name=a&priority=1&tls=mandatory, smtps://...); when empty, the single relay of the POSTLINE_SMTP_* settings below"`
	SMTPName     string  `env:"POSTLINE_SMTP_NAME" default:"primary" usage:"relay name in metrics and logs"`
	SMTPHost     string  `env:"POSTLINE_SMTP_HOST" default:"127.0.0.1" usage:"SMTP relay host"`
	SMTPPort     int     `env:"POSTLINE_SMTP_PORT" default:"1025" usage:"SMTP relay port"`
	SMTPTLS      string  `env:"POSTLINE_SMTP_TLS" default:"auto" usage:"TLS policy: auto (none on loopback, else mandatory), mandatory, opportunistic, implicit, none"`
	SMTPUsername string  `env:"POSTLINE_SMTP_USERNAME" default:"" usage:"SMTP AUTH user (empty: no AUTH)"`
	SMTPPassword string  `env:"POSTLINE_SMTP_PASSWORD" default:"" usage:"SMTP AUTH password"`
	SMTPHELO     string  `env:"POSTLINE_SMTP_HELO" default:"" usage:"HELO/EHLO name; defaults to the host name"`
	SMTPRate     float64 `env:"POSTLINE_SMTP_RATE" default:"0" usage:"messages/s the relay accepts from the whole fleet (its sending limit), shared by the live workers; 0: unknown (relay URLs take ?rate=)"`

	Senders      int           `env:"POSTLINE_SENDERS" default:"16" usage:"parallel SMTP connections (one per sending goroutine)"`
	BatchSize    int           `env:"POSTLINE_BATCH_SIZE" default:"256" usage:"records per Postgres round trip"`
	BatchBytes   int           `env:"POSTLINE_BATCH_BYTES" default:"8388608" usage:"record bytes gathered into one batch (one Postgres round trip)"`
	BatchLinger  time.Duration `env:"POSTLINE_BATCH_LINGER" default:"5ms" usage:"how long a partial batch waits to fill while the claimers are busy (an idle one takes it at once, or half of this after the last); fates are recorded at most once per this"`
	FastRetries  int           `env:"POSTLINE_FAST_RETRIES" default:"3" usage:"in-attempt resends of a transient failure (a blip) before a delay tier (-1: none)"`
	RetryPrefix  string        `env:"POSTLINE_RETRY_TOPIC_PREFIX" default:"mail.retry" usage:"delay topics are <prefix>.<tier>"`
	RetryTiers   string        `env:"POSTLINE_RETRY_TIERS" default:"5s,30s,2m,10m,1h,6h" usage:"delay tiers; a computed delay is rounded up to one"`
	MaxAttempts  string        `env:"POSTLINE_MAX_ATTEMPTS" default:"urgent=10,normal=8,bulk=5" usage:"attempts allowed per priority"`
	RetryPolicy  string        `env:"POSTLINE_RETRY_POLICY" default:"adaptive" usage:"retry and send policy: adaptive (class-aware delays, retry budgets, per-relay adaptive concurrency and pacing), uniform (exponential backoff, cenkalti/backoff defaults) or reference (the design brief's lag and success-rate model); the last two are baselines"`
	RetryBudgets string        `env:"POSTLINE_RETRY_BUDGETS" default:"urgent=100+5/s+20%,normal=30+1/s+10%,bulk=5+0.2/s+5%" usage:"retry budgets per priority (adaptive policy): burst+refill/s+share% token buckets; a retry takes a token, every first attempt earns share% of one, and a retry without one waits for the refill"`
	MaxAge       string        `env:"POSTLINE_MAX_AGE" default:"urgent=6h,normal=24h,bulk=48h" usage:"age after first publication past which a job is dead, per priority"`

	CircuitThreshold   int           `env:"POSTLINE_CIRCUIT_THRESHOLD" default:"5" usage:"relay faults (refused or lost connections, timeouts, 421 service not available; never throttles) within 10s, fleet-wide, that open a relay's circuit when under 5% of that window's sends succeeded"`
	CircuitCooldown    time.Duration `env:"POSTLINE_CIRCUIT_COOLDOWN" default:"30s" usage:"first open period of a circuit; doubles per failed probe (x4 after timeouts)"`
	CircuitMaxCooldown time.Duration `env:"POSTLINE_CIRCUIT_MAX_COOLDOWN" default:"1h" usage:"cap of a circuit's open period"`
	CircuitRefresh     time.Duration `env:"POSTLINE_CIRCUIT_REFRESH" default:"1s" usage:"how often the fleet's shared circuit state is re-read"`

	RelayStateInterval time.Duration `env:"POSTLINE_RELAY_STATE_INTERVAL" default:"2s" usage:"how often this worker publishes its send control of each relay to Postgres (postctl relays) and reads the rates the other workers learned"`

	EventsTopic      string        `env:"POSTLINE_EVENTS_TOPIC" default:"mail.events" usage:"topic every recipient's transitions are published to (created if missing)"`
	BounceDomain     string        `env:"POSTLINE_BOUNCE_DOMAIN" default:"" usage:"domain of the per-recipient return paths bounce+<token>@<domain> (its MX is the bounce-receiver); empty: mail is sent with its From as the return path and reports cannot be matched"`
	ReturnPathKeys   string        `env:"POSTLINE_RETURN_PATH_KEYS" default:"" usage:"secret keys (16+ bytes each) of the return path tokens, comma-separated, the signing one first; the same value for workers and bounce-receivers; required with POSTLINE_BOUNCE_DOMAIN"`
	UnsubscribeURL   string        `env:"POSTLINE_UNSUBSCRIBE_URL" default:"" usage:"base of the one-click unsubscribe links of bulk mail (and of jobs with unsubscribe true), each <base>/<token>; the bounce-receiver answers them under /unsubscribe on POSTLINE_HOOKS_ADDR, behind HTTPS; empty: https://<bounce domain>/unsubscribe. Needs POSTLINE_BOUNCE_DOMAIN"`
	DSNNotify        string        `env:"POSTLINE_DSN_NOTIFY" default:"auto" usage:"NOTIFY asked of relays that announce DSN: auto (SUCCESS,FAILURE with a bounce domain, else none), none, or a list such as SUCCESS,FAILURE,DELAY"`
	Confirm          string        `env:"POSTLINE_CONFIRM" default:"auto" usage:"whether sent mail awaits a report within the confirmation window: auto (with a bounce domain), on (reports come from provider webhooks), off"`
	ConfirmWindow    time.Duration `env:"POSTLINE_CONFIRM_WINDOW" default:"24h" usage:"how long a report may take to confirm a mail the relay took; after it the mail is unconfirmed (postctl unconfirmed)"`
	UnconfirmedSweep time.Duration `env:"POSTLINE_UNCONFIRMED_SWEEP" default:"1m" usage:"how often mail past its confirmation window is marked unconfirmed"`
	DKIMKeys         string        `env:"POSTLINE_DKIM_KEYS" default:"" usage:"DKIM keys per From domain, domain=selector:keyfile comma-separated (PEM, RSA 2048+ or Ed25519); mail from a domain without a key goes out unsigned; empty: no signing"`
	TemplateRefresh  time.Duration `env:"POSTLINE_TEMPLATE_REFRESH" default:"2s" usage:"how often the template labels (active, canary, fallback) are re-read from Postgres: a label change reaches the worker within this"`
	RulesFile        string        `env:"POSTLINE_RULES_FILE" default:"" usage:"YAML file of reply classification rules replacing the built-in ones (postctl rules prints them); the bounce-receiver must use the same file"`

	ReaperInterval time.Duration `env:"POSTLINE_REAPER_INTERVAL" default:"30s" usage:"how often rows stuck in sending past their lease are re-published"`
	ReaperGrace    time.Duration `env:"POSTLINE_REAPER_GRACE" default:"10s" usage:"how long past its lease a sending row must be before the reaper takes it"`
	Retention      time.Duration `env:"POSTLINE_RETENTION" default:"720h" usage:"how long a sent, failed or dead row is kept (the dedupe window: a duplicate arriving later is sent again); the reaper purges older ones"`

	MaxMessageBytes    int `env:"POSTLINE_MAX_MESSAGE_BYTES" default:"2097152" usage:"largest job record accepted, bytes"`
	MaxBodyBytes       int `env:"POSTLINE_MAX_BODY_BYTES" default:"262144" usage:"largest text+html body accepted, bytes"`
	MaxAttachmentBytes int `env:"POSTLINE_MAX_ATTACHMENT_BYTES" default:"1048576" usage:"largest total attachment size accepted, bytes"`

	HTTPAddr        string        `env:"POSTLINE_HTTP_ADDR" default:":8081" usage:"address of /metrics, /healthz and /readyz"`
	ShutdownTimeout time.Duration `env:"POSTLINE_SHUTDOWN_TIMEOUT" default:"30s" usage:"how long SIGTERM waits for in-flight mail before aborting it"`
	config.Logging
}
