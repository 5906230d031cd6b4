package sender

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	msgauth "github.com/emersion/go-msgauth/dkim"

	"github.com/postline/postline/internal/dkim"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testenv"
	"github.com/postline/postline/job"
)

// TestTransferEncodingsSurvivePostfix sends a DKIM-signed mail in each
// transfer encoding the sender picks (7bit, quoted-printable, base64, and
// go-mail's parts beside an attachment) through the stack's Postfix, and
// verifies what reaches the destination with go-msgauth: the encodings
// must pass a real MTA, whatever it does to them, with the signature
// intact, and the bodies must decode back.
func TestTransferEncodingsSurvivePostfix(t *testing.T) {
	kr, key := ed25519Keyring(t, "example.com")
	p, dest, r := postfixRelay(t, Config{DKIM: kr})
	s := r.NewSession()
	defer s.Close()

	html := strings.Repeat(`<p class="x"><a href="https://example.test/?a=1&b=2">link</a> `+strings.Repeat("word ", 150)+"</p>\n", 20)
	tests := []struct {
		name, text, html string
		attach           bool
		want             []string // Content-Transfer-Encoding values, in order
	}{
		{"7bit text and HTML, long lines, leading dots", "hello\n.dot line\n..two dots\n" + benchBody(8<<10), html, false, []string{"7bit", "7bit"}},
		{"quoted-printable", "Grüße, trailing space \nsecond line\n", "", false, []string{"quoted-printable"}},
		{"base64", "Здравствуйте, ваш заказ отправлен.\n", "", false, []string{"base64"}},
		{"attachment", "plain", "", true, []string{"quoted-printable", "base64"}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cte := regexp.MustCompile(`(?m)^Content-Transfer-Encoding: (\S+)\r$`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := &job.Job{
				Version: job.SchemaVersion, MessageID: testenv.UniqueName("encodings") + "@test.postline",
				From: "sender@example.com", To: []string{"ada@example.test"}, Subject: tt.name, Text: tt.text, HTML: tt.html,
			}
			if tt.attach {
				j.Attachments = []job.Attachment{{Filename: "a.bin", Content: []byte{0, 1, 2, 0xff}}}
			}
			if _, err := s.SendTo(ctx, j, Recipients(j, "")); err != nil {
				t.Fatalf("SendTo: %v", err)
			}
			data := receivedThrough(ctx, t, p, dest.Messages, j.MessageID)
			var got []string
			for _, m := range cte.FindAllSubmatch(data, -1) {
				got = append(got, string(m[1]))
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("Content-Transfer-Encoding %q, want %q", got, tt.want)
			}
			vs, err := msgauth.VerifyWithOptions(bytes.NewReader(data), &msgauth.VerifyOptions{
				LookupTXT: func(name string) ([]string, error) {
					if name == key.RecordName() {
						return []string{key.TXTRecord()}, nil
					}
					return nil, errors.New("no TXT record for " + name)
				},
			})
			if err != nil || len(vs) != 1 || vs[0].Err != nil {
				t.Fatalf("DKIM verification after Postfix: %v, %+v", err, vs)
			}
			_, leaves := mimeLeaves(t, data)
			if want := canonicalLines(tt.text, enc7bit); string(leaves[0].body) != want {
				t.Errorf("the text part decodes to %q, want %q", leaves[0].body, want)
			}
			if tt.html != "" && string(leaves[1].body) != canonicalLines(tt.html, enc7bit) {
				t.Errorf("the HTML part does not decode to the job's HTML")
			}
		})
	}
}

// receivedThrough waits for the message with messageID at the destination
// Postfix relays to.
func receivedThrough(ctx context.Context, t *testing.T, p testenv.PostfixEnv, messages func() []smtptest.Received, messageID string) []byte {
	t.Helper()
	for {
		for _, m := range messages() {
			if m.MessageID == messageID {
				return m.Data
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("%s did not reach the destination\nPostfix log:\n%s", messageID, p.LogSince())
		}
		time.Sleep(50 * time.Millisecond) // Postfix relays on its own schedule; nothing to wait on
	}
}

// ed25519Keyring is a keyring with a fresh Ed25519 key for domain.
func ed25519Keyring(t *testing.T, domain string) (*dkim.Keyring, *dkim.Key) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), domain+".pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := dkim.ParseKeys(domain + "=enc:" + path)
	if err != nil {
		t.Fatal(err)
	}
	kr, err := dkim.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	k, ok := kr.For(domain)
	if !ok {
		t.Fatalf("no key for %s", domain)
	}
	return kr, k
}
