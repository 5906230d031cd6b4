// Package failure owns the one decision "what kind of failure is this?" for
// a failed SMTP send: Classify turns an error into a Verdict with a Class
// (transient, throttled, permanent, auth, unknown), an optional retry-after
// hint parsed from the reply text, whether it was a timeout, and whether the
// relay rather than the message is at fault (which counts toward the relay's
// circuit breaker).
//
// SMTP replies are classified by Rules, an ordered table held as data (first
// match wins) on the reply code, the RFC 3463 enhanced status code and the
// reply text. Errors without a reply (network, TLS, go-mail's connection
// check, context ends) are classified by type, except that no reply to the
// dot ending a message that was written in full is Unknown
// (RuleAmbiguousDataEnd), never Transient: the relay may have the message.
//
// The package is pure: it does no I/O and keeps no state. It does not decide
// what to do with a verdict (fast retry, delay tier, dead letter, failover,
// breaker transitions): internal/delivery, internal/retry and internal/circuit
// do. It knows the sender package only through the small interfaces Reply
// and Staged, which *sender.Error implements.
package failure
