// Package mailquery is the one read layer over what Postline knows of a
// mail: finding mail by Message-ID, recipient, tenant, state, reason and
// time, and a mail's whole life (its row, its recipients, its events and
// its webhook deliveries) on one value. The console and postctl both read
// through it, so there is one copy of the SQL. It never reads a body.
package mailquery

import "time"

// Filter selects mail for Find. Zero fields select everything.
type Filter struct {
	// MessageID selects one mail by its exact Message-ID.
	MessageID string
	// Recipient is an address, matched exactly in its local part and
	// case-insensitively in its domain, or "@domain" for every address of
	// a domain.
	Recipient string
	// Tenant selects one tenant's mail.
	Tenant string
	// State is a mail status (pending, sending, retrying, sent, failed,
	// dead, suppressed) or a recipient state (accepted, delivered, bounced,
	// complained, ...): a mail matches when it or one of its recipients is
	// in it.
	State string
	// Reason is a failure reason or class a mail ended with.
	Reason string
	// Since and Until bound the mail's creation time: Since <= t < Until.
	Since, Until time.Time
	// Cursor continues a listing from the Page.Next of the one before.
	Cursor string
	// Limit is the page size; 0 means DefaultLimit, at most MaxLimit.
	Limit int
}

// Page sizes.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// Page is one page of Find, newest first.
type Page struct {
	Mails []Mail
	// Next is the cursor of the following page, "" on the last.
	Next string
}

// Mail is what the row of one mail says, with its recipients.
type Mail struct {
	MessageID    string
	Tenant       string
	Status       string
	Stream       string
	Priority     string
	Provider     string
	ErrorClass   string
	Confirmation string
	Attempt      int
	CreatedAt    time.Time
	UpdatedAt    time.Time
	SentAt       time.Time // zero: not sent
	Recipients   []Recipient
	// LastError is the text of the last failure (a relay's reply), "" if
	// none.
	LastError string
	// ConfirmBy is when the mail's confirmation window ends; zero when no
	// relay took it or no window is set.
	ConfirmBy time.Time
	// ReplayedAt is when postctl dlq replay last re-opened the row; zero if
	// never.
	ReplayedAt time.Time
	// Purged says the row is gone (retention purges rows past the dedupe
	// window) and only the indexed events are left: Life shows them, with
	// MessageID, Tenant and Stream taken from them.
	Purged bool
}

// Recipient is one recipient of a mail and what decided its state.
type Recipient struct {
	Index        int
	Address      string
	State        string
	Attempt      int
	Provider     string
	BounceType   string
	Status       string // the enhanced status, "" if none
	Code         int    // the SMTP reply code, 0 if none
	Diagnostic   string
	Rule         string
	Source       string
	FeedbackType string
	AcceptedAt   time.Time
	ResolvedAt   time.Time
	UpdatedAt    time.Time
}

// Life is everything known of one mail, in time order. It never holds the
// body, attachments or secrets.
type Life struct {
	Mail Mail
	// Entries are the mail's and its recipients' transitions, oldest
	// first: the claim, each attempt's deferral with its relay and reply,
	// acceptance, the reports (delivered, bounced with the report's
	// summary, complained), unsubscribes, suppression, unconfirmed, dead
	// letters and re-drives.
	Entries []Entry
	// Template names the template version the mail was rendered with;
	// nil for a mail that was not a template job.
	Template *TemplateUse
	// DKIMDomain is the domain that signed the mail, "" if unsigned or
	// unknown.
	DKIMDomain string
	// Webhooks are the deliveries of the mail's events, per endpoint.
	Webhooks []WebhookDelivery
}

// TemplateUse is the template version that rendered a mail.
type TemplateUse struct {
	Name    string
	Version int
	Why     string
}

// Entry is one transition of a mail or of one of its recipients.
type Entry struct {
	At time.Time
	// Type is an event type (accepted, deferred, bounced, ...) or
	// "claimed" or "redriven".
	Type string
	// EventID is the event's ID, "" for a transition with no event.
	EventID string
	// RecipientIndex is the recipient's place in the mail; -1 for a
	// transition of the whole mail.
	RecipientIndex int
	Recipient      string
	Attempt        int
	Provider       string
	Class          string
	Reason         string
	NextAttemptAt  time.Time
	Code           int
	Status         string
	Diagnostic     string
	// BounceType, Rule and Source are a bounce's (Source also says where a
	// report came from); FeedbackType is a complaint's.
	BounceType   string
	Rule         string
	Source       string
	FeedbackType string
	// DKIMDomain is the domain that signed the mail, on an accepted entry.
	DKIMDomain string
	// Note is an operator's note (a re-drive's).
	Note string
}

// WebhookDelivery is the delivery of one event to one endpoint, as the
// dispatcher's queue (postline_webhook_queue) records it.
//
// The queue holds a row only for an event an endpoint did not take at once
// (pending, waiting for its next attempt) or gave up on (dead, until
// postctl webhooks replay or the dead letters' retention). An event taken
// at the first attempt, or later (its row is deleted then), leaves nothing:
// Postline keeps no record of successful deliveries, so Life reports no
// "delivered" state. An event without a row was delivered, or is not for
// that endpoint (its type or tenant is filtered out), or was not yet read
// by the dispatcher; the endpoint's own log is the witness of a delivery.
type WebhookDelivery struct {
	Endpoint  string
	EventID   string
	EventType string
	// State is "pending" or "dead" (see above: never "delivered").
	State      string
	Attempts   int
	LastStatus int // the HTTP status of the last attempt, 0: no reply
	LastError  string
	NextAt     time.Time // when a pending row is due
	DeadAt     time.Time // when it was given up on
	DeadReason string
	// EndpointDisabledAt is when the endpoint was disabled (by the
	// dispatcher or an operator); zero while it is enabled.
	EndpointDisabledAt time.Time
}
