// Package testkit holds the helpers that tests across the module share and
// that need no running service: one polling helper ([Eventually], on
// [Poll]), one in-process Kafka broker ([FakeKafka]) and one reader of
// Kafka record headers ([Header], [HeaderValues]). Before it, each package
// kept its own copy of these, with slightly different signatures.
//
// The real services of integration tests (Kafka, PostgreSQL, Mailpit,
// Postfix) come from package testenv; behaviour suites that a stand-in must
// pass beside the real thing live beside the interface they check (for the
// claim store, package idempotencytest; for the Kafka writers,
// testkit/writertest).
package testkit
