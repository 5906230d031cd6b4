// Package pgpool builds every PostgreSQL pool of Postline from one Config:
// it parses the URL, caps the connections and warns when the database is
// reached over the network without TLS, so that the worker and postctl
// connect the same way and no binary forgets the check.
//
// The TLS decision ([TLSWarning]) reads the effective pgx configuration, not
// the URL text, so it also covers keyword/value strings, several hosts and
// the PGSSLMODE environment variable. A host that is a Unix socket or a
// loopback address needs no TLS. Any other host must not be reachable in
// plaintext: sslmode disable, allow and prefer (the default, which falls
// back to plaintext and does not verify the server either) are warned
// about; require, verify-ca and verify-full are not.
package pgpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config configures a pool.
type Config struct {
	// URL is the PostgreSQL connection string, URL or keyword/value form;
	// PG* environment variables fill what it leaves out. Required.
	URL string
	// MaxConns caps the pool's connections. Defaults to pgx's default
	// (the larger of 4 and the number of CPUs).
	MaxConns int
}

// Validate reports the first invalid field of cfg.
func (cfg Config) Validate() error {
	switch {
	case cfg.URL == "":
		return errors.New("postgres config: URL is required")
	case cfg.MaxConns < 0 || cfg.MaxConns > math.MaxInt32:
		return fmt.Errorf("postgres config: MaxConns %d out of range", cfg.MaxConns)
	}
	return nil
}

// ParseConfig returns the pool configuration of cfg and its TLS warning
// ("" when there is none; see TLSWarning). Parse errors never quote the
// password.
func ParseConfig(cfg Config) (*pgxpool.Config, string, error) {
	if err := cfg.Validate(); err != nil {
		return nil, "", err
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// pgx hides the password in its copy of the URL, but the URL
		// parser's error it wraps quotes the text it choked on, which can
		// be part of the password: say what to check instead.
		return nil, "", errors.New("parse postgres URL: it is neither a valid postgres:// URL nor a keyword=value string " +
			"(a password with /, ?, #, %, @ or : must be percent-encoded); the URL is not shown because it holds the password")
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = int32(cfg.MaxConns)
	}
	return pc, TLSWarning(pc.ConnConfig.Config), nil
}

// New parses cfg, logs its TLS warning on logger (nil discards it) and
// returns the pool. Like pgxpool.NewWithConfig it does not connect yet: the
// first query does.
func New(ctx context.Context, cfg Config, logger *slog.Logger) (*pgxpool.Pool, error) {
	pc, warning, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	if warning != "" && logger != nil {
		logger.WarnContext(ctx, warning)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres pool: %w", err)
	}
	return pool, nil
}

// TLSWarning returns a warning naming the hosts of c that may be reached
// over the network without TLS, or "" when every connection attempt is to
// a Unix socket or a loopback host, or uses TLS. pgx turns sslmode into its
// attempts: disable is one plaintext attempt, allow a plaintext one then
// TLS, prefer TLS without verification then plaintext; require and the
// verify modes never fall back.
func TLSWarning(c pgconn.Config) string {
	var exposed []string
	check := func(host string, plaintext bool) {
		if plaintext && !local(host) && !slices.Contains(exposed, host) {
			exposed = append(exposed, host)
		}
	}
	check(c.Host, c.TLSConfig == nil)
	for _, fb := range c.Fallbacks {
		check(fb.Host, fb.TLSConfig == nil)
	}
	if len(exposed) == 0 {
		return ""
	}
	return fmt.Sprintf("PostgreSQL host %s may be reached without TLS (sslmode disable, allow or prefer): "+
		"credentials and mail content can cross the network in plaintext; use sslmode=verify-full "+
		"(or require) for a database that is not on this host", strings.Join(exposed, ", "))
}

// local reports whether host is a Unix socket directory or a loopback
// name or address.
func local(host string) bool {
	if strings.HasPrefix(host, "/") {
		return true // a Unix socket directory, as pgx reads it
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
