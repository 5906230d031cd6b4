// Package job owns the mail job: the versioned JSON document that producers
// publish to Kafka and workers consume, its validation, its payload hash, the
// Kafka header names that travel with it, and a small publisher for
// producers.
//
// One definition serves both sides: producers build and validate a Job with
// this package, and the worker decodes into the same type with Decode, so the
// schema cannot drift between them. The JSON Schema in schema/ describes the
// same document for producers in other languages; a test keeps the two in
// step.
//
// The package does not know SMTP, Postgres or how delivery works.
package job
