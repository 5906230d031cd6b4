// Package mailquery is the one read layer over what Postline knows of a
// mail: finding mail by Message-ID, recipient, tenant, state, reason and
// time, and a mail's whole life (its row, its recipients, its events and
// its webhook deliveries) on one value. The console and postctl both read
// through it, so there is one copy of the SQL. It never reads a body.
//
// It also owns postline_mail_events, the events of each mail copied from
// the mail.events topic by its Indexer, since the rows keep only the last
// state of each recipient. The result types carry the JSON names postctl's
// and the console's JSON output use.
package mailquery

import "time"

// Filter selects mail for Find. Zero fields select everything.
type Filter struct {
	// MessageID selects one mail by its exact Message-ID.
	MessageID string
	// Recipient is an address, matched exactly in its local part and
	// case-insensitively in its domain, or "@domain" for every address of
	// a domain. Recipient rows are written with a mail's first recorded
	// attempt, so a mail claimed and not yet tried is not found by it.
	Recipient string
	// Tenant selects one tenant's mail.
	Tenant string
	// State is a mail status (pending, sending, retrying, sent, failed,
	// dead, suppressed) or a recipient state (accepted, delivered, bounced,
	// complained, ...): a mail matches when it or one of its recipients is
	// in it.
	State string
	// Reason is a failure reason or class a mail ended with: the mail's
	// failure class (transient, throttled, permanent, expired, ...) or a
	// recipient's bounce type (hard, soft, policy) or bounce rule.
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
	Mails []Mail `json:"mails"`
	// Next is the cursor of the following page, "" on the last.
	Next string `json:"next,omitempty"`
}

// Mail is what the row of one mail says, with its recipients.
type Mail struct {
	MessageID    string      `json:"message_id"`
	Tenant       string      `json:"tenant,omitempty"`
	Status       string      `json:"status"`
	Stream       string      `json:"stream,omitempty"`
	Priority     string      `json:"priority,omitempty"`
	Provider     string      `json:"provider,omitempty"`
	ErrorClass   string      `json:"error_class,omitempty"`
	Confirmation string      `json:"confirmation,omitempty"`
	Attempt      int         `json:"attempt"`
	CreatedAt    time.Time   `json:"created_at,omitzero"`
	UpdatedAt    time.Time   `json:"updated_at,omitzero"`
	SentAt       time.Time   `json:"sent_at,omitzero"` // zero: not sent
	Recipients   []Recipient `json:"recipients"`
	// LastError is the text of the last failure (a relay's reply), "" if
	// none.
	LastError string `json:"last_error,omitempty"`
	// ConfirmBy is when the mail's confirmation window ends; zero when no
	// relay took it or no window is set.
	ConfirmBy time.Time `json:"confirm_by,omitzero"`
	// ReplayedAt is when postctl dlq replay last re-opened the row; zero if
	// never.
	ReplayedAt time.Time `json:"replayed_at,omitzero"`
	// Purged says the row is gone (retention purges rows past the dedupe
	// window) and only the indexed events are left: Life shows them, with
	// MessageID, Tenant and Stream taken from them.
	Purged bool `json:"purged,omitempty"`
}

// Recipient is one recipient of a mail and what decided its state.
type Recipient struct {
	Index        int       `json:"index"`
	Address      string    `json:"address"`
	State        string    `json:"state"`
	Attempt      int       `json:"attempt"`
	Provider     string    `json:"provider,omitempty"`
	BounceType   string    `json:"bounce_type,omitempty"`
	Status       string    `json:"status,omitempty"` // the enhanced status, "" if none
	Code         int       `json:"code,omitempty"`   // the SMTP reply code, 0 if none
	Diagnostic   string    `json:"diagnostic,omitempty"`
	Rule         string    `json:"rule,omitempty"`
	Source       string    `json:"source,omitempty"`
	FeedbackType string    `json:"feedback_type,omitempty"`
	AcceptedAt   time.Time `json:"accepted_at,omitzero"`
	ResolvedAt   time.Time `json:"resolved_at,omitzero"`
	UpdatedAt    time.Time `json:"updated_at,omitzero"`
}

// Life is everything known of one mail, in time order. It never holds the
// body, attachments or secrets.
type Life struct {
	Mail Mail `json:"mail"`
	// Entries are the mail's and its recipients' transitions, oldest
	// first: the claim, each attempt's deferral with its relay and reply,
	// acceptance, the reports (delivered, bounced with the report's
	// summary, complained), unsubscribes, suppression, unconfirmed, dead
	// letters and re-drives.
	Entries []Entry `json:"entries"`
	// Template names the template version the mail was rendered with;
	// nil for a mail that was not a template job.
	Template *TemplateUse `json:"template,omitempty"`
	// DKIMDomain is the domain that signed the mail, "" if unsigned or
	// unknown.
	DKIMDomain string `json:"dkim_domain,omitempty"`
	// Webhooks are the deliveries of the mail's events, per endpoint.
	Webhooks []WebhookDelivery `json:"webhooks"`
}

// TemplateUse is the template version that rendered a mail.
type TemplateUse struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	Why     string `json:"why,omitempty"`
}

// Entry is one transition of a mail or of one of its recipients.
type Entry struct {
	At time.Time `json:"at,omitzero"`
	// Type is an event type (accepted, deferred, bounced, redriven, ...),
	// or EntryClaimed, or EntryRedriven for a re-open of the row that no
	// redriven event tells of.
	Type string `json:"type"`
	// EventID is the event's ID, "" for a transition with no event.
	EventID string `json:"event_id,omitempty"`
	// RecipientIndex is the recipient's place in the mail; -1 for a
	// transition of the whole mail.
	RecipientIndex int       `json:"recipient_index"`
	Recipient      string    `json:"recipient,omitempty"`
	Attempt        int       `json:"attempt"`
	Provider       string    `json:"provider,omitempty"`
	Class          string    `json:"class,omitempty"`
	Reason         string    `json:"reason,omitempty"`
	NextAttemptAt  time.Time `json:"next_attempt_at,omitzero"`
	// Code, Status and Diagnostic are a bounce's, or the relay's reply to
	// a deferred, failed or dead attempt (Code 0 and what failed when the
	// attempt got no reply).
	Code       int    `json:"code,omitempty"`
	Status     string `json:"status,omitempty"`
	Diagnostic string `json:"diagnostic,omitempty"`
	// BounceType, Rule and Source are a bounce's (Source also says where a
	// report came from); FeedbackType is a complaint's.
	BounceType   string `json:"bounce_type,omitempty"`
	Rule         string `json:"rule,omitempty"`
	Source       string `json:"source,omitempty"`
	FeedbackType string `json:"feedback_type,omitempty"`
	// DKIMDomain is the domain that signed the mail, on an accepted entry.
	DKIMDomain string `json:"dkim_domain,omitempty"`
	// Note is an operator's note (a re-drive's); Actor who re-drove.
	Note  string `json:"note,omitempty"`
	Actor string `json:"actor,omitempty"`
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
	Endpoint  string `json:"endpoint"`
	EventID   string `json:"event_id"`
	EventType string `json:"event_type"`
	// State is "pending" or "dead" (see above: never "delivered").
	State      string    `json:"state"`
	Attempts   int       `json:"attempts"`
	LastStatus int       `json:"last_status,omitempty"` // the HTTP status of the last attempt, 0: no reply
	LastError  string    `json:"last_error,omitempty"`
	NextAt     time.Time `json:"next_at,omitzero"` // when a pending row is due
	DeadAt     time.Time `json:"dead_at,omitzero"` // when it was given up on
	DeadReason string    `json:"dead_reason,omitempty"`
	// EndpointDisabledAt is when the endpoint was disabled (by the
	// dispatcher or an operator); zero while it is enabled.
	EndpointDisabledAt time.Time `json:"endpoint_disabled_at,omitzero"`
}
