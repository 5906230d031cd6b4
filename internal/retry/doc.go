// Package retry owns the delay topics (mail.retry.<tier>): their tiers,
// names and specs, the Writer that publishes retry copies of jobs into them,
// and the Scheduler that re-injects each copy into the jobs topic once it is
// due.
//
// A retry is a copy of the job record (key, value, headers, trace context
// included) with the postline-attempt, postline-not-before,
// postline-first-seen and postline-last-class headers set. A computed delay
// is rounded up to a tier (Tiers.Pick) so every record of a tier topic has
// the same delay, and each partition is FIFO by due time.
//
// The Scheduler consumes every tier topic in one consumer group
// (internal/consumer), parks each record in a delay.Queue until its
// not-before time plus a little jitter, produces due records to the jobs
// topic in batches and marks them done only after the broker acknowledged
// them (produce-then-commit). A crash between the two re-injects the same
// copy again: an exact duplicate (same key and attempt) that the worker's
// claim in Postgres absorbs. Nothing is lost.
//
// With a TracerProvider, the Scheduler makes a "reinject" span per record,
// a child of the trace context the copy carries, and writes the span's own
// context into the re-injected record, so the next attempt's spans join
// the job's trace under it (see tracing.go).
//
// The package does not decide whether or when to retry (that is the
// worker's policy), does not know mail, and does not create topics (see
// TopicSpecs and internal/topic).
package retry
