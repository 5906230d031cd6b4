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
	// Unsubscribe asks the worker to add its own one-click unsubscribe
	// headers (RFC 8058: List-Unsubscribe and List-Unsubscribe-Post, a
	// link and a mailto address for each recipient) to a mail that is not
	// bulk; bulk mail gets them anyway unless it carries a List-Unsubscribe
	// header of its own. A job that sets it may not carry those headers.
	Unsubscribe bool `json:"unsubscribe,omitempty"`
}

// Attachment is a file sent with the mail. Content is base64 in JSON.
type Attachment struct {
	Filename    string `json:"filename"`
	ContentType string `json:"content_type,omitempty"`
	Content     []byte `json:"content"`
}

// TemplateRef names a template. On a template job (see Job.Templated) it is
// what the worker renders the subject and bodies from; on a job that carries
// its own text or HTML body it is only a reference kept for audit.
type TemplateRef struct {
	// Name is the template's name. On a template job it is the template
	// store's name: 1 to 64 characters of a-z, 0-9, '-' and '_', starting
	// and ending with a letter or digit.
	Name string `json:"name"`
	// Version picks the template version on a template job: a version
	// number ("3"), a label ("active", "canary" or "fallback"), or empty,
	// which lets the template's labels decide (the active version, or the
	// canary for its share of sends). On a job with bodies it is free text.
	Version string `json:"version,omitempty"`
	// Data is the template's input. Numbers decode as json.Number, so they
	// keep their exact digits. Its encoding counts toward the body size
	// limit, and it nests at most 16 deep with at most 1000 keys in all.
	Data map[string]any `json:"data,omitempty"`
	// Locale is a BCP 47 language tag such as "fr-CA" (a language of 2 to 8
	// letters, then subtags of 1 to 8 letters or digits after a '-', at most
	// 35 characters); empty means the template's default locale.
	Locale string `json:"locale,omitempty"`
}

// Templated reports whether j is a template job: it names a template and
// carries no text or HTML body, so the worker renders the subject and bodies
// from the template. An empty Subject then means the template's subject.
func (j *Job) Templated() bool {
	return j.Template != nil && j.Text == "" && j.HTML == ""
}
