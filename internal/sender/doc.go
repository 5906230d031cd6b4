// Package sender owns SMTP delivery: it turns a job.Job into a MIME message
// (Message) and sends it through one configured relay (Relay) with go-mail,
// over one reused connection per sending goroutine (Session).
//
// A Session dials lazily, keeps its connection between messages and redials
// when the connection failed (network error, 421, a dead connection), grew
// older than Config.MaxMessagesPerConn messages, or sat idle longer than
// Config.IdleTimeout. Every failure is returned as *Error, which carries the
// SMTP reply code, the RFC 3463 enhanced status and the stage that failed;
// package failure classifies it (Error implements failure.Reply,
// failure.Staged and failure.Ambiguous). A send that wrote the whole message
// and got no reply to its final dot is Error.Ambiguous, counted in
// postline_sender_ambiguous_data_end_total: the relay may have accepted it,
// so a caller that sends it again at once likely delivers it twice.
//
// Connection reuse follows go-mail's per-goroutine pattern
// (DialToSMTPClientWithContext, SendWithSMTPClient, CloseWithSMTPClient)
// without NOOP before and RSET after each message: the session tracks idle
// time itself, and issues RSET only after a failed transaction on a
// connection it keeps, so a rejected recipient cannot leak into the next
// message.
//
// With a relay that advertises PIPELINING (RFC 2920), a transaction's MAIL
// FROM, RCPT TOs and DATA go out in one write and their replies are read in
// order: two round trips per transaction instead of three plus one per
// recipient, with the same results per recipient. SendToThen goes one step
// further: as a message ends it asks its caller for the next mail and
// writes that mail's envelope in the same write as the final dot, so a
// connection that always has a mail waiting costs one write and one round
// trip per mail.
//
// The package knows SMTP, not Kafka, Postgres or retry policy: callers decide
// what to do with a failure (retry tiers, dead letters, failover).
package sender
