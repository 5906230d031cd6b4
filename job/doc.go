// Package job owns the mail job: the versioned JSON document that producers
// publish to Kafka and workers consume, its validation and its rejection
// reasons, its payload hash, and a small publisher for producers.
//
// One definition serves both sides: producers build and validate a Job with
// this package, and the worker decodes into the same type with Decode, so the
// schema cannot drift between them. The JSON Schema in schema/ describes the
// same document for producers in other languages; a test keeps the two in
// step. The Kafka headers the workers keep on a job's records are theirs
// (internal/jobheader), not part of this API.
//
// The package does not know SMTP, Postgres or how delivery works.
package job
