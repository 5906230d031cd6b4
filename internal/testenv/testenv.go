// Package testenv gives integration tests their real services: the addresses
// of the Kafka broker, PostgreSQL and SMTP servers started by scripts/stack.sh,
// and helpers that carve out an isolated topic, consumer group or database
// schema per test so tests can run in parallel.
//
// Addresses come from the environment with loopback defaults:
//
//	POSTLINE_TEST_KAFKA         127.0.0.1:9092
//	POSTLINE_TEST_DATABASE_URL  postgres://postline:postline@127.0.0.1:5432/postline?sslmode=disable
//	POSTLINE_TEST_MAILPIT_BIN   mailpit (looked up in PATH, then $(go env GOPATH)/bin)
//	POSTLINE_TEST_SMTP_SINK     127.0.0.1:2525 (Postfix smtp-sink, benchmarks)
//
// Every helper skips the test under `go test -short`.
package testenv
