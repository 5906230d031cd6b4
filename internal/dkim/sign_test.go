package dkim_test

import (
	"bytes"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/postline/postline/internal/dkim"
)

// TestSignVerifies signs messages whose shapes stress canonicalization and
// folding, and checks each with the independent verifier.
func TestSignVerifies(t *testing.T) {
	kr, err := dkim.Load(dkim.Config{Keys: []dkim.KeyConfig{
		{Domain: "example.com", Selector: "rsa1", KeyFile: writePEM(t, "r.pem", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey(t, 2048)))},
		{Domain: "example.org", Selector: "a-rather-long-selector-name.2026-12.mail", KeyFile: writePEM(t, "e.pem", "PRIVATE KEY", pkcs8(t, ed25519Key(t)))},
	}})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	every := "From: a@example.com\r\nReply-To: r@example.com\r\nSubject: s\r\nDate: Tue, 01 Dec 2026 15:00:00 +0000\r\n" +
		"To: t@example.net,\r\n\tu@example.net\r\nCc: c@example.net\r\nMessage-ID: <x@example.com>\r\nMIME-Version: 1.0\r\n" +
		"Content-Type: multipart/alternative;\r\n boundary=\"b\"\r\nContent-Transfer-Encoding: 7bit\r\n" +
		"List-Unsubscribe: <https://example.com/u>\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n\r\n"
	tests := []struct{ name, msg, wantH string }{
		{"every signed field, folded values", every + "--b\r\n\r\nhi\r\n--b--\r\n",
			"h=From:Reply-To:Subject:Date:To:Cc:Message-ID:MIME-Version:Content-Type:Content-Transfer-Encoding:List-Unsubscribe:List-Unsubscribe-Post:From;"},
		{"empty body", "From: a@example.com\r\n\r\n", "h=From:From;"},
		{"body without final CRLF", "From: a@example.com\r\n\r\nno newline", ""},
		{"trailing empty lines and spaces", "From: a@example.com\r\n\r\n  a \t b  \r\n\r\n \r\n\r\n", ""},
		{"inner empty lines", "From: a@example.com\r\n\r\na\r\n\r\n\r\nb\r\n", ""},
		{"repeated field", "From: a@example.com\r\nTo: x@example.net\r\nTo: y@example.net\r\n\r\nbody\r\n", "h=From:To:From;"},
		{"odd spacing in names and values", "FROM :   a@example.com  \r\nsubject:\tlots   of\t\tspace \r\n\r\nbody\r\n", "h=From:Subject:From;"},
	}
	for _, domain := range []string{"example.com", "example.org"} {
		k, _ := kr.For(domain)
		for _, tt := range tests {
			t.Run(k.Algorithm()+"/"+tt.name, func(t *testing.T) {
				signed, err := k.Sign([]byte(tt.msg))
				if err != nil {
					t.Fatalf("Sign: %v", err)
				}
				field := string(signed[:len(signed)-len(tt.msg)])
				for line := range strings.SplitSeq(strings.TrimSuffix(field, "\r\n"), "\r\n") {
					if len(line) > 78 {
						t.Errorf("signature line of %d bytes: %q", len(line), line)
					}
				}
				if tt.wantH != "" {
					if unfolded := strings.NewReplacer("\r\n", "", " ", "").Replace(field); !strings.Contains(unfolded, tt.wantH) {
						t.Errorf("signature %q lacks %q", unfolded, tt.wantH)
					}
				}
				if errs := verify(t, signed, k); len(errs) != 1 || errs[0] != nil {
					t.Fatalf("verification: %v\n%s", errs, signed)
				}
				tampered := append(bytes.Clone(signed), "tampered\r\n"...)
				if errs := verify(t, tampered, k); len(errs) != 1 || errs[0] == nil {
					t.Fatalf("a message with a line added to its body verified")
				}
			})
		}
	}
}

// FuzzSign checks that every message Sign accepts carries a signature the
// independent verifier accepts, and that Sign only prepends.
func FuzzSign(f *testing.F) {
	for _, s := range []string{
		message,
		"From: a@example.com\r\n\r\n",
		"From: a@example.com\r\nSubject: x\r\n y\r\n\r\nbody \t \r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	kr, err := dkim.Load(dkim.Config{
		Keys:    []dkim.KeyConfig{{Domain: "example.org", Selector: "ed1", KeyFile: writePEM(f, "e.pem", "PRIVATE KEY", pkcs8(f, ed25519Key(f)))}},
		NowFunc: func() time.Time { return time.Unix(1796137200, 0) },
	})
	if err != nil {
		f.Fatalf("Load: %v", err)
	}
	k, _ := kr.For("example.org")
	f.Fuzz(func(t *testing.T, msg []byte) {
		if !wellFormed(msg) {
			return
		}
		signed, err := k.Sign(msg)
		if err != nil {
			return
		}
		if !bytes.HasSuffix(signed, msg) {
			t.Fatalf("Sign changed the message")
		}
		if errs := verify(t, signed, k); len(errs) != 1 || errs[0] != nil {
			t.Fatalf("verification of\n%q\nfailed: %v", signed, errs)
		}
	})
}

// wellFormed reports whether msg is what a mail writer sends: CRLF line
// endings only, printable ASCII header lines each a field or a
// continuation, and a header that ends.
func wellFormed(msg []byte) bool {
	header, _, ok := bytes.Cut(msg, []byte("\r\n\r\n"))
	if !ok || bytes.Contains(bytes.ReplaceAll(msg, []byte("\r\n"), nil), []byte("\r")) ||
		bytes.Contains(bytes.ReplaceAll(msg, []byte("\r\n"), nil), []byte("\n")) {
		return false
	}
	for i, line := range bytes.Split(header, []byte("\r\n")) {
		if len(line) == 0 {
			return false
		}
		for _, c := range line {
			if (c < 32 && c != '\t') || c > 126 {
				return false
			}
		}
		if line[0] == ' ' || line[0] == '\t' {
			if i == 0 || len(bytes.TrimSpace(line)) == 0 {
				return false
			}
			continue
		}
		name, _, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(bytes.TrimRight(name, " \t")) == 0 || bytes.ContainsAny(bytes.TrimRight(name, " \t"), " \t") {
			return false
		}
	}
	return true
}

// TestSignConcurrent signs with one key from several goroutines (run
// with -race): a Key is shared by every sending session.
func TestSignConcurrent(t *testing.T) {
	kr, err := dkim.Load(dkim.Config{Keys: []dkim.KeyConfig{
		{Domain: "example.org", Selector: "ed1", KeyFile: writePEM(t, "e.pem", "PRIVATE KEY", pkcs8(t, ed25519Key(t)))},
	}})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	k, _ := kr.For("example.org")
	results := make(chan []byte, 8)
	for range 8 {
		go func() {
			signed, _, err := kr.Sign("example.org", []byte(message))
			if err != nil {
				t.Error(err)
			}
			results <- signed
		}()
	}
	for range 8 {
		if errs := verify(t, <-results, k); len(errs) != 1 || errs[0] != nil {
			t.Fatalf("verification: %v", errs)
		}
	}
}
