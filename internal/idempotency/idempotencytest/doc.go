// Package idempotencytest owns the rules of the claim store as tests can
// check them: [Run] is the behaviour suite that every implementation of
// [Store] must pass (the PostgreSQL store of package idempotency runs it
// in its integration tests), and [Memory] is the one in-memory stand-in for
// tests of the store's users, which passes the same suite.
//
// The suite pins the worker's side ([ClaimStore]: claims, duplicates,
// stale copies, leases and their takeover, compare-and-set records, lives,
// rejected input) and the report applier's ([ReportStore]: recipients
// found by reference and address, Resolve's compare-and-set, its outbox
// entries and the settling of the mail).
//
// A stand-in that copies the store's rules without being checked drifts
// from them: the worker's tests once ran against a fake that started a new
// row at the copy's attempt and never let a lease lapse. Tests that need a
// store to fail, or to say "busy" on cue, wrap a Memory rather than
// re-implement it.
package idempotencytest
