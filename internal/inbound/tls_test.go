package inbound_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/smtp"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/bounce"
	"github.com/postline/postline/internal/inbound"
	"github.com/postline/postline/internal/report"
)

// selfSigned returns a certificate for 127.0.0.1 and a pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "inbound test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// TestStartTLSSoftBounce sends a delayed DSN written by bounce.BuildDSN
// over STARTTLS.
func TestStartTLSSoftBounce(t *testing.T) {
	cert, pool := selfSigned(t)
	h := start(t, inbound.Config{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	raw, err := bounce.BuildDSN(bounce.DSN{Date: time.Unix(1741183207, 0), ReturnPath: "bounce+tok-soft@" + domain,
		MessageID: "soft.1@app.example", Recipients: []report.Report{{Kind: report.Delayed, Recipient: "full@example.org",
			Status: "4.2.2", Code: 452, Diagnostic: "mailbox full", RemoteMTA: "mx.example.org"}}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := smtp.Dial(h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ok, _ := c.Extension("STARTTLS"); !ok {
		t.Fatal("STARTTLS not offered")
	}
	if err := c.StartTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Mail(""); err != nil {
		t.Fatal(err)
	}
	if err := c.Rcpt("bounce+tok-soft@" + domain); err != nil {
		t.Fatal(err)
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Quit(); err != nil {
		t.Fatal(err)
	}
	got := h.rec.all()
	if len(got) != 1 || len(got[0]) != 1 {
		t.Fatalf("applied %v, want one report", got)
	}
	if r := got[0][0]; r.Token != "tok-soft" || r.Kind != report.Delayed || r.Status != "4.2.2" || r.Code != 452 ||
		r.Diagnostic != "452 mailbox full" || r.MessageID != "soft.1@app.example" {
		t.Errorf("report %+v", r)
	}
}

func TestRunErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, err := inbound.New(inbound.Config{Addr: ln.Addr().String(), Domain: domain}, nil, nil, tokenOf, &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("Run on a busy address = %v, want a listen error", err)
	}
	if err := s.Run(context.Background()); err == nil {
		t.Error("a second Run succeeded")
	}
	if _, err := inbound.New(inbound.Config{Domain: domain}, nil, nil, nil, &recorder{}); err == nil {
		t.Error("New without a TokenFunc succeeded")
	}
}
