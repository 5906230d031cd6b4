// Package failure owns the one decision "what kind of failure is this?"
// for a failed SMTP send and for an asynchronous bounce report.
//
// Classify turns a failed send's error into a Verdict with a Class
// (transient, throttled, permanent, auth, unknown), an optional
// retry-after hint parsed from the reply text, whether it was a timeout,
// and whether the relay rather than the message is at fault (which counts
// toward the relay's circuit breaker). ClassifyBounce turns the reply in a
// bounce report into a Bounce: hard, soft or policy, and whether the
// recipient is suppressed (only clear recipient-level hard bounces are).
//
// SMTP replies are classified by a RuleSet, an ordered table of rows
// (first match wins) on the reply code, the RFC 3463 enhanced status code
// and the reply text. One row decides both the verdict of a send and the
// bounce type of a report with the same reply. The default rules are the
// embedded file rules.yaml (DefaultRulesYAML, Default); an operator's file
// loaded with LoadRules replaces them whole, so an operator starts from a
// copy of DefaultRulesYAML and edits it. LoadRules rejects a file with an
// unknown field, class or bounce type, a bad regular expression, a code out
// of range, a duplicate or reserved name, a row no reply can reach, or no
// catch-all row for 4xx or 5xx replies, naming each bad row.
//
// Errors without a reply (network, TLS, go-mail's connection check,
// context ends) are classified by type, except that no reply to the dot
// ending a message that was written in full is Unknown
// (RuleAmbiguousDataEnd), never Transient: the relay may have the message.
//
// The package does no I/O but LoadRules' read of the file, and keeps no
// state: a RuleSet is immutable. It does not decide what to do with a
// verdict or a bounce (resend, delay tier, dead letter, failover,
// breaker transitions, suppression): internal/delivery, internal/retry,
// internal/circuit and the bounce and suppression packages do. It knows
// the sender package only through the small interfaces Reply, Staged and
// Ambiguous, which *sender.Error implements.
package failure
