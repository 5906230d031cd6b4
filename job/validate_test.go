package job

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func validJob() Job {
	return Job{
		Version:   SchemaVersion,
		MessageID: "abc.123@postline.test",
		From:      "Postline <noreply@example.com>",
		To:        []string{"ada@example.test"},
		Subject:   "Hello",
		Text:      "Hi Ada",
	}
}

func TestValidate(t *testing.T) {
	small := Limits{MaxBodyBytes: 10, MaxAttachmentBytes: 4, MaxRecipients: 2}
	tests := []struct {
		name   string
		mutate func(*Job)
		limits Limits
		reason Reason // empty: valid
		field  string
	}{
		{name: "valid", mutate: func(*Job) {}},
		{name: "valid with everything", mutate: func(j *Job) {
			j.MessageID = "<abc.123@postline.test>"
			j.Cc = []string{"b@example.test"}
			j.Bcc = []string{"\"Bob, Jr\" <bob@example.test>"}
			j.ReplyTo = []string{"support@example.com"}
			j.HTML = "<p>Hi</p>"
			j.Headers = map[string]string{"X-Campaign": "spring", "List-Unsubscribe": "<mailto:u@example.com>", "list-unsubscribe-post": "List-Unsubscribe=One-Click"}
			j.Attachments = []Attachment{{Filename: "a.pdf", ContentType: "application/pdf; name=a.pdf", Content: []byte("%PDF")}, {Filename: "empty.txt"}}
			j.Priority = PriorityBulk
			j.Tenant = "acme"
			j.Template = &TemplateRef{Name: "welcome", Version: "3"}
			j.Metadata = map[string]string{"order": "42"}
		}},
		{name: "unsubscribe asked", mutate: func(j *Job) { j.Unsubscribe, j.Headers = true, map[string]string{"List-Id": "news"} }},
		{name: "unsubscribe with an own List-Unsubscribe", mutate: func(j *Job) {
			j.Unsubscribe, j.Headers = true, map[string]string{"list-UNSUBSCRIBE": "<mailto:u@example.com>"}
		}, reason: ReasonHeaderNotAllowed, field: "headers.list-UNSUBSCRIBE"},
		{name: "unsubscribe with an own List-Unsubscribe-Post", mutate: func(j *Job) {
			j.Unsubscribe, j.Headers = true, map[string]string{"List-Unsubscribe-Post": "List-Unsubscribe=One-Click", "X-A": "1"}
		}, reason: ReasonHeaderNotAllowed, field: "headers.List-Unsubscribe-Post"},
		{name: "html only", mutate: func(j *Job) { j.Text, j.HTML = "", "<p>x</p>" }},
		{name: "empty subject", mutate: func(j *Job) { j.Subject = "" }},
		{name: "cc only", mutate: func(j *Job) { j.To, j.Cc = nil, []string{"a@example.test"} }},
		{name: "unicode display name", mutate: func(j *Job) { j.From = "Zoë <z@example.test>" }},

		{name: "version zero", mutate: func(j *Job) { j.Version = 0 }, reason: ReasonUnsupportedVersion, field: "version"},
		{name: "version two", mutate: func(j *Job) { j.Version = 2 }, reason: ReasonUnsupportedVersion, field: "version"},
		{name: "no message id", mutate: func(j *Job) { j.MessageID = "" }, reason: ReasonMissingField, field: "message_id"},
		{name: "message id without at", mutate: func(j *Job) { j.MessageID = "abc" }, reason: ReasonInvalidMessageID, field: "message_id"},
		{name: "message id two ats", mutate: func(j *Job) { j.MessageID = "a@b@c" }, reason: ReasonInvalidMessageID, field: "message_id"},
		{name: "message id empty left", mutate: func(j *Job) { j.MessageID = "@b" }, reason: ReasonInvalidMessageID, field: "message_id"},
		{name: "message id space", mutate: func(j *Job) { j.MessageID = "a b@c" }, reason: ReasonInvalidMessageID, field: "message_id"},
		{name: "message id unbalanced", mutate: func(j *Job) { j.MessageID = "<a@b" }, reason: ReasonInvalidMessageID, field: "message_id"},
		{name: "message id inner bracket", mutate: func(j *Job) { j.MessageID = "<<a@b>>" }, reason: ReasonInvalidMessageID, field: "message_id"},
		{name: "message id non-ascii", mutate: func(j *Job) { j.MessageID = "é@b" }, reason: ReasonInvalidMessageID, field: "message_id"},
		{name: "message id too long", mutate: func(j *Job) { j.MessageID = strings.Repeat("a", 249) + "@b" }, reason: ReasonInvalidMessageID, field: "message_id"},
		{name: "message id 250 chars", mutate: func(j *Job) { j.MessageID = "<" + strings.Repeat("a", 248) + "@b>" }},
		{name: "message id empty brackets", mutate: func(j *Job) { j.MessageID = "<>" }, reason: ReasonInvalidMessageID, field: "message_id"},
		{name: "message id closing bracket only", mutate: func(j *Job) { j.MessageID = "a@b>" }, reason: ReasonInvalidMessageID, field: "message_id"},
		{name: "message id space after brackets", mutate: func(j *Job) { j.MessageID = "<a@b> " }, reason: ReasonInvalidMessageID, field: "message_id"},
		{name: "message id tab", mutate: func(j *Job) { j.MessageID = "a@b\t" }, reason: ReasonInvalidMessageID, field: "message_id"},
		{name: "message id LF in brackets", mutate: func(j *Job) { j.MessageID = "<a@b\n>" }, reason: ReasonHeaderInjection, field: "message_id"},
		{name: "message id CRLF", mutate: func(j *Job) { j.MessageID = "a@b\r\nBcc: x@y" }, reason: ReasonHeaderInjection, field: "message_id"},
		{name: "no from", mutate: func(j *Job) { j.From = "" }, reason: ReasonMissingField, field: "from"},
		{name: "bad from", mutate: func(j *Job) { j.From = "bob" }, reason: ReasonInvalidAddress, field: "from"},
		{name: "two froms", mutate: func(j *Job) { j.From = "a@b.c, d@e.f" }, reason: ReasonInvalidAddress, field: "from"},
		{name: "from CRLF", mutate: func(j *Job) { j.From = "a@b.c\r\nBcc: evil@x.y" }, reason: ReasonHeaderInjection, field: "from"},
		{name: "encoded CRLF in display name", mutate: func(j *Job) { j.From = "=?utf-8?q?a=0D=0Ab?= <a@b.c>" }, reason: ReasonHeaderInjection, field: "from"},
		{name: "bad reply-to", mutate: func(j *Job) { j.ReplyTo = []string{"ok@b.c", "nope"} }, reason: ReasonInvalidAddress, field: "reply_to[1]"},
		{name: "no recipients", mutate: func(j *Job) { j.To = nil }, reason: ReasonMissingField, field: "to"},
		{name: "too many recipients", limits: small, mutate: func(j *Job) {
			j.To = []string{"a@b.c", "d@e.f"}
			j.Bcc = []string{"g@h.i"}
		}, reason: ReasonTooManyRecipients},
		{name: "bad to", mutate: func(j *Job) { j.To = []string{"a@b.c", "bob"} }, reason: ReasonInvalidAddress, field: "to[1]"},
		{name: "empty to", mutate: func(j *Job) { j.To = []string{""} }, reason: ReasonInvalidAddress, field: "to[0]"},
		{name: "bad cc", mutate: func(j *Job) { j.Cc = []string{"<>"} }, reason: ReasonInvalidAddress, field: "cc[0]"},
		{name: "bcc LF", mutate: func(j *Job) { j.Bcc = []string{"a@b.c\n"} }, reason: ReasonHeaderInjection, field: "bcc[0]"},
		{name: "address too long", mutate: func(j *Job) { j.To = []string{strings.Repeat("a", 990) + "@example.test"} }, reason: ReasonInvalidAddress, field: "to[0]"},
		{name: "subject CR", mutate: func(j *Job) { j.Subject = "Hi\rthere" }, reason: ReasonHeaderInjection, field: "subject"},
		{name: "subject NUL", mutate: func(j *Job) { j.Subject = "Hi\x00" }, reason: ReasonHeaderInjection, field: "subject"},
		{name: "subject too long", mutate: func(j *Job) { j.Subject = strings.Repeat("s", maxSubjectLength+1) }, reason: ReasonOversizeField, field: "subject"},
		{name: "no body", mutate: func(j *Job) { j.Text = "" }, reason: ReasonMissingBody},
		{name: "oversize body", limits: small, mutate: func(j *Job) { j.Text, j.HTML = "123456", "78901" }, reason: ReasonOversizeBody},
		{name: "body at limit", limits: small, mutate: func(j *Job) { j.Text, j.HTML = "12345", "67890" }},
		{name: "header not allowed", mutate: func(j *Job) { j.Headers = map[string]string{"Bcc": "x@y.z"} }, reason: ReasonHeaderNotAllowed, field: "headers.Bcc"},
		{name: "header reserved", mutate: func(j *Job) { j.Headers = map[string]string{"x-postline-attempt": "9"} }, reason: ReasonHeaderNotAllowed, field: "headers.x-postline-attempt"},
		{name: "header bare X-", mutate: func(j *Job) { j.Headers = map[string]string{"X-": "v"} }, reason: ReasonHeaderNotAllowed, field: "headers.X-"},
		{name: "header name colon", mutate: func(j *Job) { j.Headers = map[string]string{"X-A:B": "v"} }, reason: ReasonHeaderNotAllowed, field: "headers.X-A:B"},
		{name: "header name space", mutate: func(j *Job) { j.Headers = map[string]string{"X-A B": "v"} }, reason: ReasonHeaderNotAllowed, field: "headers.X-A B"},
		{name: "header name empty", mutate: func(j *Job) { j.Headers = map[string]string{"": "v"} }, reason: ReasonHeaderNotAllowed, field: "headers."},
		{name: "header name CRLF", mutate: func(j *Job) { j.Headers = map[string]string{"X-A\r\nBcc": "v"} }, reason: ReasonHeaderInjection, field: "headers"},
		{name: "header value LF", mutate: func(j *Job) { j.Headers = map[string]string{"X-A": "v\nBcc: x@y.z"} }, reason: ReasonHeaderInjection, field: "headers.X-A"},
		{name: "header case duplicate", mutate: func(j *Job) { j.Headers = map[string]string{"X-A": "1", "x-a": "2"} }, reason: ReasonHeaderNotAllowed, field: "headers.x-a"},
		{name: "headers first problem by name", mutate: func(j *Job) { j.Headers = map[string]string{"X-B": "\n", "Received": "x"} }, reason: ReasonHeaderNotAllowed, field: "headers.Received"},
		{name: "too many headers", mutate: func(j *Job) {
			j.Headers = map[string]string{}
			for i := range maxHeaders + 1 {
				j.Headers["X-H"+strings.Repeat("a", i)] = "v"
			}
		}, reason: ReasonOversizeField, field: "headers"},
		{name: "attachment no filename", mutate: func(j *Job) { j.Attachments = []Attachment{{Content: []byte("x")}} }, reason: ReasonMissingField, field: "attachments[0].filename"},
		{name: "attachment filename slash", mutate: func(j *Job) { j.Attachments = []Attachment{{Filename: "../etc/passwd"}} }, reason: ReasonInvalidField, field: "attachments[0].filename"},
		{name: "attachment filename quote", mutate: func(j *Job) { j.Attachments = []Attachment{{Filename: `a".pdf`}} }, reason: ReasonInvalidField, field: "attachments[0].filename"},
		{name: "attachment filename backslash", mutate: func(j *Job) { j.Attachments = []Attachment{{Filename: `a\b`}} }, reason: ReasonInvalidField, field: "attachments[0].filename"},
		{name: "attachment filename CRLF", mutate: func(j *Job) { j.Attachments = []Attachment{{Filename: "a\r\n.pdf"}} }, reason: ReasonHeaderInjection, field: "attachments[0].filename"},
		{name: "attachment bad content type", mutate: func(j *Job) { j.Attachments = []Attachment{{Filename: "a", ContentType: "pdf"}} }, reason: ReasonInvalidField, field: "attachments[0].content_type"},
		{name: "attachment content type LF", mutate: func(j *Job) { j.Attachments = []Attachment{{Filename: "a", ContentType: "text/plain\n"}} }, reason: ReasonHeaderInjection, field: "attachments[0].content_type"},
		{name: "attachments oversize together", limits: small, mutate: func(j *Job) {
			j.Attachments = []Attachment{{Filename: "a", Content: []byte("123")}, {Filename: "b", Content: []byte("45")}}
		}, reason: ReasonOversizeAttachment, field: "attachments[1]"},
		{name: "attachments at limit", limits: small, mutate: func(j *Job) {
			j.Attachments = []Attachment{{Filename: "a", Content: []byte("12")}, {Filename: "b", Content: []byte("34")}}
		}},
		{name: "bad priority", mutate: func(j *Job) { j.Priority = "high" }, reason: ReasonInvalidPriority, field: "priority"},
		{name: "tenant LF", mutate: func(j *Job) { j.Tenant = "a\nb" }, reason: ReasonHeaderInjection, field: "tenant"},
		{name: "tenant too long", mutate: func(j *Job) { j.Tenant = strings.Repeat("t", maxTenantLength+1) }, reason: ReasonOversizeField, field: "tenant"},
		{name: "template without name", mutate: func(j *Job) { j.Template = &TemplateRef{Version: "1"} }, reason: ReasonMissingField, field: "template.name"},
		{name: "template version CR", mutate: func(j *Job) { j.Template = &TemplateRef{Name: "n", Version: "1\r"} }, reason: ReasonHeaderInjection, field: "template.version"},
		{name: "metadata value LF", mutate: func(j *Job) { j.Metadata = map[string]string{"k": "v\n"} }, reason: ReasonHeaderInjection, field: "metadata.k"},
		{name: "metadata key LF", mutate: func(j *Job) { j.Metadata = map[string]string{"k\n": "v"} }, reason: ReasonHeaderInjection, field: "metadata"},
		{name: "metadata empty key", mutate: func(j *Job) { j.Metadata = map[string]string{"": "v"} }, reason: ReasonInvalidField, field: "metadata."},
		{name: "metadata key too long", mutate: func(j *Job) { j.Metadata = map[string]string{strings.Repeat("k", maxMetadataKeyLength+1): "v"} }, reason: ReasonOversizeField,
			field: "metadata." + strings.Repeat("k", 64) + "..."},
		{name: "header name too long", mutate: func(j *Job) { j.Headers = map[string]string{"X-" + strings.Repeat("h", 1<<16): "v"} }, reason: ReasonHeaderNotAllowed,
			field: "headers.X-" + strings.Repeat("h", 62) + "..."},
		{name: "metadata value too long", mutate: func(j *Job) { j.Metadata = map[string]string{"k": strings.Repeat("v", maxMetadataValueLength+1)} }, reason: ReasonOversizeField, field: "metadata.k"},
		{name: "too much metadata", mutate: func(j *Job) {
			j.Metadata = map[string]string{}
			for i := range maxMetadataEntries + 1 {
				j.Metadata[strings.Repeat("k", i+1)] = "v"
			}
		}, reason: ReasonOversizeField, field: "metadata"},
		{name: "expired job is still valid", mutate: func(j *Job) {
			past := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
			j.NotAfter = &past
		}},
		{name: "first problem wins: from before body", mutate: func(j *Job) { j.From, j.Text = "bad", "" }, reason: ReasonInvalidAddress, field: "from"},
		{name: "first problem wins: count before addresses", limits: small, mutate: func(j *Job) {
			j.To = []string{"bad1", "bad2", "bad3"}
		}, reason: ReasonTooManyRecipients},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := validJob()
			tt.mutate(&j)
			err := j.Validate(tt.limits)
			checkReason(t, err, tt.reason, tt.field)
		})
	}
}

// checkReason fails t unless err is a *ValidationError with reason and field
// (field is only checked when not empty), or nil when reason is empty.
func checkReason(t *testing.T, err error, reason Reason, field string) {
	t.Helper()
	if reason == "" {
		if err != nil {
			t.Fatalf("got error %v, want none", err)
		}
		return
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got error %v (%T), want a *ValidationError with reason %s", err, err, reason)
	}
	if ve.Reason != reason {
		t.Fatalf("got reason %s (%v), want %s", ve.Reason, err, reason)
	}
	if field != "" && ve.Field != field {
		t.Fatalf("got field %q (%v), want %q", ve.Field, err, field)
	}
}

func TestValidationErrorFormat(t *testing.T) {
	j := validJob()
	j.To = []string{"a@b.c", "bob"}
	err := j.Validate(Limits{})
	want := "job: invalid_address: to[1]: mail: missing '@' or angle-addr"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	tests := []struct {
		err  ValidationError
		want string
	}{
		{ValidationError{Reason: ReasonMissingBody, Detail: "d"}, "job: missing_body: d"},
		{ValidationError{Reason: ReasonMissingField, Field: "from"}, "job: missing_field: from"},
		{ValidationError{Reason: ReasonExpired}, "job: expired"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

func TestHeaderAllowed(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"X-Campaign", true},
		{"x-campaign", true},
		{"List-Unsubscribe", true},
		{"LIST-UNSUBSCRIBE-POST", true},
		{"List-Id", true},
		{"In-Reply-To", true},
		{"References", true},
		{"Auto-Submitted", true},
		{"Precedence", true},
		{"X-Postline-Attempt", false},
		{"X-", false},
		{"Subject", false},
		{"From", false},
		{"Message-ID", false},
		{"Content-Type", false},
		{"Bcc", false},
	}
	for _, tt := range tests {
		if got := HeaderAllowed(tt.name); got != tt.want {
			t.Errorf("HeaderAllowed(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestNormalize(t *testing.T) {
	j := Job{MessageID: "<a@b>"}
	j.Normalize()
	if j.MessageID != "a@b" || j.Priority != PriorityNormal || j.Version != SchemaVersion {
		t.Fatalf("got %+v", j)
	}
	j = Job{MessageID: "a@b", Priority: PriorityBulk, Version: 7}
	j.Normalize()
	if j.MessageID != "a@b" || j.Priority != PriorityBulk || j.Version != 7 {
		t.Fatalf("Normalize changed set fields: %+v", j)
	}
	// "<>" must not turn into "no message ID", which Publisher would fill
	// with a new one: it stays as written and Validate rejects it.
	j = Job{MessageID: "<>"}
	j.Normalize()
	if j.MessageID != "<>" {
		t.Fatalf("Normalize turned <> into %q", j.MessageID)
	}
	for _, id := range []string{"<a@b>", "a@b"} {
		j := validJob()
		j.MessageID = id
		j.Normalize()
		if j.MessageID != "a@b" {
			t.Errorf("Normalize(%q) = %q, want the bare a@b", id, j.MessageID)
		}
	}
}

func TestExpired(t *testing.T) {
	deadline := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		notAfter *time.Time
		now      time.Time
		want     bool
	}{
		{"no deadline", nil, deadline.Add(1000 * time.Hour), false},
		{"before", &deadline, deadline.Add(-time.Nanosecond), false},
		{"at", &deadline, deadline, false},
		{"after", &deadline, deadline.Add(time.Nanosecond), true},
	}
	for _, tt := range tests {
		j := validJob()
		j.NotAfter = tt.notAfter
		if got := j.Expired(tt.now); got != tt.want {
			t.Errorf("%s: Expired = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestLimits(t *testing.T) {
	got := Limits{MaxRecipients: 5}.WithDefaults()
	want := Limits{MaxMessageBytes: defaultMaxMessageBytes, MaxBodyBytes: defaultMaxBodyBytes, MaxAttachmentBytes: defaultMaxAttachmentBytes, MaxRecipients: 5, MaxDepth: defaultMaxDepth}
	if got != want {
		t.Fatalf("WithDefaults = %+v, want %+v", got, want)
	}
	if defaultMaxMessageBytes != 2*1024*1024 || defaultMaxBodyBytes != 256*1024 || defaultMaxAttachmentBytes != 1024*1024 || defaultMaxDepth != 32 {
		t.Fatal("default limits changed")
	}
	if err := (Limits{}).Validate(); err != nil {
		t.Fatalf("zero limits: %v", err)
	}
	err := Limits{MaxBodyBytes: -1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "MaxBodyBytes") || !strings.Contains(err.Error(), "-1") {
		t.Fatalf("negative limit: got %v, want an error naming MaxBodyBytes and -1", err)
	}
	if err := (Limits{MaxDepth: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "MaxDepth") {
		t.Fatalf("negative MaxDepth: got %v, want an error naming MaxDepth", err)
	}
}

// FuzzHeaderAllowed holds HeaderAllowed, which compares without
// lower-casing, to the lower-casing definition it replaced.
func FuzzHeaderAllowed(f *testing.F) {
	for _, s := range []string{"X-A", "x-", "X-Postline-Id", "x-postline-", "LIST-ID", "List-Unsubscribe-Post",
		"Precedence", "From", "X\u212a-a", "X-\xff", "", "list-i\u0130d", "Auto-Submitted"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		lower := strings.ToLower(name)
		want := false
		if strings.HasPrefix(lower, "x-") {
			want = !strings.HasPrefix(lower, reservedHeaderPrefix) && len(lower) > len("x-")
		} else {
			want = slices.Contains(allowedHeaders, lower)
		}
		if got := HeaderAllowed(name); got != want {
			t.Fatalf("HeaderAllowed(%q) = %v, want %v", name, got, want)
		}
	})
}
