package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// Defaults for the services started by scripts/stack.sh.
const (
	DefaultKafka       = "127.0.0.1:9092"
	DefaultDatabaseURL = "postgres://postline:postline@127.0.0.1:5432/postline?sslmode=disable"
	DefaultSMTPSink    = "127.0.0.1:2525"
)

// Integration skips t under -short with a message saying what it needs.
func Integration(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("integration test: needs %s (start them with scripts/stack.sh up); skipped under -short", needs)
	}
}

// KafkaBrokers returns the broker addresses of the test Kafka cluster.
func KafkaBrokers() []string {
	return strings.Split(getenv("POSTLINE_TEST_KAFKA", DefaultKafka), ",")
}

// DatabaseURL returns the URL of the test PostgreSQL database.
func DatabaseURL() string {
	return getenv("POSTLINE_TEST_DATABASE_URL", DefaultDatabaseURL)
}

// SMTPSink returns the address of the Postfix smtp-sink used by benchmarks.
func SMTPSink() string {
	return getenv("POSTLINE_TEST_SMTP_SINK", DefaultSMTPSink)
}

// UniqueName returns prefix followed by a random suffix that is safe in
// topic names, consumer group IDs and SQL identifiers.
func UniqueName(prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return prefix + "_" + hex.EncodeToString(b[:])
}

func getenv(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}
