package delivery

import (
	"cmp"
	"fmt"
	"time"

	"github.com/postline/postline/job"
)

// Default values of Config.
const (
	DefaultSenders           = 16
	DefaultBatchSize         = 256
	DefaultBatchLinger       = 5 * time.Millisecond
	DefaultRecheckInterval   = time.Second
	DefaultRetryBackoff      = time.Second
	DefaultMaxRetryBackoff   = 30 * time.Second
	DefaultStoreRetryBackoff = 100 * time.Millisecond
	DefaultMaxStoreBackoff   = 5 * time.Second
)

// Config configures a Pipeline.
type Config struct {
	// Senders is the number of sending goroutines, each with its own SMTP
	// connection. Defaults to 16.
	Senders int
	// BatchSize caps the records per store round trip. Defaults to 256.
	BatchSize int
	// BatchLinger is how long a partial batch waits for more records.
	// Defaults to 5ms.
	BatchLinger time.Duration
	// Limits bound the size of accepted jobs. Defaults to job's defaults.
	Limits job.Limits
	// RecheckInterval caps how long a record whose Message-ID is leased by
	// another worker waits before it is claimed again. Defaults to 1s.
	RecheckInterval time.Duration
	// RetryBackoff is the first wait before a retryable send failure is
	// retried in process; it doubles per retry. Defaults to 1s.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps RetryBackoff's growth. Defaults to 30s.
	MaxRetryBackoff time.Duration
	// StoreRetryBackoff is the first wait after a failed store or
	// dead-letter call; it doubles per failure. Defaults to 100ms.
	StoreRetryBackoff time.Duration
	// MaxStoreBackoff caps StoreRetryBackoff's growth. Defaults to 5s.
	MaxStoreBackoff time.Duration
	// NowFunc is the clock. Defaults to time.Now.
	NowFunc func() time.Time
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Senders = cmp.Or(c.Senders, DefaultSenders)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.BatchLinger = cmp.Or(c.BatchLinger, DefaultBatchLinger)
	c.Limits = c.Limits.WithDefaults()
	c.RecheckInterval = cmp.Or(c.RecheckInterval, DefaultRecheckInterval)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, DefaultRetryBackoff)
	c.MaxRetryBackoff = cmp.Or(c.MaxRetryBackoff, DefaultMaxRetryBackoff)
	c.StoreRetryBackoff = cmp.Or(c.StoreRetryBackoff, DefaultStoreRetryBackoff)
	c.MaxStoreBackoff = cmp.Or(c.MaxStoreBackoff, DefaultMaxStoreBackoff)
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	return c
}

// Validate reports the first invalid field, naming it and its value.
func (c Config) Validate() error {
	switch {
	case c.Senders < 1 || c.Senders > 1024:
		return fmt.Errorf("delivery: Senders %d out of range 1..1024", c.Senders)
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return fmt.Errorf("delivery: BatchSize %d out of range 1..10000", c.BatchSize)
	case c.BatchLinger < 0:
		return fmt.Errorf("delivery: BatchLinger %s is negative", c.BatchLinger)
	case c.RecheckInterval <= 0:
		return fmt.Errorf("delivery: RecheckInterval %s must be positive", c.RecheckInterval)
	case c.RetryBackoff <= 0 || c.MaxRetryBackoff < c.RetryBackoff:
		return fmt.Errorf("delivery: RetryBackoff %s must be positive and at most MaxRetryBackoff %s", c.RetryBackoff, c.MaxRetryBackoff)
	case c.StoreRetryBackoff <= 0 || c.MaxStoreBackoff < c.StoreRetryBackoff:
		return fmt.Errorf("delivery: StoreRetryBackoff %s must be positive and at most MaxStoreBackoff %s", c.StoreRetryBackoff, c.MaxStoreBackoff)
	}
	return nil
}
