// Package idempotency owns the PostgreSQL row kept per Message-ID: the record
// that makes delivery exactly-once in effect although Kafka delivers
// at-least-once.
//
// A worker claims a batch of jobs before sending them ([Store.Claim]): a claim
// takes a time-limited lease on the row, measured on the database's clock, and
// succeeds only when the row is not terminal, carries the same payload hash,
// expects the same attempt number and is not under a live lease. Every later
// transition ([Store.Record], [Store.ExtendLease]) is a compare-and-set on the
// row's version, so a worker whose lease expired and was taken over cannot
// overwrite the newer owner's state; losing a compare-and-set is counted and
// harmless. Every batch operation is one round trip to the database.
//
// The table is created by package schema's migrations, in the connection's
// current schema.
//
// A claim also stores a copy of the record (value, key, trace context
// headers, first publication), so that recovery does not depend on Kafka:
// [Store.Stuck] finds rows left in sending past their lease (the index on
// (status, lease_expires_at) serves it), the reaper re-publishes them and then
// hands them back with [Store.Release]; [Store.ResetForReplay] makes failed
// and dead rows deliverable again for postctl dlq replay.
//
// A claimed job can wait long for a relay before it is sent, so its owner
// keeps the lease alive: a [LeaseKeeper] holds the leases of the jobs in
// hand and extends all of them in one ExtendLease round trip every lease/3,
// without bumping the version, until each outcome is recorded. A row is
// therefore only stuck when its owner stopped extending it.
//
// A row that becomes terminal (sent, failed, dead) loses its payload in the
// statement that records the outcome; its hash stays for deduplication until
// [Store.Purge] deletes it, once its outcome is older than the retention
// (the dedupe window; the reaper purges in small batches).
//
// The package knows rows, not SMTP or Kafka: it takes plain values (IDs,
// hashes, attempt numbers, opaque payload bytes) and decides nothing about
// retries or providers. It does not publish anything itself.
package idempotency
