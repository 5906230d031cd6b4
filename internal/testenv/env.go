package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/postline/postline/internal/kafkaclient"
	"github.com/postline/postline/kafkaconn"
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

// Kafka returns a cluster of the test Kafka brokers (plaintext, on
// loopback), built the way the binaries build theirs.
func Kafka() *kafkaclient.Cluster {
	return KafkaCluster(KafkaBrokers()...)
}

// KafkaCluster returns a plaintext cluster of brokers, which must be on
// loopback; it panics on a bad address, since tests pass constants.
func KafkaCluster(brokers ...string) *kafkaclient.Cluster {
	c, err := kafkaclient.New(kafkaconn.Config{Brokers: brokers, ClientID: "postline-test"})
	if err != nil {
		panic(fmt.Sprintf("testenv: kafka cluster %v: %v", brokers, err))
	}
	return c
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

// SecureKafka returns the configuration of the stack's SASL_SSL listener:
// SCRAM-SHA-512 with the stack's user and password, TLS verified against
// the stack's CA. It skips t under -short and fails it when the stack's
// environment does not describe the listener (eval "$(scripts/stack.sh env)").
func SecureKafka(t testing.TB) kafkaconn.Config {
	t.Helper()
	Integration(t, "Kafka's SASL_SSL listener")
	addr, user := os.Getenv("POSTLINE_TEST_KAFKA_SECURE"), os.Getenv("POSTLINE_TEST_KAFKA_SASL_USER")
	passFile, ca := os.Getenv("POSTLINE_TEST_KAFKA_SASL_PASSWORD_FILE"), os.Getenv("POSTLINE_TEST_TLS_CA")
	if addr == "" || user == "" || passFile == "" || ca == "" {
		t.Fatal("POSTLINE_TEST_KAFKA_SECURE, _SASL_USER, _SASL_PASSWORD_FILE or POSTLINE_TEST_TLS_CA is unset: " +
			`run eval "$(scripts/stack.sh env)" (scripts/stack.sh up starts the listener)`)
	}
	pass, err := os.ReadFile(passFile)
	if err != nil {
		t.Fatalf("SASL password file: %v", err)
	}
	return kafkaconn.Config{
		Brokers:  strings.Split(addr, ","),
		ClientID: "postline-test",
		TLS:      kafkaconn.TLSConfig{Mode: kafkaconn.TLSOn, CAFile: ca},
		SASL: kafkaconn.SASLConfig{
			Mechanism: kafkaconn.MechanismSCRAMSHA512,
			Username:  user,
			Password:  strings.TrimRight(string(pass), "\r\n"),
		},
	}
}

// UntrustedCA returns a CA file that did not sign the stack's certificates.
func UntrustedCA(t testing.TB) string {
	t.Helper()
	ca := os.Getenv("POSTLINE_TEST_TLS_UNTRUSTED_CA")
	if ca == "" {
		t.Fatal(`POSTLINE_TEST_TLS_UNTRUSTED_CA is unset: run eval "$(scripts/stack.sh env)"`)
	}
	return ca
}
