// Package event is the public definition of the events Postline publishes on
// the mail.events topic: one event per transition of one recipient of one
// mail, from accepted to its final state. Applications import it to decode
// and check the events they consume; the worker, the report receiver and the
// webhook dispatcher use the same type, so the document cannot drift from
// its schema (SchemaJSON).
//
// Events are delivered at least once. Every transition has one ID, derived
// from what it is about (NewLifeID): the same transition of the same life of
// a mail, so a copy written again after a crash carries the same ID and
// consumers dedupe by it, while a mail replayed or sent again under its
// Message-ID gets IDs of its own.
package event

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Schema names the version of the event document this package reads and
// writes.
const Schema = "postline.event/v1"

// Type is the transition an event reports.
type Type string

// The event types.
const (
	// Accepted: a relay took the mail for this recipient (the SMTP 250).
	Accepted Type = "accepted"
	// Deferred: the attempt failed in a way worth retrying; Class and
	// NextAttemptAt say why and when.
	Deferred Type = "deferred"
	// Failed: the mail will not be sent to this recipient (a permanent
	// refusal before the relay accepted it). Terminal.
	Failed Type = "failed"
	// Dead: the mail was given up on (attempts or age used up, expired,
	// invalid). Terminal.
	Dead Type = "dead"
	// Delivered: a report confirmed delivery. Terminal.
	Delivered Type = "delivered"
	// Bounced: a report (or the relay at RCPT) said the mail cannot reach
	// the recipient; Bounce says how. Terminal.
	Bounced Type = "bounced"
	// Complained: the recipient reported the mail as unwanted. Terminal.
	Complained Type = "complained"
	// Suppressed: the recipient is on a suppression list, so the mail was
	// not sent to it. Terminal.
	Suppressed Type = "suppressed"
	// Unconfirmed: no report came within the confirmation window after the
	// relay accepted the mail; a person should look. A report that comes
	// later still resolves the recipient.
	Unconfirmed Type = "unconfirmed"
	// Unsubscribed: the recipient asked for no more mail of this stream,
	// with the one-click link or the mailto address of the mail's
	// List-Unsubscribe header (RFC 8058); the address is suppressed on the
	// mail's tenant and stream. It is about the address, not the mail's
	// delivery, so it ends nothing: it may follow any other event.
	Unsubscribed Type = "unsubscribed"
	// Redriven: an operator re-drove the mail from the dead-letter topic
	// (postctl dlq redrive): it is sent to the recipient again, in a new
	// life whose events follow. Note and Actor say why and who. It ends
	// nothing: it starts the new life.
	Redriven Type = "redriven"
)

// Types lists every event type, in the order of a recipient's life, then
// the types that may come at any time.
var Types = []Type{Accepted, Deferred, Failed, Dead, Delivered, Bounced, Complained, Suppressed, Unconfirmed, Unsubscribed, Redriven}

// Valid reports whether t is one of Types.
func (t Type) Valid() bool { return slices.Contains(Types, t) }

// Terminal reports whether t ends the recipient's life: nothing but a
// later report (for Unconfirmed) follows it.
func (t Type) Terminal() bool {
	switch t {
	case Failed, Dead, Delivered, Bounced, Complained, Suppressed:
		return true
	}
	return false
}

// The bounce types (Bounce.Type).
const (
	BounceHard = "hard" // the address does not exist or never takes mail: suppressed
	BounceSoft = "soft" // a temporary condition the remote gave up on (full mailbox)
	// BouncePolicy is a refusal by policy or reputation (x.7.x): about the
	// sender, not the address, so it is shown to operators and never
	// suppresses the recipient.
	BouncePolicy = "policy"
)

// Bounce says how a recipient bounced.
type Bounce struct {
	// Type is BounceHard, BounceSoft or BouncePolicy.
	Type string `json:"type"`
	// Status is the RFC 3463 enhanced status, "" if the report had none.
	Status string `json:"status,omitempty"`
	// Code is the SMTP reply code, 0 if none.
	Code int `json:"code,omitempty"`
	// Diagnostic is the remote server's text (at most 512 bytes).
	Diagnostic string `json:"diagnostic,omitempty"`
	// Rule names the classification rule that decided Type.
	Rule string `json:"rule,omitempty"`
	// Source is where the report came from: "smtp" (the relay refused the
	// recipient), "dsn", "arf", "unstructured", "ses" or "mailgun".
	Source string `json:"source"`
}

// Reply is the relay's answer to an attempt that did not end in acceptance
// (or the failure that stood for one): the SMTP reply code, the enhanced
// status and the reply text.
type Reply struct {
	// Code is the SMTP reply code, 0 when the attempt failed without a
	// reply (a network or TLS failure, a lost connection).
	Code int `json:"code"`
	// Status is the RFC 3463 enhanced status, "" if the reply had none.
	Status string `json:"status,omitempty"`
	// Text is the reply's text (at most 512 bytes), or for a failure
	// without a reply what failed; never the mail's content.
	Text string `json:"text,omitempty"`
}

// TemplateUse names the template version a mail was rendered with.
type TemplateUse struct {
	// Name is the template's name.
	Name string `json:"name"`
	// Version is the version that rendered the mail.
	Version int `json:"version"`
	// Why says why that version: "active", "canary", "requested", or
	// "fallback: ..." with what failed first.
	Why string `json:"why,omitempty"`
	// Builtin says the version is one of the templates built into the
	// worker, the last resort when every stored version failed.
	Builtin bool `json:"builtin,omitempty"`
}

// Event is one transition of one recipient. Every field but those marked
// optional is set on every event.
type Event struct {
	// Schema is the document version, Schema.
	Schema string `json:"schema"`
	// ID identifies the transition (NewLifeID): equal IDs are copies of one
	// event.
	ID string `json:"id"`
	// Type is the transition.
	Type Type `json:"type"`
	// At is when the transition happened (the worker's or receiver's
	// clock, UTC).
	At time.Time `json:"at"`
	// MessageID is the job's Message-ID, also the Kafka key.
	MessageID string `json:"message_id"`
	// Tenant is the job's tenant, "" for none.
	Tenant string `json:"tenant,omitempty"`
	// Stream is "transactional" or "bulk" (bulk-priority jobs).
	Stream string `json:"stream"`
	// Recipient is the recipient's address (the bare addr-spec).
	Recipient string `json:"recipient"`
	// RecipientIndex is the recipient's place in the job: To, then Cc,
	// then Bcc, from 0.
	RecipientIndex int `json:"recipient_index"`
	// Attempt is the delivery attempt the transition belongs to (0 for a
	// report that came later and for suppression before any attempt).
	Attempt int `json:"attempt"`
	// Provider is the relay of the attempt; optional.
	Provider string `json:"provider,omitempty"`
	// Class is the failure class of a deferred, failed or dead event
	// (transient, throttled, permanent, auth, unknown, expired, ...);
	// optional.
	Class string `json:"class,omitempty"`
	// Reason is the machine-readable reason of a failed, dead or suppressed
	// event (the dead-letter reason, or the suppression reason); optional.
	Reason string `json:"reason,omitempty"`
	// NextAttemptAt is when a deferred recipient is tried again; optional.
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	// Bounce is set on bounced events.
	Bounce *Bounce `json:"bounce,omitempty"`
	// Reply is the relay's answer to the attempt of a deferred, failed or
	// dead event, when the attempt reached a relay; optional.
	Reply *Reply `json:"reply,omitempty"`
	// FeedbackType is a complaint's feedback type (abuse, fraud, ...);
	// optional.
	FeedbackType string `json:"feedback_type,omitempty"`
	// Template says which template version rendered a template job, and
	// why that one; set on the worker's events of template jobs.
	Template *TemplateUse `json:"template,omitempty"`
	// DKIMDomain is the domain whose key signed the mail (the d= of its
	// DKIM-Signature), on the worker's accepted events of a signed mail;
	// optional: "" when the mail went out unsigned.
	DKIMDomain string `json:"dkim_domain,omitempty"`
	// Metadata is the job's metadata, echoed so applications can route the
	// event without a lookup; optional.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Note is the operator's note on a redriven event; optional.
	Note string `json:"note,omitempty"`
	// Actor names who re-drove the mail on a redriven event (an operator's
	// login or the console's user); optional.
	Actor string `json:"actor,omitempty"`
}

// The streams (Event.Stream).
const (
	StreamTransactional = "transactional"
	StreamBulk          = "bulk"
)

// NewID is NewLifeID for life 0: the ID of a transition of a mail whose
// row records no life (a row written before lives were recorded, or a test
// that needs no life). Its IDs are the ones Postline always derived.
func NewID(messageID string, recipientIndex int, t Type, attempt int) string {
	return NewLifeID(messageID, 0, recipientIndex, t, attempt)
}

// NewLifeID derives the ID of a transition from what it is about: the
// message, the life of the message, the recipient, the type and, for a
// deferral, the attempt it ends (a recipient is deferred once per attempt;
// every other type happens to a recipient at most once in a life). Writers
// call it so that a transition written twice has one ID.
//
// A life is one journey of the Message-ID from its first claim to its
// fate: a dead letter replayed (postctl dlq replay), or the same
// Message-ID sent again after its row was purged, starts another, with a
// life value of its own (idempotency.Claim.Life), so its transitions get
// IDs of their own and consumers that dedupe by ID do not drop them as
// copies of the first life's. Life 0 means none is recorded: the ID is
// derived as before lives existed, so the IDs of mail in flight across the
// upgrade do not change.
func NewLifeID(messageID string, life int64, recipientIndex int, t Type, attempt int) string {
	// The input is assembled in one buffer and hashed at once: the worker
	// derives an ID for every event it writes, and the buffer (like the
	// result's) stays on the stack for Message-IDs of usual length.
	var buf [192]byte
	in := append(buf[:0], messageID...)
	in = append(in, 0)
	in = strconv.AppendInt(in, int64(recipientIndex), 10)
	in = append(in, 0)
	in = append(in, t...)
	if t == Deferred {
		in = append(in, 0)
		in = strconv.AppendInt(in, int64(attempt), 10)
	}
	if life != 0 {
		// After everything a life-0 ID hashes, behind a tag no type or
		// number contains: no ID of a life is an ID of life 0.
		in = append(in, "\x00life\x00"...)
		in = strconv.AppendInt(in, life, 10)
	}
	sum := sha256.Sum256(in)
	var out [len("evt_") + 32]byte
	copy(out[:], "evt_")
	hex.Encode(out[len("evt_"):], sum[:16])
	return string(out[:])
}

// Validate reports the first field that breaks the schema's rules.
func (e *Event) Validate() error {
	switch {
	case e.Schema != Schema:
		return fmt.Errorf("event: schema %q, want %q", e.Schema, Schema)
	case e.ID == "":
		return errors.New("event: id is empty")
	case !e.Type.Valid():
		return fmt.Errorf("event: unknown type %q", e.Type)
	case e.At.IsZero():
		return errors.New("event: at is empty")
	case e.MessageID == "":
		return errors.New("event: message_id is empty")
	case e.Recipient == "":
		return errors.New("event: recipient is empty")
	case e.RecipientIndex < 0:
		return fmt.Errorf("event: recipient_index %d is negative", e.RecipientIndex)
	case e.Stream != StreamTransactional && e.Stream != StreamBulk:
		return fmt.Errorf("event: stream %q, want %q or %q", e.Stream, StreamTransactional, StreamBulk)
	case e.Type == Bounced && e.Bounce == nil:
		return errors.New("event: a bounced event needs bounce")
	case e.Bounce != nil && e.Bounce.Type != BounceHard && e.Bounce.Type != BounceSoft && e.Bounce.Type != BouncePolicy:
		return fmt.Errorf("event: bounce.type %q, want hard, soft or policy", e.Bounce.Type)
	}
	return nil
}

// Encode returns the event's JSON document after validating it.
func (e *Event) Encode() ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(e)
}

// Decode parses and validates one event document. Unknown fields are
// accepted, so that consumers keep working when a later version adds some.
func Decode(b []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return Event{}, fmt.Errorf("event: %w", err)
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}
