package sender

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/postline/postline/job"
)

// TestRenderDeferredBodyMatchesGoMail holds render's appended body (see
// message) to what go-mail writes itself, byte for byte but for the Date
// line, for every shape of job: the single-part ones take the deferred
// path, the others go-mail's.
func TestRenderDeferredBodyMatchesGoMail(t *testing.T) {
	long := strings.Repeat("a long line without a break, ", 20)
	tests := []struct {
		name       string
		text, html string
		attach     bool
	}{
		{"short text", "hello", "", false},
		{"empty bodies", "", "", false},
		{"html only", "", "<p>Grüße, <b>world</b></p>\n", false},
		{"long lines and lone LF", long + "\n" + long + "\nend", "", false},
		{"CRLF, trailing space and tab", "line one \r\nline two\t\r\n\r\n.\r\n", "", false},
		{"equals signs and non-ASCII", "a=b ==\nünïcødé ✓\n", "", false},
		{"1 KiB of lines", strings.Repeat("Postline end-to-end benchmark body text, 64 bytes per line ...\n", 16), "", false},
		{"text and html", "plain", "<b>x</b>", false},
		{"attachment", "plain", "", true},
	}
	r, err := New(Config{Host: "127.0.0.1", Port: 25}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	date := regexp.MustCompile(`(?m)^Date: .*\r\n`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := &job.Job{
				Version: job.SchemaVersion, MessageID: "deferred@test.postline",
				From: "Sender <sender@example.com>", To: []string{"to@example.com"},
				Subject: "Grüße", Text: tt.text, HTML: tt.html,
				Headers: map[string]string{"X-Campaign": "spring"},
			}
			if tt.attach {
				j.Attachments = []job.Attachment{{Filename: "a.txt", Content: []byte("x\n")}}
			}
			m, err := Message(j)
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			if _, err := m.WriteTo(&want); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			got, rerr := r.render(j, &buf)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if tt.attach || (tt.text != "" && tt.html != "") {
				// Multipart: the boundaries are random, so only the
				// shape is compared.
				if !bytes.Contains(got, []byte("multipart/")) {
					t.Fatalf("multipart job rendered without multipart:\n%s", got)
				}
				return
			}
			g, w := date.ReplaceAll(got, nil), date.ReplaceAll(want.Bytes(), nil)
			if !bytes.Equal(g, w) {
				t.Errorf("render differs from go-mail:\ngot:\n%q\nwant:\n%q", g, w)
			}
		})
	}
}

// TestRenderKeepsNoBodyBetweenMails renders a long mail then a short one
// into the same buffer: nothing of the first may show in the second.
func TestRenderKeepsNoBodyBetweenMails(t *testing.T) {
	r, err := New(Config{Host: "127.0.0.1", Port: 25}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	first := &job.Job{Version: job.SchemaVersion, MessageID: "one@test.postline", From: "a@example.com",
		To: []string{"b@example.com"}, Text: strings.Repeat("secret first body\n", 100)}
	if _, rerr := r.render(first, &buf); rerr != nil {
		t.Fatal(rerr)
	}
	second := &job.Job{Version: job.SchemaVersion, MessageID: "two@test.postline", From: "a@example.com",
		To: []string{"b@example.com"}, Text: "short"}
	got, rerr := r.render(second, &buf)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if bytes.Contains(got, []byte("secret")) || !bytes.HasSuffix(got, []byte("\r\n\r\nshort")) {
		t.Errorf("second rendering:\n%q", got)
	}
}
