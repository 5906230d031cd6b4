package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/postline/postline/internal/schema"
	"github.com/postline/postline/internal/testenv"
)

func TestReadPasswordFromStdin(t *testing.T) {
	tests := []struct {
		name, stdin, want string
		wantErr           string
	}{
		{name: "first line", stdin: "a long password\nsecond line\n", want: "a long password"},
		{name: "CRLF", stdin: "a long password\r\n", want: "a long password"},
		{name: "no newline", stdin: "a long password", want: "a long password"},
		{name: "spaces kept", stdin: "  spaced out pw  \n", want: "  spaced out pw  "},
		{name: "empty", stdin: "", wantErr: "no password on standard input"},
		{name: "empty line", stdin: "\nsecond line\n", wantErr: "no password on standard input"},
		{name: "too short", stdin: "short\n", wantErr: "at least 12"},
		{name: "too long", stdin: strings.Repeat("x", 5000) + "\n", wantErr: "at most 1024"},
	}
	for _, tt := range tests {
		g := &globals{stdin: strings.NewReader(tt.stdin), stderr: &bytes.Buffer{}}
		got, err := readPassword(g, "ada")
		if tt.wantErr != "" {
			var usage usageError
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &usage) {
				t.Errorf("%s: error %v, want a usage error about %q", tt.name, err, tt.wantErr)
			}
			if secret := strings.TrimSpace(tt.stdin); err != nil && secret != "" && strings.Contains(err.Error(), secret) {
				t.Errorf("%s: the error quotes the password: %v", tt.name, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: readPassword = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

func TestOperatorsCommands(t *testing.T) {
	dbURL, pool := testenv.NewSchema(t)
	if err := schema.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"POSTLINE_DATABASE_URL": dbURL}
	const password = "ada's secret passphrase"
	out, errOut, err := postctl(t, env, password+"\n", "operators", "add", "ada", "--role", "operator")
	if err != nil || out != "added ada (operator)\n" {
		t.Fatalf("add = %q, %q, %v", out, errOut, err)
	}
	if _, _, err := postctl(t, env, "vic's secret passphrase\n", "operators", "add", "vic"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := postctl(t, env, password+"\n", "operators", "add", "ada", "--role", "viewer"); err == nil || exitCode(err) != exitFailure {
		t.Fatalf("second add of ada = %v, want a failure", err)
	}
	if _, _, err := postctl(t, env, password+"\n", "operators", "add", "eve", "--role", "admin"); exitCode(err) != exitUsage {
		t.Fatalf("add --role admin = %v, want a usage error", err)
	}
	if _, _, err := postctl(t, env, password+"\n", "operators", "add", "Eve"); exitCode(err) != exitUsage {
		t.Fatalf("add of an upper-case name = %v, want a usage error", err)
	}
	if _, _, err := postctl(t, env, "new secret passphrase\n", "operators", "passwd", "ada"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := postctl(t, env, "", "operators", "disable", "vic"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := postctl(t, env, "", "operators", "disable", "nobody"); err == nil || !strings.Contains(err.Error(), "no such account") {
		t.Fatalf("disable nobody = %v", err)
	}
	out, _, err = postctl(t, env, "", "operators", "ls")
	if err != nil || !strings.Contains(out, "NAME") || !strings.Contains(out, "ada   operator  enabled") || !strings.Contains(out, "vic   viewer    disabled") {
		t.Fatalf("ls = %q, %v", out, err)
	}
	out, _, err = postctl(t, env, "", "-o", "json", "operators", "ls")
	var doc struct {
		Operators []operatorRecord `json:"operators"`
	}
	if err != nil || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Operators) != 2 || doc.Operators[1].DisabledAt == nil {
		t.Fatalf("ls -o json = %q, %v", out, err)
	}
	if strings.Contains(out, "passphrase") || strings.Contains(out, "argon2") {
		t.Fatal("ls shows a password or its hash")
	}
}
