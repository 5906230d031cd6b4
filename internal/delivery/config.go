package delivery

import (
	"cmp"
	"time"

	"github.com/postline/postline/internal/adaptive"
	"github.com/postline/postline/internal/configerr"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/retry"
	"github.com/postline/postline/job"
)

// Default values of Config.
const (
	DefaultSenders         = 16
	DefaultBatchSize       = 256
	DefaultBatchLinger     = 5 * time.Millisecond
	DefaultBatchBytes      = 8 << 20
	DefaultRecheckInterval = time.Second
	DefaultResends         = 3
	DefaultResendBase      = 100 * time.Millisecond
	DefaultResendBudget    = 2 * time.Second
	DefaultMaxHandBackWait = 30 * time.Second
	DefaultPauseCheck      = time.Second
	DefaultStoreBackoff    = 100 * time.Millisecond
	DefaultMaxStoreBackoff = 5 * time.Second
	DefaultConfirmWindow   = 24 * time.Hour
)

// Config configures a Pipeline.
type Config struct {
	// Senders is the number of sending goroutines, each with its own SMTP
	// connection. Defaults to 16.
	Senders int
	// BatchSize caps the records per store round trip. Defaults to 256.
	BatchSize int
	// BatchBytes caps the record bytes gathered into one batch (one store
	// round trip): the batch holds its records until the claim returns, and
	// 256 large mails would be a quarter of a gigabyte held at once. A record
	// larger than this is a batch of its own. Defaults to 8 MiB.
	BatchBytes int
	// BatchLinger is how long a partial batch waits for more records
	// while every claimer is busy; a waiting claimer takes it at once, or
	// half of BatchLinger after the last one (claimGap). The recorder
	// settles at most one batch of fates per BatchLinger. Defaults to 5ms.
	BatchLinger time.Duration
	// Limits bound the size of accepted jobs. Defaults to job's defaults.
	Limits job.Limits
	// RecheckInterval caps how long a record whose Message-ID is leased by
	// another worker waits before it is claimed again. Defaults to 1s.
	RecheckInterval time.Duration
	// Resends is how many times a transient failure (a network blip)
	// is sent again inside the attempt before the job goes to a delay tier. Defaults
	// to 3; negative means none.
	Resends int
	// ResendBase is the first resend's maximum wait (full jitter,
	// doubling). Defaults to 100ms.
	ResendBase time.Duration
	// ResendBudget bounds the time spent on resends of one job.
	// Defaults to 2s.
	ResendBudget time.Duration
	// Tiers are the delay tiers a retry is rounded up to. Defaults to
	// retry.DefaultTiers.
	Tiers retry.Tiers
	// Policy decides how long a failed job waits before its next attempt
	// (rounded up to a tier). Defaults to the project's adaptive policy
	// with its defaults.
	Policy adaptive.Policy
	// Budgets are the retry budgets per priority: a retry takes a token, and
	// one that finds its bucket empty waits for the refill on top of its
	// delay. nil means no budgets.
	Budgets map[job.Priority]adaptive.Bucket
	// SendControl adapts each relay's send concurrency and rate to its
	// throttling (AIMD on connection refusals, a learned rate on rate
	// refusals, a share of Relay.FleetRate). Its AIMD.Max is capped at
	// the relay's connections. nil sends at the pool's full size.
	SendControl *adaptive.SendControlConfig
	// RetryLimits bound attempts and age per priority. Defaults to
	// DefaultRetryLimits.
	RetryLimits map[job.Priority]RetryLimit
	// MaxHandBackWait caps how long a job waits in process when no relay
	// can take it (every circuit open). Defaults to 30s.
	MaxHandBackWait time.Duration
	// PauseCheck is how often the pipeline re-checks, besides on circuit
	// changes, whether consumption must pause. Defaults to 1s.
	PauseCheck time.Duration
	// StoreBackoff is the first wait after a failed store or
	// dead-letter call; it doubles per failure. Defaults to 100ms.
	StoreBackoff time.Duration
	// MaxStoreBackoff caps StoreBackoff's growth. Defaults to 5s.
	MaxStoreBackoff time.Duration
	// ConfirmWindow is how long after the relay took a mail a report may
	// take to confirm it before it is listed as unconfirmed. Defaults to
	// DefaultConfirmWindow (24h).
	ConfirmWindow time.Duration
	// NoConfirm stops the pipeline from giving mail a confirmation window:
	// with no way for reports to come back (no return paths, no provider
	// webhooks), every mail would end unconfirmed. Defaults to false.
	NoConfirm bool
	// Rules classify the relays' replies: whether a failed send is
	// retried, and the bounce type of a recipient refused at RCPT. One rule
	// set decides both, and the report receiver uses the same file.
	// Defaults to failure.Default().
	Rules *failure.RuleSet
	// NowFunc is the clock. Defaults to time.Now.
	NowFunc func() time.Time
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Senders = cmp.Or(c.Senders, DefaultSenders)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.BatchLinger = cmp.Or(c.BatchLinger, DefaultBatchLinger)
	c.BatchBytes = cmp.Or(c.BatchBytes, DefaultBatchBytes)
	c.Limits = c.Limits.WithDefaults()
	c.RecheckInterval = cmp.Or(c.RecheckInterval, DefaultRecheckInterval)
	c.Resends = cmp.Or(c.Resends, DefaultResends)
	c.ResendBase = cmp.Or(c.ResendBase, DefaultResendBase)
	c.ResendBudget = cmp.Or(c.ResendBudget, DefaultResendBudget)
	if len(c.Tiers) == 0 {
		c.Tiers = retry.DefaultTiers
	}
	if c.Policy == nil {
		c.Policy, _ = adaptive.NewAdaptive(adaptive.AdaptiveConfig{}) // defaults are valid
	}
	if c.RetryLimits == nil {
		c.RetryLimits = DefaultRetryLimits
	}
	c.MaxHandBackWait = cmp.Or(c.MaxHandBackWait, DefaultMaxHandBackWait)
	c.PauseCheck = cmp.Or(c.PauseCheck, DefaultPauseCheck)
	c.StoreBackoff = cmp.Or(c.StoreBackoff, DefaultStoreBackoff)
	c.MaxStoreBackoff = cmp.Or(c.MaxStoreBackoff, DefaultMaxStoreBackoff)
	c.ConfirmWindow = cmp.Or(c.ConfirmWindow, DefaultConfirmWindow)
	if c.Rules == nil {
		c.Rules = failure.Default()
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	return c
}

// Validate reports the first invalid field, naming it and its value.
func (c Config) Validate() error {
	switch {
	case c.Senders < 1 || c.Senders > 1024:
		return configerr.Errorf("Senders", "delivery: Senders %d out of range 1..1024", c.Senders)
	case c.BatchBytes < 1:
		return configerr.Errorf("BatchBytes", "delivery: BatchBytes %d must be positive", c.BatchBytes)
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return configerr.Errorf("BatchSize", "delivery: BatchSize %d out of range 1..10000", c.BatchSize)
	case c.BatchLinger < 0:
		return configerr.Errorf("BatchLinger", "delivery: BatchLinger %s is negative", c.BatchLinger)
	case c.RecheckInterval <= 0:
		return configerr.Errorf("RecheckInterval", "delivery: RecheckInterval %s must be positive", c.RecheckInterval)
	case c.Resends > 10:
		return configerr.Errorf("Resends", "delivery: Resends %d is more than 10", c.Resends)
	case c.ResendBase <= 0 || c.ResendBudget <= 0:
		return configerr.Errorf("ResendBase", "delivery: ResendBase %s and ResendBudget %s must be positive", c.ResendBase, c.ResendBudget)
	case c.MaxHandBackWait <= 0 || c.PauseCheck <= 0:
		return configerr.Errorf("MaxHandBackWait", "delivery: MaxHandBackWait %s and PauseCheck %s must be positive", c.MaxHandBackWait, c.PauseCheck)
	case c.StoreBackoff <= 0 || c.MaxStoreBackoff < c.StoreBackoff:
		return configerr.Errorf("StoreBackoff", "delivery: StoreBackoff %s must be positive and at most MaxStoreBackoff %s", c.StoreBackoff, c.MaxStoreBackoff)
	}
	if err := c.Tiers.Validate(); err != nil {
		return configerr.Errorf("Tiers", "delivery: Tiers: %w", err)
	}
	return validateRetryLimits(c.RetryLimits)
}
