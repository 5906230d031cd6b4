package sender_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	msgauth "github.com/emersion/go-msgauth/dkim"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/postline/postline/internal/dkim"
	"github.com/postline/postline/internal/failure"
	"github.com/postline/postline/internal/sender"
	"github.com/postline/postline/internal/smtptest"
)

// dkimCounts returns postline_sender_dkim_total by result.
func dkimCounts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "postline_sender_dkim_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// testKeyring writes key to a PEM file and loads it as the key of domain.
func testKeyring(t *testing.T, domain, selector string, key any) (*dkim.Keyring, *dkim.Key) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), domain+".pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := dkim.ParseKeys(domain + "=" + selector + ":" + path)
	if err != nil {
		t.Fatalf("ParseKeys: %v", err)
	}
	kr, err := dkim.Load(cfg)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	k, ok := kr.For(domain)
	if !ok {
		t.Fatalf("no key for %s", domain)
	}
	return kr, k
}

// dkimVerify checks msg with go-msgauth, resolving the selector to the
// TXT record published for k, and returns each signature's error.
func dkimVerify(t *testing.T, msg []byte, k *dkim.Key) []error {
	t.Helper()
	vs, err := msgauth.VerifyWithOptions(bytes.NewReader(msg), &msgauth.VerifyOptions{
		LookupTXT: func(name string) ([]string, error) {
			if name == k.RecordName() {
				return []string{k.TXTRecord()}, nil
			}
			return nil, errors.New("no TXT record for " + name)
		},
	})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	errs := make([]error, len(vs))
	for i, v := range vs {
		errs[i] = v.Err
	}
	return errs
}

// TestSendToDKIM sends a job over TCP to two return paths (two
// transactions) with signing on, and verifies what the server received
// with the independent verifier.
func TestSendToDKIM(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		key  any
	}{{"rsa", rsaKey}, {"ed25519", edKey}} {
		t.Run(tt.name, func(t *testing.T) {
			kr, key := testKeyring(t, "example.com", "s-"+tt.name, tt.key)
			srv := smtptest.NewServer(t)
			relay, reg := newRelay(t, srv, sender.Config{DKIM: kr})
			sess := newSession(t, relay)

			j := testJob(t, 1) // From sender@example.com, Cc, Reply-To, List-Unsubscribe, attachments
			rcpts := []sender.Recipient{
				{Address: "to@example.com", ReturnPath: "bounce+a@example.com"},
				{Address: "cc@example.com", ReturnPath: "bounce+b@example.com"},
			}
			res, err := sess.SendTo(context.Background(), j, rcpts)
			if err != nil || len(res.Accepted) != 2 {
				t.Fatalf("SendTo = %+v, %v", res, err)
			}
			if res.DKIMDomain != "example.com" {
				t.Errorf("Result.DKIMDomain = %q, want example.com (the accepted event names it)", res.DKIMDomain)
			}
			msgs := srv.Messages()
			if len(msgs) != 2 {
				t.Fatalf("server got %d messages, want 2 (one per return path)", len(msgs))
			}
			if !bytes.Equal(msgs[0].Data, msgs[1].Data) {
				t.Fatal("the two transactions carried different bytes")
			}
			data := msgs[0].Data
			if n := bytes.Count(data, []byte("DKIM-Signature:")); n != 1 {
				t.Fatalf("message has %d DKIM-Signature fields, want 1", n)
			}
			sig := string(data[:bytes.Index(data, []byte("\r\n\r\n"))])
			unfolded := strings.NewReplacer("\r\n", "", " ", "").Replace(sig)
			for _, tag := range []string{"d=example.com;", "s=s-" + tt.name + ";", "c=relaxed/relaxed;", "a=" + key.Algorithm() + ";"} {
				if !strings.Contains(unfolded, tag) {
					t.Errorf("signature lacks %q: %s", tag, sig)
				}
			}
			for _, h := range []string{"From", "To", "Cc", "Subject", "Date", "Message-ID", "Reply-To", "MIME-Version", "Content-Type", "List-Unsubscribe"} {
				if !strings.Contains(unfolded, ":"+h+":") && !strings.Contains(unfolded, "h="+h+":") {
					t.Errorf("h= does not list %s: %s", h, sig)
				}
			}
			if strings.Count(strings.ToLower(unfolded[strings.Index(unfolded, "h="):]), "from") < 2 {
				t.Errorf("From is not over-signed: %s", sig)
			}
			if errs := dkimVerify(t, data, key); len(errs) != 1 || errs[0] != nil {
				t.Fatalf("verification of the received message: %v", errs)
			}

			tampered := bytes.Replace(data, []byte("text body 1"), []byte("text body 2"), 1)
			if bytes.Equal(tampered, data) {
				t.Fatalf("the text body is not in the message:\n%s", data)
			}
			if errs := dkimVerify(t, tampered, key); len(errs) != 1 || errs[0] == nil {
				t.Fatal("a tampered body verified")
			}
			tamperedSubject := bytes.Replace(data, []byte("Subject: "), []byte("Subject: Re: "), 1)
			if errs := dkimVerify(t, tamperedSubject, key); len(errs) != 1 || errs[0] == nil {
				t.Fatal("a tampered subject verified")
			}

			if got := dkimCounts(t, reg); got["signed"] != 1 || got["no_key"] != 0 || got["error"] != 0 {
				t.Fatalf("postline_sender_dkim_total = %v, want signed 1 (one render for both transactions)", got)
			}
		})
	}
}

// TestSendToDKIMNoKey sends mail from a domain without a key: unsigned,
// and counted.
func TestSendToDKIMNoKey(t *testing.T) {
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kr, _ := testKeyring(t, "other.org", "s1", edKey)
	srv := smtptest.NewServer(t)
	relay, reg := newRelay(t, srv, sender.Config{DKIM: kr})
	sess := newSession(t, relay)
	j := simpleJob(t, 1)
	j.From = "Sender <sender@mail.other.org>" // a subdomain: no parent-domain fallback
	res, err := sess.SendTo(context.Background(), j, sender.Recipients(j, ""))
	if err != nil || len(res.Accepted) == 0 {
		t.Fatalf("SendTo = %+v, %v", res, err)
	}
	if res.DKIMDomain != "" {
		t.Errorf("Result.DKIMDomain = %q for an unsigned message, want empty", res.DKIMDomain)
	}
	msgs := srv.Messages()
	if len(msgs) != 1 {
		t.Fatalf("server got %d messages, want 1", len(msgs))
	}
	if bytes.Contains(msgs[0].Data, []byte("DKIM-Signature")) {
		t.Fatal("a message from a domain without a key was signed")
	}
	if got := dkimCounts(t, reg); got["no_key"] != 1 || got["signed"] != 0 {
		t.Fatalf("postline_sender_dkim_total = %v, want no_key 1", got)
	}
}

// failingSigner has a key for every domain and fails to sign with it.
type failingSigner struct{}

func (failingSigner) Sign(string, []byte) ([]byte, bool, error) {
	return nil, true, errors.New("signing device unavailable")
}

// TestSendToDKIMSignError: a key that fails to sign fails the send
// before anything is sent, as a retryable error, never as an unsigned
// message.
func TestSendToDKIMSignError(t *testing.T) {
	srv := smtptest.NewServer(t)
	relay, reg := newRelay(t, srv, sender.Config{DKIM: failingSigner{}})
	sess := newSession(t, relay)
	err := sess.Send(context.Background(), simpleJob(t, 1))
	var se *sender.Error
	if !errors.As(err, &se) || se.Stage != sender.StageSign {
		t.Fatalf("Send = %v, want a *sender.Error with stage %q", err, sender.StageSign)
	}
	if v := failure.Classify(err); v.Class != failure.Unknown {
		t.Errorf("Classify = %+v, want Unknown (retried later, not dropped)", v)
	}
	if n := srv.Count(); n != 0 {
		t.Fatalf("server got %d messages, want none", n)
	}
	if n := srv.Connections(); n != 0 {
		t.Errorf("the session dialled %d times for a message it could not sign", n)
	}
	if got := dkimCounts(t, reg); got["error"] != 1 || got["signed"] != 0 || got["no_key"] != 0 {
		t.Fatalf("postline_sender_dkim_total = %v, want error 1", got)
	}
}

// TestSendWithoutDKIM: no signer, no signature and no DKIM counts.
func TestSendWithoutDKIM(t *testing.T) {
	srv := smtptest.NewServer(t)
	relay, reg := newRelay(t, srv, sender.Config{})
	sess := newSession(t, relay)
	if err := sess.Send(context.Background(), simpleJob(t, 1)); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if msgs := srv.Messages(); len(msgs) != 1 || bytes.Contains(msgs[0].Data, []byte("DKIM-Signature")) {
		t.Fatalf("messages = %d, or signed without a signer", len(msgs))
	}
	if got := dkimCounts(t, reg); got["signed"]+got["no_key"]+got["error"] != 0 {
		t.Fatalf("postline_sender_dkim_total = %v, want all zero", got)
	}
	if n := testutil.CollectAndCount(reg, "postline_sender_dkim_total"); n != 3 {
		t.Errorf("postline_sender_dkim_total has %d series, want 3 (created at zero)", n)
	}
}

// TestSendToListUnsubscribe sends a job with List-Unsubscribe URIs of each
// recipient's own: each copy carries its recipient's URIs (and none of the
// job's own header), List-Unsubscribe-Post, and a signature over both that
// the independent verifier accepts. The message is built once; each copy
// is signed.
func TestSendToListUnsubscribe(t *testing.T) {
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kr, key := testKeyring(t, "example.com", "s1", edKey)
	srv := smtptest.NewServer(t)
	relay, reg := newRelay(t, srv, sender.Config{DKIM: kr})
	sess := newSession(t, relay)
	j := testJob(t, 1) // carries List-Unsubscribe: <mailto:unsubscribe@example.com>
	uris := func(who string) []string {
		return []string{"https://b.example.com/unsubscribe/" + who, "mailto:unsubscribe+" + who + "@b.example.com"}
	}
	rcpts := []sender.Recipient{
		{Address: "to@example.com", ReturnPath: "bounce+a@b.example.com", ListUnsubscribe: uris("ta")},
		{Address: "cc@example.com", ReturnPath: "bounce+b@b.example.com", ListUnsubscribe: uris("tb")},
		{Address: "bcc@example.com", ReturnPath: "bounce+c@b.example.com", ListUnsubscribe: []string{"https://b.example.com/unsubscribe/tc"}},
	}
	res, err := sess.SendTo(context.Background(), j, rcpts)
	if err != nil || len(res.Accepted) != 3 || res.DKIMDomain != "example.com" {
		t.Fatalf("SendTo = %+v, %v; want 3 accepted, signed by example.com", res, err)
	}
	msgs := srv.Messages()
	if len(msgs) != 3 {
		t.Fatalf("server got %d messages, want 3 (a copy per recipient)", len(msgs))
	}
	for i, m := range msgs {
		want := rcpts[i]
		if len(m.To) != 1 || m.To[0] != want.Address || m.From != want.ReturnPath {
			t.Fatalf("message %d went from %s to %v, want %s to %s", i, m.From, m.To, want.ReturnPath, want.Address)
		}
		header := string(m.Data[:bytes.Index(m.Data, []byte("\r\n\r\n"))])
		unfolded := strings.ReplaceAll(header, "\r\n ", " ")
		wantLine := "List-Unsubscribe: <" + strings.Join(want.ListUnsubscribe, ">, <") + ">"
		if !strings.Contains(unfolded, wantLine+"\r\n") {
			t.Errorf("copy %d lacks %q:\n%s", i, wantLine, header)
		}
		if strings.Count(strings.ToLower(header), "\nlist-unsubscribe:") != 1 || strings.Contains(header, "mailto:unsubscribe@example.com") {
			t.Errorf("copy %d keeps the job's own List-Unsubscribe:\n%s", i, header)
		}
		if !strings.Contains(header, "\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n") {
			t.Errorf("copy %d lacks List-Unsubscribe-Post:\n%s", i, header)
		}
		for _, line := range strings.Split(header, "\r\n") {
			if len(line) > 998 {
				t.Errorf("copy %d has a header line of %d bytes", i, len(line))
			}
		}
		sig := strings.NewReplacer("\r\n", "", " ", "").Replace(header[:strings.Index(header, "\r\n"+"From:")])
		hTag := strings.ToLower(sig[strings.Index(sig, "h="):])
		hTag = hTag[:strings.IndexByte(hTag, ';')]
		for _, h := range []string{"list-unsubscribe", "list-unsubscribe-post"} {
			if !strings.Contains(":"+hTag[2:]+":", ":"+h+":") {
				t.Errorf("copy %d: h= (%s) does not cover %s", i, hTag, h)
			}
		}
		if errs := dkimVerify(t, m.Data, key); len(errs) != 1 || errs[0] != nil {
			t.Fatalf("copy %d does not verify: %v", i, errs)
		}
		// Another recipient's link in this copy breaks the signature.
		swapped := bytes.Replace(m.Data, []byte("/unsubscribe/t"+string(rune('a'+i))), []byte("/unsubscribe/tz"), 1)
		if errs := dkimVerify(t, swapped, key); len(errs) != 1 || errs[0] == nil {
			t.Fatalf("copy %d verifies with its link changed", i)
		}
	}
	if !bytes.Equal(afterUnsubscribe(msgs[0].Data), afterUnsubscribe(msgs[1].Data)) {
		t.Error("the copies differ below their List-Unsubscribe headers: the message was built more than once")
	}
	if got := dkimCounts(t, reg); got["signed"] != 3 {
		t.Fatalf("postline_sender_dkim_total = %v, want signed 3 (one per copy)", got)
	}
}

// afterUnsubscribe returns msg from its List-Unsubscribe-Post field on:
// the part every copy shares.
func afterUnsubscribe(msg []byte) []byte {
	return msg[bytes.Index(msg, []byte("\r\nList-Unsubscribe-Post: ")):]
}

// TestSendToRefusesBadListUnsubscribe: a URI that would break the header
// fails the send before anything is sent, as a build error.
func TestSendToRefusesBadListUnsubscribe(t *testing.T) {
	srv := smtptest.NewServer(t)
	relay, _ := newRelay(t, srv, sender.Config{})
	sess := newSession(t, relay)
	for _, uri := range []string{"", "https://x.example/a>b", "https://x.example/a\r\nBcc: x@y", "https://x.example/a,b", strings.Repeat("a", sender.MaxListUnsubscribeURI+1)} {
		_, err := sess.SendTo(context.Background(), simpleJob(t, 1), []sender.Recipient{{Address: "to@example.com", ListUnsubscribe: []string{uri}}})
		var se *sender.Error
		if !errors.As(err, &se) || se.Stage != sender.StageBuild {
			t.Errorf("URI %.40q: SendTo = %v, want a build error", uri, err)
		}
	}
	if n := srv.Count(); n != 0 {
		t.Fatalf("server got %d messages, want none", n)
	}
}
