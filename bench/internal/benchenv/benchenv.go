// Package benchenv owns what every benchmark harness needs around the code
// it measures: the fixture of a run (topics, schema, worker settings), the
// -brokers and -database-url flags of the local stack, a PostgreSQL schema
// of its own, a free loopback address, a random name suffix, a directory
// for logs, and the machine's CPU model and memory.
package benchenv

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// CreateSchema creates schema in the database at base, a postgres:// URL,
// and returns base with search_path set to it.
func CreateSchema(ctx context.Context, base, schema string) (string, error) {
	schemaURL, err := SchemaURL(base, schema)
	if err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return "", fmt.Errorf("create schema %s: %w", schema, err)
	}
	return schemaURL, nil
}

// SchemaURL returns base, a postgres:// URL, with search_path set to
// schema: how a harness connects to a schema that exists.
func SchemaURL(base, schema string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", errors.New("-database-url must be a postgres:// URL")
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// DropSchema drops schema and everything in it.
func DropSchema(ctx context.Context, base, schema string) error {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("drop schema %s: connect: %w", schema, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}

// FreeAddr returns a loopback address that was free a moment ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// RandomHex returns n random bytes in hex: a suffix for names of a run.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// CPUModel returns the first "model name" of /proc/cpuinfo, "" if none.
func CPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// LogDir returns dir, made if it does not exist, or a new temporary
// directory named after prefix when dir is empty: where a harness puts the
// logs of the processes it runs.
func LogDir(dir, prefix string) (string, error) {
	if dir == "" {
		return os.MkdirTemp("", prefix)
	}
	return dir, os.MkdirAll(dir, 0o755)
}

// The local stack's addresses (scripts/stack.sh), the defaults of the
// harnesses' -brokers and -database-url.
const (
	DefaultBrokers     = "127.0.0.1:9092"
	DefaultDatabaseURL = "postgres://postline:postline@127.0.0.1:5432/postline?sslmode=disable"
)

// StackFlags are a harness's -brokers and -database-url flags.
type StackFlags struct {
	brokers     string
	databaseURL string
}

// AddStackFlags defines -brokers and -database-url on fs, with defaults
// from $POSTLINE_KAFKA_BROKERS and $POSTLINE_DATABASE_URL, else the local
// stack's. databaseUsage says what the harness creates in the database.
func AddStackFlags(fs *flag.FlagSet, databaseUsage string) *StackFlags {
	s := &StackFlags{}
	fs.StringVar(&s.brokers, "brokers", cmp.Or(os.Getenv("POSTLINE_KAFKA_BROKERS"), DefaultBrokers), "Kafka brokers, comma-separated")
	fs.StringVar(&s.databaseURL, "database-url", cmp.Or(os.Getenv("POSTLINE_DATABASE_URL"), DefaultDatabaseURL), databaseUsage)
	return s
}

// Brokers are the -brokers, split at the commas.
func (s *StackFlags) Brokers() []string { return strings.Split(s.brokers, ",") }

// DatabaseURL is the -database-url.
func (s *StackFlags) DatabaseURL() string { return s.databaseURL }

// MemTotal is the machine's memory in bytes, from /proc/meminfo; false
// when it cannot be read.
func MemTotal() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	return parseMemTotal(string(b))
}

// parseMemTotal reads the MemTotal line of a /proc/meminfo, in kB (KiB).
func parseMemTotal(meminfo string) (int64, bool) {
	for line := range strings.Lines(meminfo) {
		if k, v, ok := strings.Cut(line, ":"); ok && k == "MemTotal" {
			if f := strings.Fields(v); len(f) == 2 && f[1] == "kB" {
				if kib, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kib << 10, true
				}
			}
		}
	}
	return 0, false
}
