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
// The row is kept lean and its common updates HOT (migration 0011): it holds
// no copy of the record, since until the fate is recorded the record's
// offset is not committed and Kafka redelivers it after a crash, and the
// redelivered copy re-claims the row once the lease has expired. No index
// covers a column a status or lease update changes (the table's indexes are
// the key and created_at, which the retention purge scans), so sending ->
// sent, sending -> retrying, a re-claim and a lease extension write no index
// entry.
//
// A copy of the record (value, key, trace context headers) is stored beside
// the row, in postline_message_records, only where Kafka will not redeliver
// it: [Store.ResetForReplay] stores the replayed record, because postctl dlq
// replay publishes after the reset, and a caller may pass one to
// [Store.Claim]. [Store.StalledReplays] finds replays left pending with
// nothing on their way and [Store.Stuck] rows with a copy left in sending
// past their lease; the reaper re-publishes them (and hands stuck ones back
// with [Store.HandBack]). Both scans start from the copies, which are few.
//
// A claimed job can wait long for a relay before it is sent, so its owner
// keeps the lease alive: a [LeaseKeeper] holds the leases of the jobs in
// hand and extends all of them in one ExtendLease round trip every lease/3,
// without bumping the version, until each fate is recorded. A row is
// therefore only stuck when its owner stopped extending it.
//
// A row that becomes terminal (sent, failed, dead, suppressed) loses its
// record copy, if it has one, in the statement that records the fate; its
// hash stays for deduplication until [Store.Purge] deletes it, once its
// fate is older than the retention (the dedupe window; the reaper purges
// in small batches).
//
// Each row carries the life of its mail: a random number drawn when the row
// is inserted and drawn again when [Store.ResetForReplay] re-opens it
// ([Store.Reopen] returns the new one, for events written before the
// claim), so a replayed mail, or a Message-ID sent again after its row was purged, is told
// from its earlier life ([Claim.Life], [Recipient.Life]); its events' IDs
// hash it in. The column is set by its default and never by an update of the
// worker, so it costs the HOT updates nothing.
//
// [Store.Resolve] moves recipients after reports by compare-and-set and, in
// the same transaction, writes what each moved transition owes (its event
// and suppression entry, opaque bytes) to an outbox, which [Store.Outbox]
// lists and [Store.OutboxDone] empties: whoever performs them.
//
// The package knows rows, not SMTP or Kafka: it takes plain values (IDs,
// hashes, attempt numbers, opaque payload bytes) and decides nothing about
// retries or relays. It does not publish anything itself.
package idempotency
