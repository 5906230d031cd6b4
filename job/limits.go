package job

import (
	"cmp"
	"fmt"
)

// Default size limits. They bound what one record may cost a worker; the
// jobs topic is created with max.message.bytes of twice
// DefaultMaxMessageBytes so a full-size record always fits a batch.
const (
	// DefaultMaxMessageBytes bounds the raw Kafka record value: 2 MiB.
	DefaultMaxMessageBytes = 2 << 20
	// DefaultMaxBodyBytes bounds the text and HTML bodies and the encoded
	// template data together: 256 KiB.
	DefaultMaxBodyBytes = 256 << 10
	// DefaultMaxAttachmentBytes bounds the decoded size of all attachments
	// together: 1 MiB.
	DefaultMaxAttachmentBytes = 1 << 20
	// DefaultMaxRecipients bounds To, Cc and Bcc together.
	DefaultMaxRecipients = 100
	// DefaultMaxDepth bounds how deep objects and arrays nest, the document
	// object counting as 1. A valid job nests 3 deep (attachments[0]); the
	// rest is room for future schema versions.
	DefaultMaxDepth = 32
)

// Fixed bounds on the small fields. They are not configurable: they exist so
// that a field which ends up in a header, a log line or a database column
// cannot be abused as a payload. Exceeding one is ReasonOversizeField.
const (
	// MaxMessageIDLength bounds the message ID without angle brackets.
	MaxMessageIDLength = 250
	// MaxAddressLength bounds one address string, display name included.
	MaxAddressLength = 998
	// MaxSubjectLength bounds the subject in bytes (one unfolded header line).
	MaxSubjectLength = 998
	// MaxHeaders bounds the number of custom headers.
	MaxHeaders = 50
	// MaxHeaderNameLength bounds a custom header name.
	MaxHeaderNameLength = 76
	// MaxHeaderValueLength bounds a custom header value in bytes.
	MaxHeaderValueLength = 4096
	// MaxFilenameLength bounds an attachment file name in bytes.
	MaxFilenameLength = 255
	// MaxTenantLength bounds the tenant in bytes.
	MaxTenantLength = 128
	// MaxTemplateFieldLength bounds the template name and version in bytes.
	MaxTemplateFieldLength = 256
	// MaxTemplateNameLength bounds a template job's template name, as
	// TemplateNamePattern does.
	MaxTemplateNameLength = 64
	// MaxTemplateDataKeys bounds the keys of template data, counted in all
	// of its objects at every depth.
	MaxTemplateDataKeys = 1000
	// MaxTemplateDataDepth bounds how deep objects and arrays nest in
	// template data, the data object counting as 1.
	MaxTemplateDataDepth = 16
	// MaxLocaleLength bounds the template locale.
	MaxLocaleLength = 35
	// MaxMetadataEntries bounds the number of metadata entries.
	MaxMetadataEntries = 64
	// MaxMetadataKeyLength bounds a metadata key in bytes.
	MaxMetadataKeyLength = 128
	// MaxMetadataValueLength bounds a metadata value in bytes.
	MaxMetadataValueLength = 1024
)

// Limits bounds the size of a job. The zero value means "all defaults".
type Limits struct {
	// MaxMessageBytes bounds the encoded record value.
	// Defaults to DefaultMaxMessageBytes.
	MaxMessageBytes int
	// MaxBodyBytes bounds len(Text)+len(HTML) plus the JSON encoding of
	// Template.Data.
	// Defaults to DefaultMaxBodyBytes.
	MaxBodyBytes int
	// MaxAttachmentBytes bounds the decoded size of all attachments together.
	// Defaults to DefaultMaxAttachmentBytes.
	MaxAttachmentBytes int
	// MaxRecipients bounds len(To)+len(Cc)+len(Bcc).
	// Defaults to DefaultMaxRecipients.
	MaxRecipients int
	// MaxDepth bounds how deep objects and arrays nest in the record, the
	// document object counting as 1; deeper records are rejected with
	// ReasonTooDeep before they are decoded, so a record of nested brackets
	// costs no more than its size. Defaults to 32.
	MaxDepth int
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	l.MaxMessageBytes = cmp.Or(l.MaxMessageBytes, DefaultMaxMessageBytes)
	l.MaxBodyBytes = cmp.Or(l.MaxBodyBytes, DefaultMaxBodyBytes)
	l.MaxAttachmentBytes = cmp.Or(l.MaxAttachmentBytes, DefaultMaxAttachmentBytes)
	l.MaxRecipients = cmp.Or(l.MaxRecipients, DefaultMaxRecipients)
	l.MaxDepth = cmp.Or(l.MaxDepth, DefaultMaxDepth)
	return l
}

// Validate reports the first negative limit. Zero means "default" and is
// valid.
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxMessageBytes", l.MaxMessageBytes},
		{"MaxBodyBytes", l.MaxBodyBytes},
		{"MaxAttachmentBytes", l.MaxAttachmentBytes},
		{"MaxRecipients", l.MaxRecipients},
		{"MaxDepth", l.MaxDepth},
	} {
		if f.v < 0 {
			return fmt.Errorf("job: limits: %s must not be negative, got %d", f.name, f.v)
		}
	}
	return nil
}
