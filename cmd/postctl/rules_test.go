package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/postline/postline/internal/failure"
)

// TestRulesPrint checks that rules prints the built-in file byte for byte,
// whatever --output says, and that the printed file loads.
func TestRulesPrint(t *testing.T) {
	for _, args := range [][]string{{"rules"}, {"-o", "json", "rules"}} {
		out, _, err := postctl(t, nil, "", args...)
		if err != nil {
			t.Fatal(err)
		}
		if out != string(failure.DefaultRulesYAML()) {
			t.Fatalf("%v printed %d bytes, not the built-in rules file", args, len(out))
		}
	}
}

func TestRulesCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	printed, _, err := postctl(t, nil, "", "rules")
	if err != nil {
		t.Fatal(err)
	}
	good := write("good.yaml", printed)
	n := len(failure.Default().Rules())
	if n < 2 {
		t.Fatalf("the built-in rules have %d rows", n)
	}
	const tail = "  - {name: soft-default, code_class: 4, class: transient, bounce: soft}\n" +
		"  - {name: hard-default, code_class: 5, class: permanent, bounce: hard}\n"
	small := write("small.yaml", "rules:\n  - {name: user-unknown, code: 550, enhanced: '5.1.1', class: permanent, bounce: hard, suppress: true}\n"+tail)
	badClass := write("bad-class.yaml", "rules:\n  - {name: odd, code: 550, class: fatal, bounce: soft}\n"+tail)
	noCatchAll := write("no-catch-all.yaml", "rules:\n  - {name: soft-default, code_class: 4, class: transient, bounce: soft}\n")
	notYAML := write("not-yaml.yaml", "rules: [")

	t.Run("good files", func(t *testing.T) {
		tests := []struct {
			path string
			want int
		}{{good, n}, {small, 3}}
		for _, tt := range tests {
			out, _, err := postctl(t, nil, "", "rules", "--check", tt.path)
			if err != nil || out != fmt.Sprintf("ok: %d rules\n", tt.want) {
				t.Errorf("check %s: %q, %v", tt.path, out, err)
			}
			out, _, err = postctl(t, nil, "", "-o", "json", "rules", "--check", tt.path)
			var got rulesCheck
			if err != nil || json.Unmarshal([]byte(out), &got) != nil || got != (rulesCheck{File: tt.path, OK: true, Rules: tt.want}) {
				t.Errorf("check %s as JSON: %q, %v", tt.path, out, err)
			}
		}
	})

	t.Run("broken files", func(t *testing.T) {
		tests := []struct {
			name, path string
			wantCode   int
			want       []string
		}{
			{"unknown class", badClass, exitFailure, []string{badClass, `rule 1 ("odd"): class "fatal"`}},
			{"no catch-all", noCatchAll, exitFailure, []string{noCatchAll, "no catch-all row for 5xx"}},
			{"not yaml", notYAML, exitFailure, []string{notYAML, "parse"}},
			{"missing file", filepath.Join(dir, "none.yaml"), exitFailure, []string{"none.yaml", "no such file"}},
			{"empty path", "", exitUsage, []string{"--check: give the rules file's path"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				out, _, err := postctl(t, nil, "", "rules", "--check", tt.path)
				if err == nil || exitCode(err) != tt.wantCode {
					t.Fatalf("got %v (output %q), want exit %d", err, out, tt.wantCode)
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				if out != "" {
					t.Errorf("a failed check printed %q", out)
				}
			})
		}
	})
}
