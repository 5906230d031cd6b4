// Package providerhook owns the HTTP endpoints that mail providers post
// delivery events to: Amazon SES notifications through Amazon SNS (SES) and
// Mailgun's event webhooks (Mailgun). Each handler verifies the provider's
// signature before it reads an event, turns the events into report.Report
// values, one per recipient, and hands them to a Reports, which the caller
// supplies (package outcome applies them).
//
// Nothing unverified is acted on: a request whose signature does not verify,
// whose SNS certificate does not come from an allowed host over HTTPS, whose
// Mailgun timestamp is outside the window or whose Mailgun token was already
// seen is refused before its events are decoded. When Reports fails, the
// handler answers 503 so the provider retries.
//
// What a signature proves differs. An SNS signature covers the whole
// notification but proves only that SNS sent it, from some topic: the
// SES handler's TopicARNs allow-list is what ties it to the operator's own
// topics. Mailgun signs only a timestamp and a random token, not the
// event; the event is trusted because the request came over TLS with a
// fresh, never-seen token signed by the domain's key.
//
// Who a report is about: Postline sends each recipient with its own envelope
// sender, and both providers echo it (SES mail.source, Mailgun
// envelope.sender), so the injected TokenFunc recovers the token from it. A
// report also carries the original Message-ID (SES: the Message-ID header,
// never SES's own mail.messageId; Mailgun: message.headers["message-id"])
// and the recipient address.
//
// Status, Code and Diagnostic come from the provider's payload; Permanent
// and Hard from the provider's own verdict (SES bounceType and
// bounceSubType, Mailgun severity and reason), and a temporary verdict makes
// the report Delayed: it resolves nothing. Deciding hard or soft from a
// reply is the classifier's job, not this package's; this package only
// passes on what the provider itself said.
package providerhook
