// Package testenv gives integration tests their real services: the addresses
// of the Kafka broker, PostgreSQL and SMTP servers started by scripts/stack.sh,
// helpers that carve out an isolated topic, consumer group or database
// schema per test so tests can run in parallel, and a headless browser for
// UI tests.
//
// Addresses come from the environment with loopback defaults:
//
//	POSTLINE_TEST_KAFKA         127.0.0.1:9092
//	POSTLINE_TEST_DATABASE_URL  postgres://postline:postline@127.0.0.1:5432/postline?sslmode=disable
//	POSTLINE_TEST_MAILPIT_BIN   mailpit (looked up in PATH, then $(go env GOPATH)/bin)
//	POSTLINE_TEST_SMTP_SINK     127.0.0.1:2525 (Postfix smtp-sink, benchmarks)
//	POSTLINE_TEST_POSTFIX       127.0.0.1:2526 (the Postfix relay, see Postfix)
//	POSTLINE_TEST_POSTFIX_DEST  127.0.0.1:2527 (where that relay delivers)
//	POSTLINE_TEST_BOUNCE_ADDR   127.0.0.1:2530 (where it delivers bounces and DSNs)
//	POSTLINE_TEST_BOUNCE_DOMAIN bounces.postline.test
//	POSTLINE_TEST_POSTFIX_CONFIG, POSTLINE_TEST_POSTFIX_LOG  its config directory and mail log
//	POSTLINE_TEST_CHROMIUM      no default: Debian's chromium, for Browser (UI tests skip without it)
//	POSTLINE_TEST_ARTIFACTS     <repo>/.artifacts (screenshots, see ArtifactDir)
//
// Every helper skips the test under `go test -short`.
package testenv
