package sender_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/job"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newRelay returns a relay for srv (TLS auto: none on 127.0.0.1) with
// cfg's other fields, and the registry its metrics are on.
func newRelay(t *testing.T, srv *smtptest.Server, cfg sender.Config) (*sender.Relay, *prometheus.Registry) {
	t.Helper()
	cfg.Host, cfg.Port = srv.Host(), srv.Port()
	reg := prometheus.NewRegistry()
	r, err := sender.New(cfg, testLogger(t), reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r, reg
}

// newSession returns a session closed at the end of the test.
func newSession(t *testing.T, r *sender.Relay) *sender.Session {
	t.Helper()
	s := r.NewSession()
	t.Cleanup(func() { _ = s.Close() }) // the server may be gone already
	return s
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// testJob is a job using every field Message reads.
func testJob(t *testing.T, i int) *job.Job {
	return &job.Job{
		Version:   job.SchemaVersion,
		MessageID: fmt.Sprintf("%d.%s@test.postline", i, strings.ReplaceAll(t.Name(), "/", ".")),
		From:      "Sender <sender@example.com>",
		To:        []string{"Ada <to@example.com>"},
		Cc:        []string{"cc@example.com"},
		Bcc:       []string{"bcc@example.com"},
		ReplyTo:   []string{"reply@example.com"},
		Subject:   fmt.Sprintf("Grüße %d", i),
		Text:      fmt.Sprintf("text body %d", i),
		HTML:      fmt.Sprintf("<p>html body %d</p>", i),
		Headers:   map[string]string{"X-Campaign": "spring", "List-Unsubscribe": "<mailto:unsubscribe@example.com>"},
		Attachments: []job.Attachment{
			{Filename: "report.csv", ContentType: "text/csv", Content: []byte("a,b\n1,2\n")},
			{Filename: "blob.bin", Content: []byte{0, 1, 2, 255}},
		},
	}
}

// simpleJob has one recipient and a text body.
func simpleJob(t *testing.T, i int, to ...string) *job.Job {
	if len(to) == 0 {
		to = []string{"to@example.com"}
	}
	return &job.Job{
		Version:   job.SchemaVersion,
		MessageID: fmt.Sprintf("s%d.%s@test.postline", i, strings.ReplaceAll(t.Name(), "/", ".")),
		From:      "sender@example.com",
		To:        to,
		Subject:   fmt.Sprintf("simple %d", i),
		Text:      "hello",
	}
}

// part is one leaf of a MIME tree, decoded.
type part struct {
	mediaType string
	filename  string
	body      []byte
}

// parseMessage returns the header and the decoded leaf parts of a message.
func parseMessage(t *testing.T, data []byte) (mail.Header, []part) {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("parse message: %v", err)
	}
	var parts []part
	var walk func(ct, cte, cd string, body io.Reader)
	walk = func(ct, cte, cd string, body io.Reader) {
		mediaType, params, err := mime.ParseMediaType(ct)
		if err != nil {
			t.Fatalf("content type %q: %v", ct, err)
		}
		if strings.HasPrefix(mediaType, "multipart/") {
			mr := multipart.NewReader(body, params["boundary"])
			for {
				p, err := mr.NextPart()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("multipart: %v", err)
				}
				walk(p.Header.Get("Content-Type"), p.Header.Get("Content-Transfer-Encoding"), p.Header.Get("Content-Disposition"), p)
			}
			parts = append(parts, part{mediaType: mediaType})
			return
		}
		switch strings.ToLower(cte) {
		case "base64":
			body = base64.NewDecoder(base64.StdEncoding, body)
		case "quoted-printable":
			body = quotedprintable.NewReader(body)
		}
		b, err := io.ReadAll(body)
		if err != nil {
			t.Fatalf("read part %s: %v", mediaType, err)
		}
		p := part{mediaType: mediaType, body: b}
		if cd != "" {
			if _, dp, err := mime.ParseMediaType(cd); err == nil {
				p.filename = dp["filename"]
			}
		}
		parts = append(parts, p)
	}
	h := msg.Header
	walk(h.Get("Content-Type"), h.Get("Content-Transfer-Encoding"), "", msg.Body)
	return h, parts
}
