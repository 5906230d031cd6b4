// Package suppression owns the suppression lists, postline_suppressions:
// the addresses mail must not be sent to, per tenant ("" is the tenant of
// mail without one) and stream ([StreamTransactional], [StreamBulk], or
// [StreamAll] for every stream), each with why ([Reason]), where it came
// from (a free-text source such as "dsn" or "postctl", and optionally the
// Message-ID of the mail that caused it), when, and until when (never, by
// default, except for soft bounces).
//
// Addresses are stored normalized ([Normalize]): the bare addr-spec of an
// RFC 5322 address, trimmed and lowercased, so "Ada <ADA@Example.com>" and
// "ada@example.com" are one entry.
//
// [Store.Check] is the sending path's question: which of a batch of
// (tenant, stream, address) keys are suppressed now, by an entry of the
// key's stream or of every stream. It is one indexed statement for the
// whole batch. [Store.Add] upserts entries under a precedence rule
// ([Supersedes]): an entry never gets weaker on its own — an entry that
// expires does not replace one that does not, a bounce does not replace a
// complaint — while an operator's manual entry replaces whatever was there.
// [Store.Remove], [Store.List] (keyset paging), [Store.Export] (streaming)
// and [Store.PurgeExpired] serve operators and housekeeping. Every call is
// one round trip; [Store.InTx] runs several in one transaction (an import
// that is written whole or not at all).
//
// The package decides nothing about DSNs, feedback reports or which stream
// a job belongs to: its callers parse those and hand it entries. The
// table's DDL lives in internal/schema.
package suppression
