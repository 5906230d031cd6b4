// Package delivery wires a mail job from the consumer to the relay and back:
// decode and validate, claim the Message-ID in the idempotency store, send,
// dead-letter what cannot be delivered, record the fate, and only then
// tell the consumer the record is done so its offset may be committed.
//
// It is a streaming pipeline of small stages joined by bounded channels:
//
//	intake (decode, batch) -> claimers (one store round trip per batch)
//	  -> senders (one SMTP session each) -> recorder (dead letters, then one
//	  store round trip per batch) -> MarkDone
//
// Records that cannot go on now wait in a delay queue and re-enter intake:
// a Message-ID leased by another live worker is re-checked when the lease
// ends, and a send that failed with a retryable error is retried with
// exponential backoff. Store calls that fail (Postgres down) are made again with
// backoff in the stage that met them, so no record is marked done without a
// recorded fate.
//
// What became of each record is its fate (fate.go): a value decided by
// the stage that meets it (intake, claim or a sender) and applied by the
// recorder in one switch (record.go: settle), which writes the dead
// letter, retry copy, events and row the fate calls for and then either
// feeds the record back to intake or marks it done.
//
// delivery owns none of the I/O: it talks to Kafka, Postgres and SMTP
// through the small interfaces declared in ports.go, under the stage that
// calls each. docs/design.md ("One job, read to commit") walks one job
// through these files and the packages around them.
package delivery
