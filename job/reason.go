package job

import (
	"fmt"
	"strings"
)

// Reason says in one machine-readable word why a job was rejected. It is the
// value of the postline-dlq-reason header on dead letters, and a metrics label,
// so the set is small and stable: add values, never rename them.
type Reason string

// The reasons Decode, Validate and Expired give.
const (
	// ReasonMalformedJSON: not a JSON object, a syntax or type error, a
	// duplicate key, a null where none is allowed, or trailing data.
	ReasonMalformedJSON Reason = "malformed_json"
	// ReasonTooDeep: objects and arrays nest deeper than Limits.MaxDepth.
	ReasonTooDeep Reason = "too_deep"
	// ReasonUnknownField: a key the schema does not define (keys are
	// matched exactly, including case).
	ReasonUnknownField Reason = "unknown_field"
	// ReasonUnsupportedVersion: "version" is missing or not SchemaVersion.
	ReasonUnsupportedVersion Reason = "unsupported_version"
	// ReasonMissingField: a required field is absent or empty.
	ReasonMissingField Reason = "missing_field"
	// ReasonInvalidMessageID: message_id is not id-left@id-right.
	ReasonInvalidMessageID Reason = "invalid_message_id"
	// ReasonInvalidAddress: an address that net/mail cannot parse as one
	// mailbox.
	ReasonInvalidAddress Reason = "invalid_address"
	// ReasonTooManyRecipients: To, Cc and Bcc together exceed the limit.
	ReasonTooManyRecipients Reason = "too_many_recipients"
	// ReasonHeaderInjection: a CR, LF or NUL in any value that ends up in a
	// header or a log line: message ID, address, subject, header name or
	// value, file name, content type, tenant, template, metadata.
	ReasonHeaderInjection Reason = "header_injection"
	// ReasonHeaderNotAllowed: a custom header that is not on the allow-list
	// or whose name is not a valid RFC 5322 field name.
	ReasonHeaderNotAllowed Reason = "header_not_allowed"
	// ReasonOversizeMessage: the encoded record exceeds
	// Limits.MaxMessageBytes.
	ReasonOversizeMessage Reason = "oversize_message"
	// ReasonOversizeBody: text and HTML together exceed Limits.MaxBodyBytes.
	ReasonOversizeBody Reason = "oversize_body"
	// ReasonOversizeAttachment: attachments together exceed
	// Limits.MaxAttachmentBytes.
	ReasonOversizeAttachment Reason = "oversize_attachment"
	// ReasonOversizeField: a small field exceeds its fixed bound (see Limits
	// and friends), or a map has too many entries.
	ReasonOversizeField Reason = "oversize_field"
	// ReasonInvalidField: a field has a value outside its allowed form that
	// no more specific reason covers (a file name with a slash or quote, an
	// unparsable content type).
	ReasonInvalidField Reason = "invalid_field"
	// ReasonInvalidPriority: priority is not urgent, normal, bulk or empty.
	ReasonInvalidPriority Reason = "invalid_priority"
	// ReasonMissingBody: neither text nor HTML is set.
	ReasonMissingBody Reason = "missing_body"
	// ReasonExpired: not_after is in the past at send time. Validate never
	// gives it; the worker asks Expired.
	ReasonExpired Reason = "expired"
)

// reasons lists every Reason, for the tests that hold Decode and Validate
// to this set.
func reasons() []Reason {
	return []Reason{
		ReasonMalformedJSON, ReasonUnknownField, ReasonUnsupportedVersion,
		ReasonMissingField, ReasonInvalidMessageID, ReasonInvalidAddress,
		ReasonTooManyRecipients, ReasonHeaderInjection, ReasonHeaderNotAllowed,
		ReasonOversizeMessage, ReasonOversizeBody, ReasonOversizeAttachment,
		ReasonOversizeField, ReasonInvalidField, ReasonInvalidPriority,
		ReasonMissingBody, ReasonExpired, ReasonTooDeep,
	}
}

// ValidationError is why a job was rejected. Every rejection by Decode,
// Validate and Publisher.Publish is one; find it with errors.As.
type ValidationError struct {
	// Reason is the machine-readable cause.
	Reason Reason
	// Field is the JSON path of the offending value ("to[1]",
	// "attachments[0].filename", "headers.X-Campaign"), empty when the
	// document as a whole is at fault.
	Field string
	// Detail is a human-readable explanation. It never repeats a body or a
	// full header value.
	Detail string
}

// Error formats the error as "job: <reason>: <field>: <detail>", leaving out
// empty parts.
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("job: ")
	b.WriteString(string(e.Reason))
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

func invalid(reason Reason, field, format string, args ...any) *ValidationError {
	return &ValidationError{Reason: reason, Field: field, Detail: fmt.Sprintf(format, args...)}
}
