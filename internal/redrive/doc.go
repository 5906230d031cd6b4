// Package redrive owns selecting dead letters and sending them again: the
// one code path behind postctl dlq ls, replay and redrive and the console.
//
// A Filter selects dead letters of the dead-letter topic by the time they
// were dead-lettered, the job's tenant, the reason and the failure class,
// up to a limit; FilterSpec parses one from text with errors that name the
// field. Plan counts what a re-drive would take without changing anything
// (the rows are only read); Run re-drives at a bounded rate along the path
// a replay has always taken: the Message-ID's row is reopened (only failed
// or dead rows are, so mail sent since is skipped and a re-drive cannot send
// twice), the suppressions its failure added are lifted, a redriven event
// per recipient carries the operator's note and name, and the record goes
// to the jobs topic as a first attempt. A second identical re-drive finds
// the rows pending or sent and sends nothing.
//
// The package declares what it needs (Source, Store, Lists, Publisher,
// Events, Clock); the real implementations are Kafka's dead-letter topic,
// idempotency.Store, suppression.Store, a kafkaclient.TopicWriter and an
// eventstream.Writer.
package redrive
