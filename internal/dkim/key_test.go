package dkim_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	msgauth "github.com/emersion/go-msgauth/dkim"

	"github.com/postline/postline/internal/dkim"
)

// lookup serves the TXT records of keys, as DNS would once published.
func lookup(keys ...*dkim.Key) func(string) ([]string, error) {
	return func(name string) ([]string, error) {
		for _, k := range keys {
			if strings.EqualFold(name, k.RecordName()) {
				return []string{k.TXTRecord()}, nil
			}
		}
		return nil, errors.New("no such record: " + name)
	}
}

// verify checks the signatures of msg with the independent verifier and
// returns the error of each.
func verify(t *testing.T, msg []byte, keys ...*dkim.Key) []error {
	t.Helper()
	vs, err := msgauth.VerifyWithOptions(bytes.NewReader(msg), &msgauth.VerifyOptions{LookupTXT: lookup(keys...)})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	errs := make([]error, len(vs))
	for i, v := range vs {
		errs[i] = v.Err
	}
	return errs
}

func loadOne(t *testing.T, domain, selector, file string) *dkim.Key {
	t.Helper()
	kr, err := dkim.Load(dkim.Config{Keys: []dkim.KeyConfig{{Domain: domain, Selector: selector, KeyFile: file}}})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	k, ok := kr.For(domain)
	if !ok {
		t.Fatalf("For(%q): no key", domain)
	}
	return k
}

func TestLoadAccepts(t *testing.T) {
	rsa2048 := rsaKey(t, 2048)
	ed := ed25519Key(t)
	tests := []struct {
		name, file, algorithm string
		pub                   any
	}{
		{"RSA 2048 PKCS#1", writePEM(t, "a.pem", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsa2048)), dkim.AlgorithmRSA, &rsa2048.PublicKey},
		{"RSA 2048 PKCS#8", writePEM(t, "b.pem", "PRIVATE KEY", pkcs8(t, rsa2048)), dkim.AlgorithmRSA, &rsa2048.PublicKey},
		{"Ed25519 PKCS#8", writePEM(t, "c.pem", "PRIVATE KEY", pkcs8(t, ed)), dkim.AlgorithmEd25519, ed.Public()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := loadOne(t, "Example.COM", "s1", tt.file)
			if k.Domain() != "example.com" || k.Selector() != "s1" || k.Algorithm() != tt.algorithm {
				t.Errorf("key = %s/%s/%s, want example.com/s1/%s", k.Domain(), k.Selector(), k.Algorithm(), tt.algorithm)
			}
			if pub, ok := k.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(tt.pub) {
				t.Errorf("Public() is not the file's public key")
			}
			if got := k.RecordName(); got != "s1._domainkey.example.com" {
				t.Errorf("RecordName = %q", got)
			}
		})
	}
}

func TestLoadRefuses(t *testing.T) {
	rsa1024 := rsaKey(t, 1024)
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalECPrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	ed := ed25519Key(t)
	truncated := pkcs8(t, ed)[:20]
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("this is not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.pem")
	if err := os.WriteFile(big, bytes.Repeat([]byte("A"), 100<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	encrypted := filepath.Join(dir, "enc.pem")
	if err := os.WriteFile(encrypted, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY",
		Headers: map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-128-CBC,00112233445566778899AABBCCDDEEFF"},
		Bytes:   x509.MarshalPKCS1PrivateKey(rsa1024)}), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, file string
		keyDER     []byte // key material the error must not show
		want       string
	}{
		{"RSA 1024", writePEM(t, "small.pem", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsa1024)), x509.MarshalPKCS1PrivateKey(rsa1024), "1024 bits, at least 2048"},
		{"RSA 1024 PKCS#8", writePEM(t, "small8.pem", "PRIVATE KEY", pkcs8(t, rsa1024)), pkcs8(t, rsa1024), "1024 bits"},
		{"ECDSA SEC 1", writePEM(t, "ec.pem", "EC PRIVATE KEY", ecDER), ecDER, "ECDSA keys are not supported"},
		{"ECDSA PKCS#8", writePEM(t, "ec8.pem", "PRIVATE KEY", pkcs8(t, ec)), pkcs8(t, ec), "ECDSA keys are not supported"},
		{"certificate", writePEM(t, "cert.pem", "CERTIFICATE", []byte("not really")), nil, `"CERTIFICATE" is not a private key`},
		{"truncated DER", writePEM(t, "trunc.pem", "PRIVATE KEY", truncated), truncated, "parse PRIVATE KEY"},
		{"garbage", garbage, []byte("this is not a key"), "no PEM block"},
		{"too big", big, nil, "larger than"},
		{"encrypted", encrypted, x509.MarshalPKCS1PrivateKey(rsa1024), "encrypted"},
		{"missing file", filepath.Join(dir, "missing.pem"), nil, "no such file"},
		{"directory", dir, nil, "read key file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kr, err := dkim.Load(dkim.Config{Keys: []dkim.KeyConfig{
				{Domain: "other.org", Selector: "s9", KeyFile: writePEM(t, "ok.pem", "PRIVATE KEY", pkcs8(t, ed))},
				{Domain: "example.com", Selector: "s1", KeyFile: tt.file},
			}})
			if err == nil {
				t.Fatalf("Load = %v, want an error", kr)
			}
			msg := err.Error()
			for _, s := range []string{tt.want, "example.com", "s1", tt.file} {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not contain %q", msg, s)
				}
			}
			if strings.Contains(msg, "other.org") {
				t.Errorf("error %q names the good key's domain", msg)
			}
			assertNoKeyMaterial(t, msg, tt.file, tt.keyDER)
		})
	}
}

// assertNoKeyMaterial fails when msg shows any 12-character run of the
// file's text or of der in base64, or any 8-byte run of der.
func assertNoKeyMaterial(t *testing.T, msg, file string, der []byte) {
	t.Helper()
	data, _ := os.ReadFile(file) // a missing file or a directory has no text to leak
	texts := []string{base64.StdEncoding.EncodeToString(der)}
	if len(data) < 64<<10 {
		texts = append(texts, string(data))
	}
	for _, text := range texts {
		for line := range strings.SplitSeq(text, "\n") {
			if strings.HasPrefix(line, "-----") || strings.Contains(line, ":") {
				continue // PEM armour and headers are not key material
			}
			for i := 0; i+12 <= len(line); i++ {
				if strings.Contains(msg, line[i:i+12]) {
					t.Fatalf("error %q shows key text %q", msg, line[i:i+12])
				}
			}
		}
	}
	for i := 0; i+8 <= len(der); i++ {
		if strings.Contains(msg, string(der[i:i+8])) {
			t.Fatalf("error %q shows key bytes", msg)
		}
	}
}

func TestTXTRecord(t *testing.T) {
	rsa2048 := rsaKey(t, 2048)
	ed := ed25519Key(t)
	t.Run("RSA", func(t *testing.T) {
		k := loadOne(t, "example.com", "s1", writePEM(t, "r.pem", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsa2048)))
		rec := k.TXTRecord()
		p, ok := strings.CutPrefix(rec, "v=DKIM1; k=rsa; p=")
		if !ok {
			t.Fatalf("TXTRecord = %q", rec)
		}
		der, err := base64.StdEncoding.DecodeString(p)
		if err != nil {
			t.Fatalf("p= is not base64: %v", err)
		}
		pub, err := x509.ParsePKIXPublicKey(der)
		if err != nil {
			t.Fatalf("p= is not a SubjectPublicKeyInfo: %v", err)
		}
		if !rsa2048.PublicKey.Equal(pub) {
			t.Fatal("p= is not the key's public key")
		}
		zone := k.ZoneRecord()
		if !strings.HasPrefix(zone, "s1._domainkey.example.com. IN TXT ( \"") || !strings.HasSuffix(zone, "\" )") {
			t.Fatalf("ZoneRecord = %q", zone)
		}
		inner := strings.TrimSuffix(strings.TrimPrefix(zone, "s1._domainkey.example.com. IN TXT ( \""), "\" )")
		parts := strings.Split(inner, "\" \"")
		if len(parts) < 2 {
			t.Fatalf("a %d-byte record is not split: %q", len(rec), zone)
		}
		for _, s := range parts {
			if len(s) > 255 {
				t.Errorf("character string of %d bytes", len(s))
			}
		}
		if strings.Join(parts, "") != rec {
			t.Error("ZoneRecord strings do not join to TXTRecord")
		}
	})
	t.Run("Ed25519", func(t *testing.T) {
		k := loadOne(t, "example.com", "ed", writePEM(t, "e.pem", "PRIVATE KEY", pkcs8(t, ed)))
		rec := k.TXTRecord()
		p, ok := strings.CutPrefix(rec, "v=DKIM1; k=ed25519; p=")
		if !ok {
			t.Fatalf("TXTRecord = %q", rec)
		}
		raw, err := base64.StdEncoding.DecodeString(p)
		if err != nil || !bytes.Equal(raw, ed.Public().(ed25519.PublicKey)) {
			t.Fatalf("p= %q is not the raw public key (%v)", p, err)
		}
		if zone := k.ZoneRecord(); zone != "ed._domainkey.example.com. IN TXT ( \""+rec+"\" )" {
			t.Errorf("ZoneRecord = %q", zone)
		}
	})
	t.Run("unsupported", func(t *testing.T) {
		ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		if rec, err := dkim.TXTRecord(ec.Public()); err == nil {
			t.Fatalf("TXTRecord(ECDSA) = %q, want an error", rec)
		}
	})
}

const message = "From: Sender <sender@example.com>\r\n" +
	"To: Ada <to@example.net>\r\n" +
	"Subject: hello\r\n" +
	"Date: Tue, 01 Dec 2026 15:00:00 +0000\r\n" +
	"Message-ID: <1@example.com>\r\n" +
	"MIME-Version: 1.0\r\n" +
	"Content-Type: text/plain; charset=UTF-8\r\n" +
	"List-Unsubscribe: <mailto:unsubscribe@example.com>\r\n" +
	"X-Campaign: spring\r\n" +
	"\r\n" +
	"Hello,\r\n\r\nthis is the body.\r\n"

func TestSign(t *testing.T) {
	now := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	kr, err := dkim.Load(dkim.Config{
		Keys: []dkim.KeyConfig{
			{Domain: "example.com", Selector: "rsa1", KeyFile: writePEM(t, "r.pem", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey(t, 2048)))},
			{Domain: "example.org", Selector: "ed1", KeyFile: writePEM(t, "e.pem", "PRIVATE KEY", pkcs8(t, ed25519Key(t)))},
		},
		NowFunc: func() time.Time { return now },
	})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := len(kr.Keys()); got != 2 {
		t.Fatalf("Keys() has %d keys, want 2", got)
	}
	for _, tt := range []struct{ domain, algorithm string }{
		{"example.com", dkim.AlgorithmRSA},
		{"example.org", dkim.AlgorithmEd25519},
	} {
		t.Run(tt.algorithm, func(t *testing.T) {
			k, _ := kr.For(tt.domain)
			signed, ok, err := kr.Sign(tt.domain, []byte(message))
			if err != nil || !ok {
				t.Fatalf("Sign = %v, %v", ok, err)
			}
			if !bytes.HasSuffix(signed, []byte(message)) || !bytes.HasPrefix(signed, []byte("DKIM-Signature: ")) {
				t.Fatalf("signed message is not a DKIM-Signature field before the message:\n%s", signed)
			}
			field := string(signed[:len(signed)-len(message)])
			unfolded := strings.NewReplacer("\r\n", "", " ", "", "\t", "").Replace(field)
			for _, tag := range []string{
				"c=relaxed/relaxed", "d=" + tt.domain, "s=" + k.Selector(), "a=" + tt.algorithm,
				"t=" + "1796137200",
				"h=From:Subject:Date:To:Message-ID:MIME-Version:Content-Type:List-Unsubscribe:From;",
			} {
				if !strings.Contains(unfolded, tag) {
					t.Errorf("signature %q lacks %q", unfolded, tag)
				}
			}
			if errs := verify(t, signed, k); len(errs) != 1 || errs[0] != nil {
				t.Fatalf("verification of the signed message: %v\n%s", errs, field)
			}
			tampered := bytes.Replace(signed, []byte("this is the body"), []byte("this is the bodY"), 1)
			if errs := verify(t, tampered, k); len(errs) != 1 || errs[0] == nil {
				t.Fatalf("a tampered body verified: %v", errs)
			}
			// From is over-signed: a second From added on top breaks it.
			extraFrom := append([]byte("From: evil@attacker.example\r\n"), signed...)
			if errs := verify(t, extraFrom, k); len(errs) != 1 || errs[0] == nil {
				t.Fatalf("a message with an added From verified: %v", errs)
			}
			// Relaxed canonicalization survives whitespace changes in transit.
			relaxed := bytes.Replace(signed, []byte("Subject: hello"), []byte("subject:   hello "), 1)
			if errs := verify(t, relaxed, k); len(errs) != 1 || errs[0] != nil {
				t.Fatalf("relaxed header changes broke verification: %v", errs)
			}
		})
	}
	t.Run("no key", func(t *testing.T) {
		out, ok, err := kr.Sign("sub.example.com", []byte(message))
		if ok || err != nil || !bytes.Equal(out, []byte(message)) {
			t.Fatalf("Sign for a domain without a key = %q, %v, %v; want the message unchanged", out, ok, err)
		}
		var nilRing *dkim.Keyring
		if _, ok := nilRing.For("example.com"); ok {
			t.Fatal("a nil keyring has a key")
		}
	})
	t.Run("exact domain match", func(t *testing.T) {
		for _, d := range []string{"EXAMPLE.com", "example.com."} {
			if _, ok := kr.For(d); !ok {
				t.Errorf("For(%q): no key", d)
			}
		}
		for _, d := range []string{"mail.example.com", "com", "example.co", ""} {
			if _, ok := kr.For(d); ok {
				t.Errorf("For(%q) found a key", d)
			}
		}
	})
	t.Run("malformed", func(t *testing.T) {
		k, _ := kr.For("example.com")
		for _, m := range []string{"From: a@example.com\r\nno end of header", "To: b@example.com\r\n\r\nbody"} {
			if out, err := k.Sign([]byte(m)); err == nil {
				t.Errorf("Sign(%q) = %q, want an error", m, out)
			}
		}
	})
}
