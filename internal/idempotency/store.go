package idempotency

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/postline/postline/internal/configerr"
)

// DefaultLease is the default for Config.Lease.
const DefaultLease = 30 * time.Second

// MaxErrorBytes is how much of a fate's error text is stored.
const MaxErrorBytes = 1024

// ErrNotFound is returned by Store.Get when no row exists for the ID.
var ErrNotFound = errors.New("idempotency: message not found")

// Config configures a Store.
type Config struct {
	// Owner identifies this worker process in lease_owner (host name and
	// process ID, say). Required.
	Owner string
	// Lease is how long a claim is reserved for its owner before another
	// worker may take the row over. Measured on the database's clock.
	// Defaults to DefaultLease (30s).
	Lease time.Duration
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	return cfg
}

// Validate reports the first invalid field of cfg (after WithDefaults).
func (cfg Config) Validate() error {
	if cfg.Owner == "" {
		return configerr.Errorf("Owner", "idempotency config: Owner is required")
	}
	if cfg.Lease < time.Millisecond {
		return configerr.Errorf("Lease", "idempotency config: Lease %v is shorter than 1ms", cfg.Lease)
	}
	return nil
}

// Store reads and writes the per-Message-ID rows. Every batch method is one
// round trip to the database and returns its results in input order. A Store
// is safe for concurrent use; workers sharing a database must use distinct
// owners.
type Store struct {
	cfg    Config
	pool   *pgxpool.Pool
	logger *slog.Logger
	m      *metrics
}

// New returns a Store on pool, which must already be migrated (see schema.Migrate).
// A nil logger discards logs; a nil reg leaves the metrics unregistered.
// Several stores may register on one registry: they share the collectors.
func New(cfg Config, pool *pgxpool.Pool, logger *slog.Logger, reg prometheus.Registerer) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, errors.New("idempotency: nil pool")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Store{cfg: cfg, pool: pool, logger: logger, m: m}, nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	start := time.Now()
	err := s.pool.Ping(ctx)
	s.observe(ctx, opPing, start, err)
	if err != nil {
		return fmt.Errorf("ping idempotency database: %w", err)
	}
	return nil
}

// observe records one round trip of op and counts its failure, unless the
// failure is the caller's context ending (shutdown is not a database error).
func (s *Store) observe(ctx context.Context, op string, start time.Time, err error) {
	s.m.db.Observe(ctx, op, start, err)
}

// noteLost counts and logs the IDs whose compare-and-set was lost.
func (s *Store) noteLost(ctx context.Context, op string, lost []string) {
	if len(lost) == 0 {
		return
	}
	s.m.casConflicts.Add(float64(len(lost)))
	for _, id := range lost {
		s.logger.DebugContext(ctx, "idempotency compare-and-set lost", "op", op, "message_id", id)
	}
}

// leaseSeconds is the lease as the float8 that make_interval takes.
func (s *Store) leaseSeconds() float64 { return s.cfg.Lease.Seconds() }
