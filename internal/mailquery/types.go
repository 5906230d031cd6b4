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
	// Note is an operator's note (a re-drive's).
	Note string
}

// WebhookDelivery is the delivery of one event to one endpoint.
type WebhookDelivery struct {
	Endpoint  string
	EventID   string
	EventType string
	// State is "pending", "dead" or "delivered".
	State      string
	Attempts   int
	LastStatus int
	LastError  string
	NextAt     time.Time
}
