package main

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// writeKey stores key as a PKCS #8 PEM file in dir and returns its path.
func writeKey(t *testing.T, dir, name string, key crypto.Signer) string {
	t.Helper()
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

// publicFromTXT decodes the p= tag of a DKIM record value.
func publicFromTXT(t *testing.T, txt string) (kind string, pub []byte) {
	t.Helper()
	tags := map[string]string{}
	for _, tag := range strings.Split(txt, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(tag), "=")
		tags[k] = v
	}
	if tags["v"] != "DKIM1" {
		t.Fatalf("record %q: v=%q, want DKIM1", txt, tags["v"])
	}
	pub, err := base64.StdEncoding.DecodeString(tags["p"])
	if err != nil {
		t.Fatalf("record %q: p= is not base64: %v", txt, err)
	}
	return tags["k"], pub
}

func TestDKIMRecord(t *testing.T) {
	dir := t.TempDir()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	edPub, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaFile := writeKey(t, dir, "example.pem", rsaKey)
	edFile := writeKey(t, dir, "other.pem", edKey)
	keys := "Example.COM=s1:" + rsaFile + ",other.org=ed:" + edFile
	rsaDER, err := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("zone lines from the environment", func(t *testing.T) {
		out, _, err := postctl(t, map[string]string{"POSTLINE_DKIM_KEYS": keys}, "", "dkim", "record")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 2 {
			t.Fatalf("printed %d lines, want one per key:\n%s", len(lines), out)
		}
		zone := regexp.MustCompile(`^(\S+)\. IN TXT \( ((?:"[^"]{1,255}" ?)+)\)$`)
		quoted := regexp.MustCompile(`"([^"]*)"`)
		wantNames := []string{"s1._domainkey.example.com", "ed._domainkey.other.org"}
		for i, line := range lines {
			m := zone.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("line %d is not a zone TXT line with strings of at most 255 bytes: %s", i+1, line)
			}
			if m[1] != wantNames[i] {
				t.Errorf("line %d names %s, want %s", i+1, m[1], wantNames[i])
			}
			var value string
			for _, part := range quoted.FindAllStringSubmatch(m[2], -1) {
				value += part[1]
			}
			kind, pub := publicFromTXT(t, value)
			switch i {
			case 0:
				if kind != "rsa" || string(pub) != string(rsaDER) {
					t.Errorf("the RSA record does not publish the key's public half (k=%s)", kind)
				}
				if strings.Count(m[2], `"`) < 4 {
					t.Errorf("a 2048-bit RSA record fits one string? %s", m[2])
				}
			case 1:
				if kind != "ed25519" || string(pub) != string(edPub) {
					t.Errorf("the Ed25519 record does not publish the key's public half (k=%s)", kind)
				}
			}
		}
		if strings.Contains(out, "PRIVATE") {
			t.Error("the output contains private key material")
		}
	})

	t.Run("json from the flag", func(t *testing.T) {
		out, _, err := postctl(t, map[string]string{"POSTLINE_DKIM_KEYS": "ignored=x:/nonexistent"}, "",
			"-o", "json", "dkim", "record", "--dkim-keys", "other.org=ed:"+edFile)
		if err != nil {
			t.Fatal(err)
		}
		var got []dkimRecord
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		if len(got) != 1 || got[0].Domain != "other.org" || got[0].Selector != "ed" ||
			got[0].Algorithm != "ed25519-sha256" || got[0].Name != "ed._domainkey.other.org" {
			t.Fatalf("got %+v", got)
		}
		if _, pub := publicFromTXT(t, got[0].TXT); string(pub) != string(edPub) {
			t.Error("txt does not publish the key")
		}
	})

	t.Run("refusals", func(t *testing.T) {
		tests := []struct {
			name string
			args []string
			want string
			code int
		}{
			{"no keys", []string{"dkim", "record"}, "no DKIM keys", exitUsage},
			{"malformed", []string{"dkim", "record", "--dkim-keys", "example.com"}, "--dkim-keys", exitUsage},
			{"missing file", []string{"dkim", "record", "--dkim-keys", "example.com=s1:" + filepath.Join(dir, "gone.pem")}, "gone.pem", 1},
		}
		for _, tc := range tests {
			_, _, err := postctl(t, nil, "", tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.want)
				continue
			}
			if got := exitCode(err); got != tc.code {
				t.Errorf("%s: exit code %d, want %d", tc.name, got, tc.code)
			}
		}
	})
}
