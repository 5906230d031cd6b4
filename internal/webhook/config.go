package webhook

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/kafkaconn"
)

// Defaults of Config.
const (
	DefaultTopic         = "mail.events"
	DefaultGroupID       = "postline-webhooks"
	DefaultDLQTopic      = "mail.webhooks.dlq"
	DefaultRetryBase     = time.Second
	DefaultRetryMaxDelay = 5 * time.Minute
	DefaultMaxAttempts   = 8
	DefaultMaxAge        = 24 * time.Hour
	DefaultMaxPending    = 1000
	DefaultConcurrency   = 8
	DefaultDedupeWindow  = 100_000
)

// DeadLetterPublisher writes dead letters; *deadletter.Writer is one.
type DeadLetterPublisher interface {
	Publish(ctx context.Context, letters ...deadletter.Letter) error
}

// Config configures a Dispatcher.
type Config struct {
	// Kafka is the cluster of the events topic. Required.
	Kafka *kafkaconn.Cluster
	// Topic is the events topic. Defaults to "mail.events".
	Topic string
	// GroupID is the consumer group of every dispatcher replica. Defaults
	// to "postline-webhooks".
	GroupID string
	// Endpoints receive the events, each with its Secret set. Required.
	Endpoints []Endpoint
	// DeadLetters takes the events an endpoint gave up on (410 Gone,
	// attempts or age used up) and records that are not events. Required.
	DeadLetters DeadLetterPublisher
	// RetryBase is the wait after the first failed attempt; it doubles
	// per attempt (with jitter: each wait is between half of it and all of
	// it). Defaults to 1s.
	RetryBase time.Duration
	// RetryMaxDelay caps one wait between attempts, a Retry-After the
	// endpoint sent included. Defaults to 5m.
	RetryMaxDelay time.Duration
	// MaxAttempts is how many POSTs one event gets per endpoint before it
	// is dead-lettered. Defaults to 8 (with the default waits, the last
	// comes about 2 minutes after the first).
	MaxAttempts int
	// MaxAge dead-letters an event whose next attempt would start more
	// than this after it was queued for the endpoint. Defaults to 24h.
	MaxAge time.Duration
	// MaxPending bounds each endpoint's backlog: events queued, being
	// sent or waiting for a retry. While one endpoint's backlog is full,
	// consumption waits. Defaults to 1000.
	MaxPending int
	// Concurrency is how many POSTs to one endpoint may be in flight at
	// once. Defaults to 8.
	Concurrency int
	// DedupeWindow is how many recently finished event IDs are remembered:
	// a copy of one of them (a producer's retried write) is not sent
	// again. A copy that comes while the event is being sent is not sent
	// either: it is done when the first is. Defaults to 100000.
	DedupeWindow int
	// SessionTimeout, HeartbeatInterval, DrainTimeout and RebalanceTimeout
	// are passed to the consumer (see consumer.Config); they default to
	// the consumer's defaults. On shutdown, events not finished within
	// DrainTimeout stay uncommitted and are sent again by the next owner.
	SessionTimeout, HeartbeatInterval, DrainTimeout, RebalanceTimeout time.Duration
	// MaxWait is how long a fetch waits for records, passed to the
	// consumer. Defaults to the consumer's default.
	MaxWait time.Duration
	// Transport sends the requests. Defaults to a transport like
	// http.DefaultTransport (proxy from the environment) with TLS 1.2 or
	// later, certificates verified.
	Transport http.RoundTripper
	// NowFunc is the clock. Defaults to time.Now.
	NowFunc func() time.Time
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Topic = cmp.Or(c.Topic, DefaultTopic)
	c.GroupID = cmp.Or(c.GroupID, DefaultGroupID)
	c.RetryBase = cmp.Or(c.RetryBase, DefaultRetryBase)
	c.RetryMaxDelay = cmp.Or(c.RetryMaxDelay, DefaultRetryMaxDelay)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.MaxAge = cmp.Or(c.MaxAge, DefaultMaxAge)
	c.MaxPending = cmp.Or(c.MaxPending, DefaultMaxPending)
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.DedupeWindow = cmp.Or(c.DedupeWindow, DefaultDedupeWindow)
	if c.Transport == nil {
		c.Transport = defaultTransport(c.Concurrency)
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	c.Endpoints = slices.Clone(c.Endpoints)
	for i := range c.Endpoints {
		c.Endpoints[i].Timeout = cmp.Or(c.Endpoints[i].Timeout, DefaultTimeout)
	}
	return c
}

// defaultTransport is Config.Transport's default; it keeps as many idle
// connections per endpoint as requests may be in flight.
func defaultTransport(concurrency int) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   max(concurrency, 1),
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
	}
}

// consumerConfig is the configuration of the dispatcher's consumer.
func (c Config) consumerConfig() consumer.Config {
	return consumer.Config{
		Kafka:             c.Kafka,
		Topic:             c.Topic,
		GroupID:           c.GroupID,
		SessionTimeout:    c.SessionTimeout,
		HeartbeatInterval: c.HeartbeatInterval,
		DrainTimeout:      c.DrainTimeout,
		RebalanceTimeout:  c.RebalanceTimeout,
		MaxWait:           c.MaxWait,
	}
}

// Validate reports every invalid field by name and value (never a secret),
// the endpoints' and the consumer's settings included. Call it on
// c.WithDefaults().
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, value any, why string) {
		errs = append(errs, fmt.Errorf("webhook config: %s = %v: %s", field, value, why))
	}
	if c.Kafka == nil {
		bad("Kafka", "nil", "required")
	}
	if c.DeadLetters == nil {
		bad("DeadLetters", "nil", "required")
	}
	if c.Topic == "" {
		bad("Topic", `""`, "required")
	}
	if c.GroupID == "" {
		bad("GroupID", `""`, "required")
	}
	if c.RetryBase <= 0 {
		bad("RetryBase", c.RetryBase, "must be positive")
	}
	if c.RetryMaxDelay < c.RetryBase {
		bad("RetryMaxDelay", c.RetryMaxDelay, fmt.Sprintf("must be at least RetryBase (%s)", c.RetryBase))
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > 100 {
		bad("MaxAttempts", c.MaxAttempts, "must be 1 to 100")
	}
	if c.MaxAge <= 0 {
		bad("MaxAge", c.MaxAge, "must be positive")
	}
	if c.MaxPending < 1 {
		bad("MaxPending", c.MaxPending, "must be at least 1")
	}
	if c.Concurrency < 1 {
		bad("Concurrency", c.Concurrency, "must be at least 1")
	}
	if c.DedupeWindow < 1 {
		bad("DedupeWindow", c.DedupeWindow, "must be at least 1")
	}
	if len(c.Endpoints) == 0 {
		bad("Endpoints", "[]", "at least one endpoint is required")
	}
	seen := make(map[string]bool, len(c.Endpoints))
	for i, ep := range c.Endpoints {
		if err := ep.validate(); err != nil {
			errs = append(errs, fmt.Errorf("webhook config: Endpoints[%d]: endpoint %s: %w", i, specName(i, ep.ID), err))
		}
		if seen[ep.ID] {
			bad(fmt.Sprintf("Endpoints[%d].ID", i), fmt.Sprintf("%q", ep.ID), "duplicate endpoint id")
		}
		seen[ep.ID] = true
	}
	if c.Kafka != nil && c.Topic != "" && c.GroupID != "" {
		if err := c.consumerConfig().WithDefaults().Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// validate checks an endpoint as the dispatcher takes it: what the file
// parser checks, and the secret, which is named by its variable only.
func (ep *Endpoint) validate() error {
	var errs []error
	if !idPattern.MatchString(ep.ID) {
		errs = append(errs, fmt.Errorf("id: %q: want 1 to 64 of A-Z, a-z, 0-9, '_', '.', '-'", ep.ID))
	}
	if ep.URL == nil {
		errs = append(errs, errors.New("url: required"))
	} else if _, err := checkURL(ep.URL.String()); err != nil {
		errs = append(errs, fmt.Errorf("url: %w", err))
	}
	for _, t := range ep.Types {
		if !t.Valid() {
			errs = append(errs, fmt.Errorf("types: unknown event type %q", t))
		}
	}
	if ep.Timeout <= 0 || ep.Timeout > MaxTimeout {
		errs = append(errs, fmt.Errorf("timeout: %s: want more than 0 and at most %s", ep.Timeout, MaxTimeout))
	}
	if _, err := NewSigner(string(ep.Secret)); err != nil {
		from := "Secret"
		if ep.SecretEnv != "" {
			from = "the secret in $" + ep.SecretEnv
		}
		errs = append(errs, fmt.Errorf("%s: %w", from, err))
	}
	return errors.Join(errs...)
}
