// Package report holds what an asynchronous delivery report says about one
// recipient of one mail, whoever wrote it: a delivery status notification
// (RFC 3464) or a complaint (RFC 5965 ARF) that came back to a return path,
// or an event a provider posted to a webhook. It is a leaf of plain values:
// the parsers and adapters produce reports, package outcome applies them.
// Nothing here verifies or trusts a report; where one came from and whether
// its token verifies is decided by the caller.
package report

import "time"

// Kind is what happened to the recipient.
type Kind string

// The kinds of report.
const (
	// Delivered: the recipient's side took the mail (a DSN with action
	// delivered, relayed or expanded; a provider's delivery event).
	Delivered Kind = "delivered"
	// Bounced: the mail will not reach the recipient (a DSN with action
	// failed; a provider's bounce or permanent failure). Whether the bounce
	// is hard or soft is the classifier's decision, from Status, Code and
	// Diagnostic (and Permanent when those say nothing).
	Bounced Kind = "bounced"
	// Delayed: delivery is still being retried (a DSN with action delayed).
	// It resolves nothing.
	Delayed Kind = "delayed"
	// Complained: the recipient marked the mail as unwanted (an ARF
	// report, a provider's complaint event).
	Complained Kind = "complained"
)

// Valid reports whether k is one of the kinds.
func (k Kind) Valid() bool {
	switch k {
	case Delivered, Bounced, Delayed, Complained:
		return true
	}
	return false
}

// The sources of a report (Report.Source).
const (
	SourceDSN          = "dsn"          // RFC 3464 multipart/report
	SourceARF          = "arf"          // RFC 5965 feedback report
	SourceUnstructured = "unstructured" // a bounce without a machine-readable part
	SourceSES          = "ses"          // Amazon SES through SNS
	SourceMailgun      = "mailgun"      // Mailgun's event webhook
)

// MaxDiagnosticBytes caps Report.Diagnostic: reports are stored and
// published, and a remote server's text is not trusted to be short.
const MaxDiagnosticBytes = 512

// Report is one recipient's fate as one report tells it.
type Report struct {
	Kind Kind
	// Source says what kind of document the report came from: one of the
	// Source constants.
	Source string

	// Who the report is about. A report that came back to a return path
	// names the mail and recipient by the token of that return path, set
	// by whoever knows the envelope; a provider's signed event may name
	// them by Message-ID and address instead (and carry the token when the
	// provider echoes the envelope sender).
	Token string
	// MessageID is the original mail's Message-ID without angle brackets,
	// "" when the report does not say.
	MessageID string
	// Recipient is the address the report is about (the DSN's
	// Original-Recipient, else its Final-Recipient, without the "rfc822;"
	// type), "" when unknown.
	Recipient string

	// What the recipient's side said.
	//
	// Status is the RFC 3463 enhanced status ("5.1.1"), "" if none.
	Status string
	// Code is the SMTP reply code in the diagnostic, 0 if none.
	Code int
	// Diagnostic is the remote server's text, at most MaxDiagnosticBytes,
	// on one line; never the mail's body.
	Diagnostic string
	// RemoteMTA names the server that gave the verdict, "" if unknown.
	RemoteMTA string
	// FeedbackType is an ARF report's Feedback-Type (abuse, fraud, virus,
	// other, ...), or the provider's complaint type; "" for other kinds.
	FeedbackType string
	// Permanent is the provider's own verdict on a bounce that carries no
	// status (SES bounceType Permanent, Mailgun severity permanent): true
	// permanent, false temporary, nil unknown. It stands in for a status:
	// it makes no bounce hard on its own (Hard does). A temporary verdict
	// comes with Kind Delayed: the provider tries again or the mail was
	// taken after all, so it resolves nothing.
	Permanent *bool
	// Hard is the provider's own verdict that the address takes no mail: a
	// hard bounce whatever the reply says, and the address is suppressed,
	// unless the reply is a refusal by the receiver's policy (that is about
	// the sender, not the address). Set only on Bounced reports, with
	// Permanent true: SES bounceType Permanent with a bounceSubType other
	// than Undetermined, Mailgun severity permanent with reason bounce or
	// suppress-bounce.
	Hard bool
	// At is when the report says it happened; zero when it does not.
	At time.Time
}
