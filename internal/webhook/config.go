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

	"github.com/postline/postline/internal/configerr"
	"github.com/postline/postline/internal/consumer"
	"github.com/postline/postline/internal/deadletter"
	"github.com/postline/postline/internal/kafkaclient"
)

// Defaults of Config.
const (
	DefaultTopic         = "mail.events"
	DefaultGroupID       = "postline-webhooks"
	DefaultDLQTopic      = "mail.webhooks.dlq"
	DefaultConcurrency   = 8
	DefaultDedupeWindow  = 100_000
	DefaultFailingAfter  = 5
	DefaultDisableAfter  = 5 * 24 * time.Hour
	DefaultDeadRetention = 14 * 24 * time.Hour
	DefaultPollInterval  = time.Second
	DefaultStateInterval = 5 * time.Second
	DefaultClaimMargin   = 30 * time.Second
)

// DeadLetterPublisher writes dead letters; *deadletter.Writer is one.
type DeadLetterPublisher interface {
	Publish(ctx context.Context, letters ...deadletter.Letter) error
}

// Config configures a Dispatcher.
type Config struct {
	// Kafka is the cluster of the events topic. Required.
	Kafka *kafkaclient.Cluster
	// Topic is the events topic. Defaults to "mail.events".
	Topic string
	// GroupID prefixes the consumer groups: each endpoint reads the
	// events topic in a group of its own, GroupID + "." + the endpoint's
	// id, shared by every dispatcher replica. Defaults to
	// "postline-webhooks".
	GroupID string
	// Endpoints receive the events, each with its Secret set. Without any
	// the dispatcher runs and sends nothing (a deployment that has its
	// bounce domain but no endpoint yet).
	Endpoints []Endpoint
	// Queue keeps the events waiting for another attempt and the dead
	// letters, in PostgreSQL. Required.
	Queue *Queue
	// DeadLetters takes the events an endpoint gave up on (410 Gone, the
	// horizon passed, endpoint disabled) and records that are not events.
	// Required.
	DeadLetters DeadLetterPublisher
	// Schedule says when a failed event is tried again and when it is
	// given up on. Defaults to the zero Schedule's defaults (at once, 5s,
	// 5m, 30m, 2h, 5h, 10h, 10h, then every 10h to a 72h horizon, 10 %
	// jitter).
	Schedule Schedule
	// FailingAfter is how many attempts in a row must fail before an
	// endpoint counts as failing: new events are then queued without an
	// attempt and the queue is probed one event at a time. Defaults to 5.
	FailingAfter int
	// DisableAfter disables an endpoint that failed every attempt for this
	// long; its events are then dead-lettered until an operator enables it.
	// Defaults to 120h (5 days).
	DisableAfter time.Duration
	// DeadRetention is how long dead letters stay in the queue for
	// replay. Defaults to 336h (14 days).
	DeadRetention time.Duration
	// PollInterval is how often each endpoint's queue is checked for due
	// events. Defaults to 1s.
	PollInterval time.Duration
	// StateInterval is how often each endpoint's shared state (health,
	// disabled) is written and read, its backlog counted and its old dead
	// letters purged. Defaults to 5s.
	StateInterval time.Duration
	// ClaimMargin is added to an endpoint's timeout for the lease of a
	// claimed event: a dispatcher that dies holding it leaves it due again
	// that long after the claim. Defaults to 30s.
	ClaimMargin time.Duration
	// Concurrency is how many POSTs to one endpoint may be in flight at
	// once. Defaults to 8.
	Concurrency int
	// DedupeWindow is how many recently delivered event IDs each endpoint
	// remembers: a copy of one of them (a producer's repeated write) is not
	// sent again. Defaults to 100000.
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
	c.Schedule = c.Schedule.WithDefaults()
	c.FailingAfter = cmp.Or(c.FailingAfter, DefaultFailingAfter)
	c.DisableAfter = cmp.Or(c.DisableAfter, DefaultDisableAfter)
	c.DeadRetention = cmp.Or(c.DeadRetention, DefaultDeadRetention)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.StateInterval = cmp.Or(c.StateInterval, DefaultStateInterval)
	c.ClaimMargin = cmp.Or(c.ClaimMargin, DefaultClaimMargin)
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

// consumerConfig is the configuration of an endpoint's consumer.
func (c Config) consumerConfig(endpointID string) consumer.Config {
	return consumer.Config{
		Kafka:             c.Kafka,
		Topic:             c.Topic,
		GroupID:           c.GroupID + "." + endpointID,
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
		errs = append(errs, configerr.Errorf(field, "webhook config: %s = %v: %s", field, value, why))
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
	if c.Queue == nil {
		bad("Queue", "nil", "required")
	}
	if err := c.Schedule.Validate(); err != nil {
		errs = append(errs, configerr.Within("Schedule", func(err error) error { return fmt.Errorf("webhook config: Schedule.%w", err) }, err))
	}
	if c.FailingAfter < 1 {
		bad("FailingAfter", c.FailingAfter, "must be at least 1")
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"DisableAfter", c.DisableAfter}, {"DeadRetention", c.DeadRetention}, {"PollInterval", c.PollInterval},
		{"StateInterval", c.StateInterval}, {"ClaimMargin", c.ClaimMargin},
	} {
		if f.d <= 0 {
			bad(f.name, f.d, "must be positive")
		}
	}
	if c.Concurrency < 1 {
		bad("Concurrency", c.Concurrency, "must be at least 1")
	}
	if c.DedupeWindow < 1 {
		bad("DedupeWindow", c.DedupeWindow, "must be at least 1")
	}
	seen := make(map[string]bool, len(c.Endpoints))
	for i, ep := range c.Endpoints {
		if err := ep.validate(); err != nil {
			errs = append(errs, configerr.Errorf("Endpoints", "webhook config: Endpoints[%d]: endpoint %s: %w", i, specName(i, ep.ID), err))
		}
		if seen[ep.ID] {
			errs = append(errs, configerr.Errorf("Endpoints", "webhook config: Endpoints[%d].ID = %q: duplicate endpoint id", i, ep.ID))
		}
		seen[ep.ID] = true
	}
	if c.Kafka != nil && c.Topic != "" && c.GroupID != "" {
		if err := c.consumerConfig("endpoint").WithDefaults().Validate(); err != nil {
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
