package job

import "time"

// SchemaVersion is the only version of the job document this package reads
// and writes.
const SchemaVersion = 1

// Priority orders jobs for retry budgets and limits.
type Priority string

// The priorities a job may carry. An empty priority means PriorityNormal.
const (
	PriorityUrgent Priority = "urgent"
	PriorityNormal Priority = "normal"
	PriorityBulk   Priority = "bulk"
)

// Job is one mail to deliver: schema version 1.
//
// Addresses are RFC 5322 strings ("Ada <ada@example.com>" or
// "ada@example.com"). MessageID is an RFC 5322 msg-id without angle
// brackets; Publisher generates one when it is empty.
type Job struct {
	Version     int               `json:"version"`
	MessageID   string            `json:"message_id"`
	From        string            `json:"from"`
	To          []string          `json:"to,omitempty"`
	Cc          []string          `json:"cc,omitempty"`
	Bcc         []string          `json:"bcc,omitempty"`
	ReplyTo     []string          `json:"reply_to,omitempty"`
	Subject     string            `json:"subject"`
	Text        string            `json:"text,omitempty"`
	HTML        string            `json:"html,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Attachments []Attachment      `json:"attachments,omitempty"`
	Priority    Priority          `json:"priority,omitempty"`
	Tenant      string            `json:"tenant,omitempty"`
	Template    *TemplateRef      `json:"template,omitempty"`
	NotAfter    *time.Time        `json:"not_after,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

// Attachment is a file sent with the mail. Content is base64 in JSON.
type Attachment struct {
	Filename    string `json:"filename"`
	ContentType string `json:"content_type,omitempty"`
	Content     []byte `json:"content"`
}

// TemplateRef names a template the producer rendered the body from. The
// worker does not render templates; the reference is kept for audit.
type TemplateRef struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}
