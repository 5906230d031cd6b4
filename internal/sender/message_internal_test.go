package sender

import (
	"bytes"
	"encoding/base64"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	netmail "net/mail"
	"net/textproto"
	"regexp"
	"strings"
	"testing"

	"github.com/postline/postline/job"
)

// TestRenderDeferredBodyMatchesGoMail holds render's appended bodies (see
// message) to what go-mail writes itself for every shape of job: the same
// headers and the same decoded parts. A part render sends
// quoted-printable is byte for byte go-mail's (but for the Date line);
// the others differ from go-mail's, which quoted-printable encodes every
// body, only in their transfer encoding (appendBodyPart picks it).
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
		{"text and html, non-ASCII and long lines", "Grüße\n" + long + "\n", "<p title=\"a=b\">" + strings.Repeat("x", 1200) + "</p>", false},
		{"text and html in 100 KiB", benchBody(50 << 10), benchHTML(50 << 10), false},
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
			gh, gotParts := mimeLeaves(t, got)
			wh, wantParts := mimeLeaves(t, want.Bytes())
			for _, name := range []string{"From", "To", "Subject", "Message-Id", "Mime-Version", "X-Campaign"} {
				if gh.Get(name) != wh.Get(name) {
					t.Errorf("%s: %q, go-mail writes %q", name, gh.Get(name), wh.Get(name))
				}
			}
			if len(gotParts) != len(wantParts) {
				t.Fatalf("%d parts, go-mail writes %d", len(gotParts), len(wantParts))
			}
			for i := range gotParts {
				if g, w := gotParts[i], wantParts[i]; g.mediaType != w.mediaType || !bytes.Equal(g.body, w.body) {
					t.Errorf("part %d: %s %q, go-mail writes %s %q", i, g.mediaType, g.body, w.mediaType, w.body)
				}
			}
			if tt.attach || (tt.text != "" && tt.html != "") {
				// Multipart: the boundaries are random, so only the
				// shape and the parts are compared.
				if !bytes.Contains(got, []byte("multipart/")) {
					t.Fatalf("multipart job rendered without multipart:\n%s", got)
				}
				return
			}
			if _, enc := appendBodyPart(nil, tt.text+tt.html); enc != encQuotedPrintable {
				if cte := gh.Get("Content-Transfer-Encoding"); cte != enc.String() {
					t.Errorf("Content-Transfer-Encoding %q, want %s", cte, enc)
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

// mimeLeaf is one leaf part of a message, decoded.
type mimeLeaf struct {
	mediaType string
	body      []byte
}

// mimeLeaves returns the header and the decoded leaf parts of a message
// (multipart.Reader decodes quoted-printable itself).
func mimeLeaves(t *testing.T, data []byte) (netmail.Header, []mimeLeaf) {
	t.Helper()
	msg, err := netmail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("parse message: %v", err)
	}
	var leaves []mimeLeaf
	var walk func(h textproto.MIMEHeader, body io.Reader)
	walk = func(h textproto.MIMEHeader, body io.Reader) {
		mediaType, params, err := mime.ParseMediaType(h.Get("Content-Type"))
		if err != nil {
			t.Fatalf("content type %q: %v", h.Get("Content-Type"), err)
		}
		if strings.HasPrefix(mediaType, "multipart/") {
			mr := multipart.NewReader(body, params["boundary"])
			for {
				p, err := mr.NextPart()
				if err == io.EOF {
					return
				}
				if err != nil {
					t.Fatalf("multipart: %v", err)
				}
				walk(p.Header, p)
			}
		}
		switch strings.ToLower(h.Get("Content-Transfer-Encoding")) {
		case "base64":
			body = base64.NewDecoder(base64.StdEncoding, body)
		case "quoted-printable":
			body = quotedprintable.NewReader(body)
		}
		b, err := io.ReadAll(body)
		if err != nil {
			t.Fatalf("read part %s: %v", mediaType, err)
		}
		leaves = append(leaves, mimeLeaf{mediaType: mediaType, body: b})
	}
	walk(textproto.MIMEHeader(msg.Header), msg.Body)
	return msg.Header, leaves
}
