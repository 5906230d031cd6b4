package sender_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/wneessen/go-mail"

	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/job"
)

func TestMessage(t *testing.T) {
	j := testJob(t, 7)
	m, err := sender.Message(j)
	if err != nil {
		t.Fatalf("Message: %v", err)
	}
	if got := m.GetMessageID(); got != "<"+j.MessageID+">" {
		t.Errorf("GetMessageID() = %q", got)
	}
	rcpts, err := m.GetRecipients()
	if err != nil || strings.Join(rcpts, ",") != "<to@example.com>,<cc@example.com>,<bcc@example.com>" {
		t.Errorf("GetRecipients() = %q, %v", rcpts, err)
	}
	var buf bytes.Buffer
	if _, err := m.WriteTo(&buf); err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	h, parts := parseMessage(t, buf.Bytes())
	if h.Get("Message-Id") != "<"+j.MessageID+">" || h.Get("Bcc") != "" || h.Get("User-Agent") != "" {
		t.Errorf("header: Message-Id %q Bcc %q User-Agent %q", h.Get("Message-Id"), h.Get("Bcc"), h.Get("User-Agent"))
	}
	if len(parts) != 6 {
		t.Errorf("%d MIME parts, want 6 (mixed, alternative, text, html, 2 attachments)", len(parts))
	}
}

func TestMessageBodies(t *testing.T) {
	tests := []struct {
		name       string
		text, html string
		wantTypes  []string
	}{
		{"text only", "plain", "", []string{"text/plain"}},
		{"html only", "", "<b>x</b>", []string{"text/html"}},
		{"both", "plain", "<b>x</b>", []string{"text/plain", "text/html", "multipart/alternative"}},
		{"neither", "", "", []string{"text/plain"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := simpleJob(t, 1)
			j.Text, j.HTML = tt.text, tt.html
			m, err := sender.Message(j)
			if err != nil {
				t.Fatalf("Message: %v", err)
			}
			var buf bytes.Buffer
			if _, err := m.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			_, parts := parseMessage(t, buf.Bytes())
			var types []string
			for _, p := range parts {
				types = append(types, p.mediaType)
			}
			if strings.Join(types, ",") != strings.Join(tt.wantTypes, ",") {
				t.Errorf("parts %q, want %q", types, tt.wantTypes)
			}
		})
	}
}

// TestMessageRefusesHeaderInjection checks that nothing in a job can add a
// header line, even though job validation should have caught it first.
func TestMessageRefusesHeaderInjection(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*job.Job)
	}{
		{"nil headers ok", nil},
		{"subject CRLF", func(j *job.Job) { j.Subject = "hi\r\nBcc: x@evil.example" }},
		{"subject LF", func(j *job.Job) { j.Subject = "hi\nX-Evil: 1" }},
		{"header value CRLF", func(j *job.Job) { j.Headers = map[string]string{"X-Tag": "a\r\nBcc: x@evil.example"} }},
		{"header value NUL", func(j *job.Job) { j.Headers = map[string]string{"X-Tag": "a\x00b"} }},
		{"header name with colon", func(j *job.Job) { j.Headers = map[string]string{"X-Tag: b\r\nX-Evil": "1"} }},
		{"header name with space", func(j *job.Job) { j.Headers = map[string]string{"X Tag": "1"} }},
		{"header not allowed", func(j *job.Job) { j.Headers = map[string]string{"Bcc": "x@evil.example"} }},
		{"structural header", func(j *job.Job) { j.Headers = map[string]string{"Content-Type": "text/html"} }},
		{"reserved x-postline header", func(j *job.Job) { j.Headers = map[string]string{"X-Postline-Attempt": "1"} }},
		{"header twice in different case", func(j *job.Job) { j.Headers = map[string]string{"X-Tag": "1", "x-tag": "2"} }},
		{"message id with CRLF", func(j *job.Job) { j.MessageID = "a@b\r\nBcc: x@evil.example" }},
		{"message id with brackets", func(j *job.Job) { j.MessageID = "<a@b>" }},
		{"message id with space", func(j *job.Job) { j.MessageID = "a b@c" }},
		{"message id without @", func(j *job.Job) { j.MessageID = "abc" }},
		{"empty message id", func(j *job.Job) { j.MessageID = "" }},
		{"from with CRLF", func(j *job.Job) { j.From = "a@example.com\r\nBcc: x@evil.example" }},
		{"to with CRLF", func(j *job.Job) { j.To = []string{"a@example.com\r\nBcc: x@evil.example"} }},
		{"invalid from", func(j *job.Job) { j.From = "not an address" }},
		{"attachment filename CRLF", func(j *job.Job) {
			j.Attachments = []job.Attachment{{Filename: "a.txt\r\nX-Evil: 1", Content: []byte("x")}}
		}},
		{"attachment without filename", func(j *job.Job) { j.Attachments = []job.Attachment{{Content: []byte("x")}} }},
		{"attachment content type CRLF", func(j *job.Job) {
			j.Attachments = []job.Attachment{{Filename: "a.txt", ContentType: "text/plain\r\nX-Evil: 1", Content: []byte("x")}}
		}},
		{"attachment content type unparsable", func(j *job.Job) {
			j.Attachments = []job.Attachment{{Filename: "a.txt", ContentType: "text/plain; =", Content: []byte("x")}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := simpleJob(t, 1)
			if tt.modify == nil {
				if _, err := sender.Message(j); err != nil {
					t.Fatalf("Message: %v", err)
				}
				return
			}
			tt.modify(j)
			if m, err := sender.Message(j); err == nil {
				var buf bytes.Buffer
				_, _ = m.WriteTo(&buf)
				t.Fatalf("Message accepted the job; it wrote:\n%s", buf.String())
			}
		})
	}
	if _, err := sender.Message(nil); err == nil {
		t.Error("Message(nil) succeeded")
	}
}

// TestGoMailEncodesLineBreaks records what go-mail v0.8.1 does on its own
// with CR/LF in a header value: it RFC 2047-encodes the value, so no header
// line is injected. Message refuses such values anyway (defence in depth,
// and an encoded CRLF is never what the producer meant).
func TestGoMailEncodesLineBreaks(t *testing.T) {
	m := mail.NewMsg()
	if err := m.From("a@example.com"); err != nil {
		t.Fatal(err)
	}
	m.Subject("hi\r\nBcc: x@evil.example")
	m.SetGenHeader("X-Tag", "a\r\nX-Evil: 1")
	m.SetBodyString(mail.TypeTextPlain, "body")
	var buf bytes.Buffer
	if _, err := m.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	h, _ := parseMessage(t, buf.Bytes())
	if h.Get("Bcc") != "" || h.Get("X-Evil") != "" {
		t.Errorf("go-mail let a header line through:\n%s", buf.String())
	}
}
