package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	msgdkim "github.com/emersion/go-msgauth/dkim"

	"github.com/postline/postline/internal/dkim"
	"github.com/postline/postline/internal/smtptest"
	"github.com/postline/postline/internal/testkit"
)

// TestDeliveredMailVerifiesDKIM runs a worker with an RSA key for one
// From domain and an Ed25519 key for another, delivers a mail from each,
// and verifies the delivered bytes with an independent verifier
// (emersion/go-msgauth) against the TXT records the keys publish. A mail
// from a domain without a key goes out unsigned.
func TestDeliveredMailVerifiesDKIM(t *testing.T) {
	s := newStack(t)
	relay := smtptest.NewServer(t)
	dir := t.TempDir()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	writeKey := func(name string, key any) string {
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	setting := fmt.Sprintf("rsa.e2e.test=s1:%s,ed.e2e.test=s2:%s", writeKey("rsa.pem", rsaKey), writeKey("ed.pem", edKey))
	cfg, err := dkim.ParseKeys(setting)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := dkim.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	records := map[string]string{}
	for _, k := range keys.Keys() {
		records[k.RecordName()] = k.TXTRecord()
	}

	w := startWorker(t, s.outcomeWorkerEnv("w1", relay.Addr(), "", "", map[string]string{
		"POSTLINE_BOUNCE_DOMAIN": "", "POSTLINE_RETURN_PATH_KEYS": "", "POSTLINE_DKIM_KEYS": setting,
	}))
	w.WaitReady(readyTimeout)
	jobs := newJobs(3, "dkim")
	jobs[0].From = "Sender <news@rsa.e2e.test>"
	jobs[1].From = "news@ed.e2e.test"
	jobs[2].From = "news@unsigned.e2e.test"
	ids := s.publish(jobs...)
	testkit.Eventually(t, 30*time.Second, "three mails at the relay", func(context.Context) (bool, string) {
		return relay.Count() == 3, fmt.Sprintf("%d received", relay.Count())
	})
	lookup := func(name string) ([]string, error) {
		if r, ok := records[name]; ok {
			return []string{r}, nil
		}
		return nil, fmt.Errorf("no TXT record for %s", name)
	}
	byID := map[string][]byte{}
	for _, m := range relay.Messages() {
		byID[m.MessageID] = m.Data
	}
	for i, want := range []string{"rsa.e2e.test", "ed.e2e.test"} {
		vs, err := msgdkim.VerifyWithOptions(bytes.NewReader(byID[ids[i]]), &msgdkim.VerifyOptions{LookupTXT: lookup})
		if err != nil || len(vs) != 1 || vs[0].Err != nil || vs[0].Domain != want {
			t.Fatalf("mail from %s: verifications %+v, %v; want one valid signature of %s", want, vs, err, want)
		}
		tampered := bytes.Replace(byID[ids[i]], []byte("Hello from the dkim test"), []byte("Hello from a forger"), 1)
		if vs, _ := msgdkim.VerifyWithOptions(bytes.NewReader(tampered), &msgdkim.VerifyOptions{LookupTXT: lookup}); len(vs) != 1 || vs[0].Err == nil {
			t.Errorf("a changed body of the mail from %s still verifies", want)
		}
	}
	if strings.Contains(string(byID[ids[2]]), "DKIM-Signature:") {
		t.Error("the mail from a domain without a key was signed")
	}
	if n := w.mustMetric("postline_sender_dkim_total", "result", "signed"); n != 2 {
		t.Errorf("signed = %v, want 2", n)
	}
	if n := w.mustMetric("postline_sender_dkim_total", "result", "no_key"); n != 1 {
		t.Errorf("no_key = %v, want 1", n)
	}
}
