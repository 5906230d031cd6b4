package job

import (
	"cmp"
	"fmt"
)

// Default size limits, as Limits documents them. They bound what one record
// may cost a worker; the jobs topic is created with max.message.bytes of
// twice defaultMaxMessageBytes so a full-size record always fits a batch.
const (
	// defaultMaxMessageBytes bounds the raw Kafka record value: 2 MiB.
	defaultMaxMessageBytes = 2 << 20
	// defaultMaxBodyBytes bounds the text and HTML bodies and the encoded
	// template data together: 256 KiB.
	defaultMaxBodyBytes = 256 << 10
	// defaultMaxAttachmentBytes bounds the decoded size of all attachments
	// together: 1 MiB.
	defaultMaxAttachmentBytes = 1 << 20
	// defaultMaxRecipients bounds To, Cc and Bcc together.
	defaultMaxRecipients = 100
	// defaultMaxDepth bounds how deep objects and arrays nest, the document
	// object counting as 1. A valid job nests 3 deep (attachments[0]); the
	// rest is room for future schema versions.
	defaultMaxDepth = 32
)

// Fixed bounds on the small fields, as Limits documents them.
const (
	// maxMessageIDLength bounds the message ID without angle brackets.
	maxMessageIDLength = 250
	// maxAddressLength bounds one address string, display name included.
	maxAddressLength = 998
	// maxSubjectLength bounds the subject in bytes (one unfolded header line).
	maxSubjectLength = 998
	// maxHeaders bounds the number of custom headers.
	maxHeaders = 50
	// maxHeaderNameLength bounds a custom header name.
	maxHeaderNameLength = 76
	// maxHeaderValueLength bounds a custom header value in bytes.
	maxHeaderValueLength = 4096
	// maxFilenameLength bounds an attachment file name in bytes.
	maxFilenameLength = 255
	// maxTenantLength bounds the tenant in bytes.
	maxTenantLength = 128
	// maxTemplateFieldLength bounds the template name and version in bytes.
	maxTemplateFieldLength = 256
	// maxTemplateNameLength bounds a template job's template name, as
	// templateNamePattern does.
	maxTemplateNameLength = 64
	// maxTemplateDataKeys bounds the keys of template data, counted in all
	// of its objects at every depth.
	maxTemplateDataKeys = 1000
	// maxTemplateDataDepth bounds how deep objects and arrays nest in
	// template data, the data object counting as 1.
	maxTemplateDataDepth = 16
	// maxLocaleLength bounds the template locale.
	maxLocaleLength = 35
	// maxMetadataEntries bounds the number of metadata entries.
	maxMetadataEntries = 64
	// maxMetadataKeyLength bounds a metadata key in bytes.
	maxMetadataKeyLength = 128
	// maxMetadataValueLength bounds a metadata value in bytes.
	maxMetadataValueLength = 1024
)

// Limits bounds the size of a job. The zero value means "all defaults";
// Limits{}.WithDefaults() gives them as numbers.
//
// The small fields have fixed bounds that are not configurable, so that a
// field which ends up in a header, a log line or a database column cannot be
// abused as a payload; exceeding one is ReasonOversizeField. In bytes: a
// message ID 250 (without angle brackets), an address 998, the subject 998,
// a custom header name 76 and value 4096, at most 50 custom headers, an
// attachment file name 255, the tenant 128, the template name and version
// 256 (a template job's name 64), the locale 35, at most 64 metadata entries
// with keys of 128 and values of 1024; template data nests at most 16 deep
// with at most 1000 keys in all.
type Limits struct {
	// MaxMessageBytes bounds the encoded record value.
	// Defaults to 2 MiB.
	MaxMessageBytes int
	// MaxBodyBytes bounds len(Text)+len(HTML) plus the JSON encoding of
	// Template.Data.
	// Defaults to 256 KiB.
	MaxBodyBytes int
	// MaxAttachmentBytes bounds the decoded size of all attachments together.
	// Defaults to 1 MiB.
	MaxAttachmentBytes int
	// MaxRecipients bounds len(To)+len(Cc)+len(Bcc).
	// Defaults to 100.
	MaxRecipients int
	// MaxDepth bounds how deep objects and arrays nest in the record, the
	// document object counting as 1; deeper records are rejected with
	// ReasonTooDeep before they are decoded, so a record of nested brackets
	// costs no more than its size. Defaults to 32.
	MaxDepth int
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	l.MaxMessageBytes = cmp.Or(l.MaxMessageBytes, defaultMaxMessageBytes)
	l.MaxBodyBytes = cmp.Or(l.MaxBodyBytes, defaultMaxBodyBytes)
	l.MaxAttachmentBytes = cmp.Or(l.MaxAttachmentBytes, defaultMaxAttachmentBytes)
	l.MaxRecipients = cmp.Or(l.MaxRecipients, defaultMaxRecipients)
	l.MaxDepth = cmp.Or(l.MaxDepth, defaultMaxDepth)
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
